"""Run training scripts as written (fp32) and as amp-lint converts them to AMP, and judge whether both train alike.

Each script runs twice, each time in a fresh interpreter (``python -m amp_lint.verify.bootstrap``) with the same
seed, the same deterministic settings, the same working directory, arguments and device: once as written and once
as :func:`amp_lint.engine.convert.convert_source` rewrote it. The bootstrap records the loss of every training step, and
this module compares the two runs (see :func:`judge`). This parent process never imports torch; even whether CUDA
is available is asked of a child, so that ``amp-lint`` itself stays light.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from amp_lint.verify.bootstrap import PROGRESS_PREFIX, RunRecord, describe_exception

#: The fp32 training scripts shipped with amp-lint, verified when no script is named.
BUNDLED_SCRIPTS = Path(__file__).with_name("scripts")

#: Both runs must bring their loss (mean of the last k steps) below this fraction of the mean of the first k
#: steps. A comparison between runs that did not train says nothing, however close their losses are.
REQUIRED_LOSS_DROP = 0.8

#: Set in both runs' environment: the device the fixtures (and any script that reads it) must use.
DEVICE_ENVIRONMENT_VARIABLE = "AMP_LINT_VERIFY_DEVICE"

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
CRASHED = "crashed"

#: Lines of a child's own output kept for a crash that left no traceback (an exit code, a killed process).
_OUTPUT_TAIL_LINES = 10

Progress = Callable[[str], None]
Converter = Callable[..., Any]
"""``convert_source(source, *, amp_dtype, amp_device)``; its result has ``.code``, ``.converted``, ``.reasons``."""


class VerifyError(Exception):
    """The verification cannot start at all (no CUDA for ``--device cuda``, no conversion, no scripts)."""


@dataclass
class ScriptResult:
    """The verdict on one script, with the numbers it rests on."""

    script: Path
    status: str
    """:data:`EQUIVALENT`, :data:`NOT_EQUIVALENT` or :data:`CRASHED`."""
    reasons: list[str] = field(default_factory=list)
    """Why the script is not equivalent (empty otherwise)."""
    crash: str | None = None
    """For a crash: which phase failed, the exception and the last lines of its traceback."""
    fp32: RunRecord | None = None
    amp: RunRecord | None = None
    fp32_loss: float | None = None
    """Mean loss of the last k steps of the fp32 run."""
    amp_loss: float | None = None
    relative_difference: float | None = None
    """``|amp_loss - fp32_loss| / |fp32_loss|``."""
    speedup: float | None = None
    """fp32 time per step / AMP time per step."""


@dataclass
class VerifyReport:
    """What :func:`verify_scripts` found: the settings it ran with and one :class:`ScriptResult` per script."""

    device: str
    dtype: str
    steps: int
    warmup: int
    rtol: float
    last_k: int
    results: list[ScriptResult]
    notes: list[str]

    @property
    def exit_code(self) -> int:
        """0 when every script is equivalent, 1 when one is not, 2 when one crashed."""
        statuses = {result.status for result in self.results}
        return 2 if CRASHED in statuses else 1 if NOT_EQUIVALENT in statuses else 0

    def to_dict(self) -> dict[str, Any]:
        scripts = []
        for result in self.results:
            entry = asdict(result)
            entry["script"] = str(result.script)
            scripts.append(entry)
        return {
            "device": self.device,
            "dtype": self.dtype,
            "steps": self.steps,
            "warmup": self.warmup,
            "rtol": self.rtol,
            "last_k": self.last_k,
            "notes": self.notes,
            "scripts": _json_safe(scripts),
        }


def collect_scripts(paths: Sequence[str | Path]) -> list[Path]:
    """The scripts to verify: each file as given, each folder's ``*.py`` files; the bundled scripts by default."""
    scripts = []
    for path in map(Path, paths or [BUNDLED_SCRIPTS]):
        scripts += sorted(path.glob("*.py")) if path.is_dir() else [path]
    if not scripts:
        raise VerifyError(f"no *.py scripts found in {', '.join(map(str, paths))}")
    return scripts


def distinct_stems(scripts: Sequence[Path]) -> list[str]:
    """The scripts' file stems, numbered where two share one (``train``, ``train-2``), to name files after them."""
    stems: list[str] = []
    for script in scripts:
        stem, number = script.stem, 1
        while stem in stems:
            number += 1
            stem = f"{script.stem}-{number}"
        stems.append(stem)
    return stems


