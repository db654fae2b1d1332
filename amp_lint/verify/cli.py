"""``amp-lint verify``: the command line over :func:`amp_lint.verify.runner.verify_scripts`; it holds no logic."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import click

from amp_lint.verify.child import DEFAULT_TIMEOUT

TORCH_MISSING = (
    "amp-lint verify needs PyTorch: for the CPU-only build (about 200 MB) run "
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`; "
    "`pip install torch` installs the default build, with the CUDA libraries (about 3 GB)"
)

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
    help="Where both sides train; auto means CUDA when torch sees it. cpu hides CUDA from the scripts.",
)
@click.option(
    "--dtype",
    type=click.Choice(["float16", "bfloat16"]),
    default="float16",
    show_default=True,
    help="AMP dtype of the conversion (float16: autocast + GradScaler), as `amp-lint --fix` writes it.",
)
@click.option(
    "--amp-device",
    help="Device type the conversion writes (cuda, cpu, ...). Default: the script's own device expression.",
)
@click.option(
    "--amp-script",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Your own AMP version of the (one) SCRIPT, compared instead of amp-lint's conversion.",
)
@click.option("--steps", type=click.IntRange(min=2), default=200, show_default=True, help="Training steps per run.")
@click.option(
    "--warmup",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Steps left out of the comparison and the speed measurement.",
)
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per side, one per seed.")
@click.option(
    "--first-seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The first run's seed; the others follow it (0: the first run is the script exactly as written).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="The band: how many times the seed-to-seed error of the paired (same seed) AMP - fp32 differences the mean "
    "gap may reach; the noise is at least the AMP dtype's rounding of the loss (2^-11 for float16, 2^-8 for "
    "bfloat16), so the band is at least 0.15% (float16) or 1.2% (bfloat16) of the loss at the default 3.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds one run (one side of a script, every seed) may take; a run past it is stopped, with every process "
    "it started, and the script is 'not run: timed out'. 0: no limit.",
)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("amp-lint-verify"),
    show_default=True,
    help="Folder for each script's per-step losses (losses.csv) and plot (losses.png, needs matplotlib). The "
    "default folder holds a .gitignore of '*', so that git does not see it.",
)
@click.option("--no-files", is_flag=True, help="Write no CSV or plot.")
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
    dtype: str,
    amp_device: str | None,
    amp_script: Path | None,
    steps: int,
    warmup: int,
    seeds: int,
    first_seed: int,
    tolerance: float,
    timeout: float,
    output_format: str,
    output_dir: Path,
    no_files: bool,
    keep_converted: Path | None,
) -> None:
    """Train scripts as written (fp32) and converted to AMP, several seeds each, and judge whether they train alike.

    This RUNS the scripts it is given (and the modules they import), on both sides, as `python SCRIPT` would: only
    verify code you would run yourself.

    Each SCRIPT_OR_DIR (a folder means its *.py files; default: the scripts bundled with amp-lint) runs from its
    own folder on both sides for --steps training steps, --seeds times each, with the same seeds on both sides. The
    AMP side is the code `amp-lint --select AMP100 --fix --unsafe-fixes` would write (with the local modules the
    script imports converted too), or --amp-script, and runs under the runtime guard (amp_lint.guard), whose
    findings explain a failure. After the warm-up, seed i's smoothed AMP curve is compared with seed i's fp32
    curve; the table shows the mean gap, the allowed band, how much fp32 fell, the steps the GradScaler skipped,
    the step where the curves part (for a script that is not equivalent) and AMP's speed-up. With several losses per
    step (a GAN's pair), each loss is compared with its fp32 twin, and the report says which loss was judged. Arguments after -- are passed to every script. Progress
    goes to stderr: every tenth of each seed's steps on a terminal, one line per phase otherwise.

    Exit status: 0 equivalent, 1 not equivalent (the curves disagree beyond the noise, or AMP crashed), 3
    inconclusive (too few steps, or fp32 itself did not learn), 4 not run (refused, converted nothing, crashed before a step, timed out, or AMP did not
    really run); with several scripts, the first of 1, 4, 3, 0 that occurs. 2: a usage
    error, or the tool could not run.
    """
    if importlib.util.find_spec("torch") is None:
        click.echo(TORCH_MISSING, err=True)
        ctx.exit(2)

    from amp_lint.verify.reporting import ignored_by_git
    from amp_lint.verify.runner import VerifyError, format_text, verify_scripts

    if not no_files and ctx.get_parameter_source("output_dir") is click.core.ParameterSource.DEFAULT:
        ignored_by_git(output_dir)

    try:
        report = verify_scripts(
            paths,
            device=device,
            dtype=dtype,
            amp_device=amp_device,
            amp_script=amp_script,
            steps=steps,
            warmup=warmup,
            seeds=seeds,
            first_seed=first_seed,
            tolerance=tolerance,
            timeout=timeout or None,
            script_args=ctx.meta.get(_SCRIPT_ARGS, ()),
            progress=lambda message: click.echo(message, err=True),
            progress_steps=_is_terminal(sys.stderr),
            keep_converted=keep_converted,
            output_dir=None if no_files else output_dir.resolve(),
        )
    except VerifyError as exc:
        click.echo(f"amp-lint verify: {exc}", err=True)
        ctx.exit(2)

    if output_format == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(format_text(report))
    ctx.exit(report.exit_code)


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stream
        return False
