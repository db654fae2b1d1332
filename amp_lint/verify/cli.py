"""``amp-lint verify``: the command line over :func:`amp_lint.verify.runner.verify_scripts`; it holds no logic."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

TORCH_MISSING = (
    "amp-lint verify needs PyTorch: for the CPU-only build (about 200 MB) run "
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`; "
    "`pip install 'amp-lint[verify]'` installs the default build, with the CUDA libraries (about 3 GB)"
)
MATPLOTLIB_MISSING = "--plot needs matplotlib: pip install 'amp-lint[plot]'"

_SCRIPT_ARGS = "amp_lint.verify.script_args"


class _CommandWithScriptArgs(click.Command):
    """Cuts the command line at ``--``: what follows is passed to the training scripts, not parsed by amp-lint."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            args, ctx.meta[_SCRIPT_ARGS] = args[:cut], args[cut + 1 :]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- SCRIPT_ARGS...]"]


@click.command("verify", cls=_CommandWithScriptArgs)
@click.argument("paths", metavar="[SCRIPT_OR_DIR]...", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="Where both runs train; auto means CUDA when torch sees it.",
)
@click.option(
    "--dtype",
    type=click.Choice(["float16", "bfloat16"]),
    help="AMP dtype. Default: float16 (with GradScaler) on CUDA, bfloat16 on CPU.",
)
@click.option("--steps", type=click.IntRange(min=2), default=200, show_default=True, help="Training steps per run.")
@click.option(
    "--warmup",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Steps left out of the speed measurement.",
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0, min_open=True),
    default=0.05,
    show_default=True,
    help="Largest relative difference between the final fp32 and AMP losses.",
)
@click.option(
    "--last-k",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Steps averaged for the final (and the first) loss.",
)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--plot",
    "plot_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one PNG per script with both loss curves to this folder (needs matplotlib).",
)
@click.option(
    "--keep-converted",
    type=click.Path(file_okay=False, path_type=Path),
    help="Save the converted (AMP) scripts to this folder for review.",
)
@click.pass_context
def verify(
    ctx: click.Context,
    paths: tuple[Path, ...],
    device: str,
    dtype: str | None,
    steps: int,
    warmup: int,
    rtol: float,
    last_k: int,
    output_format: str,
    plot_dir: Path | None,
    keep_converted: Path | None,
) -> None:
    """Train scripts as written (fp32) and as amp-lint converts them to AMP, and check both converge alike.

    Each SCRIPT_OR_DIR (a folder means its *.py files; default: the scripts bundled with amp-lint) runs twice for
    --steps training steps with the same seed, and the table shows both final losses, AMP's speed-up and memory,
    and the verdict. Arguments after -- are passed to every script.

    Exit status: 0 all equivalent, 1 some not equivalent, 2 a crash or a usage error.
    """
    if importlib.util.find_spec("torch") is None:
        click.echo(TORCH_MISSING, err=True)
        ctx.exit(2)
    if plot_dir is not None and importlib.util.find_spec("matplotlib") is None:
        click.echo(MATPLOTLIB_MISSING, err=True)
        ctx.exit(2)

    from amp_lint.verify.runner import VerifyError, format_text, verify_scripts, write_loss_plots

    try:
        report = verify_scripts(
            paths,
            device=device,
            dtype=dtype,
            steps=steps,
            warmup=warmup,
            rtol=rtol,
            last_k=last_k,
            script_args=ctx.meta.get(_SCRIPT_ARGS, ()),
            progress=lambda message: click.echo(message, err=True),
            keep_converted=keep_converted,
        )
    except VerifyError as exc:
        click.echo(f"amp-lint verify: {exc}", err=True)
        ctx.exit(2)

    if output_format == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(format_text(report))
    if plot_dir is not None:
        for path in write_loss_plots(report, plot_dir):
            click.echo(f"wrote {path}", err=True)
    ctx.exit(report.exit_code)