def child_environment(device: str) -> dict[str, str]:
    """The parent's environment, plus the device, cuBLAS determinism and an import path to this amp_lint."""
    import amp_lint

    environment = dict(os.environ)
    environment[DEVICE_ENVIRONMENT_VARIABLE] = device
    environment.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    package_root = str(Path(amp_lint.__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
    return environment


def verify_scripts(
    paths: Sequence[str | Path],
    *,
    device: str = "auto",
    dtype: str | None = None,
    steps: int,
    warmup: int,
    rtol: float = 0.05,
    last_k: int = 10,
    script_args: Sequence[str] = (),
    progress: Progress | None = None,
    converter: Converter | None = None,
    keep_converted: Path | None = None,
) -> VerifyReport:
    """Verify each script: convert it, run it both ways for ``steps`` training steps, and judge the two runs.

    ``device`` is ``"auto"`` (CUDA when torch sees it, else CPU), ``"cuda"`` or ``"cpu"``. ``dtype`` defaults to
    float16 on CUDA (autocast + GradScaler) and to bfloat16 on CPU (autocast only); float16 on CPU is allowed and
    then converts with ``GradScaler("cpu")``. ``converter`` replaces :func:`amp_lint.engine.convert.convert_source` (tests
    feed ready-made AMP programs through it); ``keep_converted`` is a folder to save the converted scripts in.
    """
    if not 1 <= warmup < steps:
        raise VerifyError(f"--warmup must be at least 1 and below --steps ({steps}), got {warmup}")
    if 2 * last_k > steps:
        raise VerifyError(f"--steps ({steps}) must be at least twice --last-k ({last_k})")
    if dtype not in (None, "float16", "bfloat16"):
        raise VerifyError(f"unsupported AMP dtype {dtype!r}: use float16 or bfloat16")
    device = _resolve_device(device)
    notes = []
    if dtype is None:
        dtype = "float16" if device == "cuda" else "bfloat16"
        if device == "cpu":
            notes.append(
                "On CPU the AMP dtype defaults to bfloat16 (autocast, no GradScaler); "
                "--dtype float16 checks float16 autocast with GradScaler('cpu')."
            )
    if device == "cpu":
        notes.append("CPU runs use CPU autocast: their speed-up and memory (peak RSS) are not GPU AMP numbers.")
    converter = converter or _load_converter()
    scripts = collect_scripts(paths)
    if keep_converted is not None:
        keep_converted.mkdir(parents=True, exist_ok=True)

    results = []
    with tempfile.TemporaryDirectory(prefix="amp-lint-verify-") as scratch:
        for index, (script, stem) in enumerate(zip(scripts, distinct_stems(scripts)), start=1):
            workdir = Path(scratch, str(index))
            workdir.mkdir()
            verifier = _ScriptVerifier(
                script=script,
                label=f"[{index}/{len(scripts)}] {script.name}",
                workdir=workdir,
                device=device,
                dtype=dtype,
                steps=steps,
                warmup=warmup,
                script_args=list(script_args),
                progress=progress,
            )
            result = verifier.run(converter)
            if keep_converted is not None and verifier.converted_code is not None:
                (keep_converted / f"{stem}.py").write_text(verifier.converted_code, encoding="utf-8")
            if result.crash is None and result.fp32 is not None and result.amp is not None:
                judge(result, rtol=rtol, last_k=last_k, dtype=dtype)
            results.append(result)
    return VerifyReport(device, dtype, steps, warmup, rtol, last_k, results, notes)


@dataclass
class _ScriptVerifier:
    """Converts one script and runs both versions of it; the runs' records go into a :class:`ScriptResult`."""

    script: Path
    label: str
    workdir: Path
    device: str
    dtype: str
    steps: int
    warmup: int
    script_args: list[str]
    progress: Progress | None
    converted_code: str | None = None

    def run(self, converter: Converter) -> ScriptResult:
        result = ScriptResult(self.script, status=CRASHED)
        self._report("converting")
        source = self.script.read_text(encoding="utf-8")
        try:
            conversion = converter(source, amp_dtype=self.dtype, amp_device=self.device)
        except Exception as exc:  # a failing conversion is this script's verdict, not the run's end
            result.crash = _crash_text("the conversion", describe_exception(exc))
            return result
        if not conversion.converted:
            result.status = NOT_EQUIVALENT
            why = "; ".join(conversion.reasons) or "no reason given"
            result.reasons.append(f"the conversion converted nothing: {why}")
            return result
        self.converted_code = conversion.code
        converted = self.workdir / self.script.name
        converted.write_text(conversion.code, encoding="utf-8")

        result.fp32, crash = self._run_child(self.script, "fp32")
        if crash is None:
            result.amp, crash = self._run_child(converted, "AMP")
        result.crash = crash
        return result

    def _run_child(self, program: Path, phase: str) -> tuple[RunRecord | None, str | None]:
        """Run ``program`` under the bootstrap; return its record, and a crash description if it crashed."""
        out = self.workdir / f"{phase.lower()}.json"
        command = [
            sys.executable, "-m", "amp_lint.verify.bootstrap",
            "--script", str(program), "--origin", str(self.script),
            "--steps", str(self.steps), "--warmup", str(self.warmup), "--out", str(out),
            "--", *self.script_args,
        ]  # fmt: skip
        self._report(f"{phase} run")
        output_tail: deque[str] = deque(maxlen=_OUTPUT_TAIL_LINES)
        with subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=child_environment(self.device),
        ) as child:
            assert child.stdout is not None
            for line in child.stdout:
                if line.startswith(PROGRESS_PREFIX):
                    self._report(f"{phase} run, step {line[len(PROGRESS_PREFIX) :].strip()}")
                else:
                    output_tail.append(line.rstrip("\n"))
        if not out.exists():
            lost = {"type": f"exit code {child.returncode}", "message": "no result written", "traceback_tail": []}
            return None, _crash_text(f"the {phase} run", lost, output_tail)
        record = RunRecord.read(out)
        if record.status == "ok":
            return record, None
        return record, _crash_text(f"the {phase} run", record.error or {}, output_tail)

    def _report(self, message: str) -> None:
        if self.progress is not None:
            self.progress(f"{self.label}: {message}")


def _crash_text(phase: str, error: dict[str, Any], output_tail: Sequence[str] = ()) -> str:
    """``<phase> crashed: Type: message`` and the traceback's last lines (else the program's last output)."""
    details = error.get("traceback_tail") or list(output_tail)
    headline = f"{phase} crashed: {error.get('type')}: {error.get('message')}"
    return "\n".join([headline] + [f"  {line}" for line in details])


def judge(result: ScriptResult, *, rtol: float, last_k: int, dtype: str) -> None:
    """Fill in ``result``'s numbers and verdict from its two completed runs.

    Equivalent means all of:

    * the AMP run's final loss (mean of the last ``last_k`` steps) is within ``rtol`` of the fp32 run's,
      relative to fp32's;
    * both losses fell clearly: final mean below :data:`REQUIRED_LOSS_DROP` times the mean of the first
      ``last_k`` steps (not counting the steps a GradScaler skipped at the start while calibrating its scale);
    * no non-finite loss in either run, except in those calibration steps;
    * AMP really ran: the converted script entered autocast enabled, with the requested dtype, and no autocast
      or GradScaler warning said it was "Disabling" itself.
    """
    fp32, amp = result.fp32, result.amp
    assert fp32 is not None and amp is not None
    reasons = result.reasons

    result.fp32_loss = _mean(fp32.losses[-last_k:])
    result.amp_loss = _mean(amp.losses[-last_k:])
    result.relative_difference = _relative_difference(result.amp_loss, result.fp32_loss)
    if fp32.seconds_per_step and amp.seconds_per_step:
        result.speedup = fp32.seconds_per_step / amp.seconds_per_step

    if len(fp32.losses) != len(amp.losses):
        reasons.append(f"the runs recorded different step counts: fp32 {len(fp32.losses)}, AMP {len(amp.losses)}")
    if min(len(fp32.losses), len(amp.losses)) < 2 * last_k:
        reasons.append(f"too few steps recorded to compare the first and last {last_k}")
    if not result.relative_difference <= rtol:  # also catches NaN
        reasons.append(
            f"AMP final loss {result.amp_loss:.4g} differs from fp32's {result.fp32_loss:.4g} "
            f"by {result.relative_difference:.1%} (rtol {rtol:.1%})"
        )
    for name, record in (("fp32", fp32), ("AMP", amp)):
        calibrating = _scaler_calibration_steps(record)
        first = _mean(record.losses[calibrating : calibrating + last_k])
        last = _mean(record.losses[-last_k:])
        if not last < REQUIRED_LOSS_DROP * first:
            reasons.append(
                f"the {name} loss did not fall clearly: last-{last_k} mean {last:.4g} is not below "
                f"{REQUIRED_LOSS_DROP} x first-{last_k} mean {first:.4g}"
            )
        late_nonfinite = [step for step, loss in enumerate(record.losses) if loss is None and step >= calibrating]
        if late_nonfinite:
            reasons.append(
                f"{len(late_nonfinite)} non-finite (or unrecorded) loss(es) in the {name} run, "
                f"the first at step {late_nonfinite[0]}"
            )

    enabled = [entry for entry in amp.autocast if entry["enabled"]]
    if not enabled:
        reasons.append("the converted script never entered an enabled autocast region: AMP did not run")
    elif all(entry["dtype"] != dtype for entry in enabled):
        used = ", ".join(sorted({entry["dtype"] for entry in enabled}))
        reasons.append(f"autocast ran with {used}, not the requested {dtype}")
    reasons += [f"AMP switched itself off: {warning.splitlines()[0]}" for warning in amp.disabling_warnings]
    result.status = NOT_EQUIVALENT if reasons else EQUIVALENT


def format_text(report: VerifyReport) -> str:
    """The verdict table, then why each script failed, then the notes."""
    header = ["script", "device/dtype", "steps", "fp32 loss", "AMP loss", "rel. diff", "speed-up",
              "memory fp32/AMP", "skipped", "verdict"]  # fmt: skip
    rows = [header] + [_table_row(result, report) for result in report.results]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for result in report.results:
        if result.crash:
            lines += ["", f"{result.script.name}: {result.crash}"]
        elif result.reasons:
            lines += ["", f"{result.script.name}: {result.status}"] + [f"  - {reason}" for reason in result.reasons]
    if report.notes:
        lines.append("")
        lines += [f"Note: {note}" for note in report.notes]
    return "\n".join(lines)


def write_loss_plots(report: VerifyReport, directory: Path) -> list[Path]:
    """One PNG per script with both loss curves. Needs matplotlib (the ``amp-lint[plot]`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for result, stem in zip(report.results, distinct_stems([result.script for result in report.results])):
        runs = [(name, record) for name, record in (("fp32", result.fp32), ("AMP", result.amp)) if record]
        if not runs:  # the conversion refused or failed: nothing ran
            continue
        figure, axes = plt.subplots(figsize=(7, 4))
        for name, record in runs:  # AMP dashed: where the runs agree, both curves stay visible
            losses = [math.nan if loss is None else loss for loss in record.losses]
            axes.plot(losses, label=name, linestyle="--" if name == "AMP" else "-")
        axes.set(xlabel="training step", ylabel="loss", title=f"{result.script.name}: {result.status}")
        axes.legend()
        path = directory / f"{stem}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def _table_row(result: ScriptResult, report: VerifyReport) -> list[str]:
    amp = result.amp
    device = (amp.device if amp and amp.device else report.device).split(":")[0]
    enabled = [entry["dtype"] for entry in amp.autocast if entry["enabled"]] if amp else []
    memory = "-"
    if result.fp32 and amp and result.fp32.peak_memory_bytes and amp.peak_memory_bytes:
        memory = f"{_mebibytes(result.fp32.peak_memory_bytes)}/{_mebibytes(amp.peak_memory_bytes)}"
    return [
        result.script.name,
        f"{device}/{enabled[0] if enabled else report.dtype}",
        str(len(amp.losses)) if amp else "-",
        _format(result.fp32_loss, ".4g"),
        _format(result.amp_loss, ".4g"),
        _format(result.relative_difference, ".1%"),
        _format(result.speedup, ".2f", suffix="x"),
        memory,
        str(len(amp.skipped_steps)) if amp else "-",
        result.status,
    ]


def _format(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _mebibytes(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def _mean(values: Sequence[float | None]) -> float:
    """The mean, NaN when any value is non-finite (recorded as None) or there are none."""
    if not values or any(value is None for value in values):
        return math.nan
    return math.fsum(values) / len(values)  # type: ignore[arg-type]


def _relative_difference(value: float, reference: float) -> float:
    if reference == 0:
        return 0.0 if value == 0 else math.inf
    return abs(value - reference) / abs(reference)


def _scaler_calibration_steps(record: RunRecord) -> int:
    """How many steps a GradScaler skipped right at the start, while it lowered its initial scale."""
    calibrating = 0
    while calibrating in record.skipped_steps:
        calibrating += 1
    return calibrating


def _resolve_device(device: str) -> str:
    if device not in ("auto", "cuda", "cpu"):
        raise VerifyError(f"unknown device {device!r}: use auto, cuda or cpu")
    if device == "cpu":
        return device
    cuda = _cuda_available()
    if device == "cuda" and not cuda:
        raise VerifyError("--device cuda: torch.cuda.is_available() is False in this Python")
    return "cuda" if cuda else "cpu"


def _cuda_available() -> bool:
    """Ask a child interpreter, so this process never imports torch or creates a CUDA context."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        raise VerifyError(f"could not import torch: {probe.stderr.strip().splitlines()[-1:]}")
    return probe.stdout.strip() == "True"


def _load_converter() -> Converter:
    try:
        from amp_lint.engine.convert import convert_source
    except ImportError as exc:
        raise VerifyError(f"the fp32 -> AMP conversion (amp_lint.engine.convert) is not available: {exc}") from exc
    return convert_source


def _json_safe(value: Any) -> Any:
    """Replace NaN and infinities, which JSON lacks, by null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value
