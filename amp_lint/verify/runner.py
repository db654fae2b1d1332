"""Run training scripts as written (fp32) and as converted to AMP, several seeds each, and judge whether both train
alike.

Each side runs in a fresh interpreter (``python -m amp_lint.verify.bootstrap``) from the script's own folder, once per
seed (default 3), with the same deterministic settings, arguments and device: the fp32 side as written, the AMP side
as :func:`amp_lint.engine.convert.convert_source` rewrites it (the same code ``amp-lint --select AMP100 --fix
--unsafe-fixes`` writes, with the local modules the script imports converted too), or as the user's own AMP version
(``amp_script``). The bootstrap records the loss of every training step; :func:`judge` compares the two sides against
the fp32 side's own seed-to-seed spread. This parent process never imports torch; even whether CUDA is available is
asked of a child, so that ``amp-lint`` itself stays light.

Verdicts and exit codes (:data:`EXIT_CODES`): ``equivalent`` 0, ``not equivalent`` 1, ``inconclusive`` 3, ``not
run`` 4; the report's exit code is the worst verdict's, in the order not equivalent > not run > inconclusive >
equivalent (2 is left to usage errors: the tool could not do its job).
"""

from __future__ import annotations

import ast
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from amp_lint.verify.bootstrap import PROGRESS_PREFIX, RunRecord, describe_exception, read_records

#: The fp32 training scripts shipped with amp-lint, verified when no script is named.
BUNDLED_SCRIPTS = Path(__file__).with_name("scripts")

#: Set in both runs' environment: the device the fixtures (and any script that reads it) must use.
DEVICE_ENVIRONMENT_VARIABLE = "AMP_LINT_VERIFY_DEVICE"

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
INCONCLUSIVE = "inconclusive"
NOT_RUN = "not run"

EXIT_CODES = {EQUIVALENT: 0, NOT_EQUIVALENT: 1, INCONCLUSIVE: 3, NOT_RUN: 4}
#: The worst verdict decides the exit code.
SEVERITY = (NOT_EQUIVALENT, NOT_RUN, INCONCLUSIVE, EQUIVALENT)

#: Fewer compared steps (after the warm-up) than this: the comparison says nothing.
MIN_COMPARED_STEPS = 10
#: The smallest noise band, relative to the fp32 loss: seeds that do not change the run (a script that ignores
#: them, a deterministic data set and initialisation) still leave float16 rounding room.
NOISE_FLOOR = 0.01
#: AMP steps with a non-finite loss (after the GradScaler's first calibration steps) tolerated, as a fraction.
MAX_NONFINITE_FRACTION = 0.1
#: Timed windows per run for the speed-up.
SPEED_WINDOWS = 5

#: Lines of a child's own output kept for a crash that left no traceback (an exit code, a killed process).
_OUTPUT_TAIL_LINES = 10

Progress = Callable[[str], None]
Converter = Callable[..., Any]
"""``convert_source(source, *, amp_dtype, amp_device)``; its result has ``.code``, ``.converted``, ``.reasons``."""


class VerifyError(Exception):
    """The verification cannot start at all (no CUDA for ``--device cuda``, no scripts, bad options)."""


@dataclass
class Judgement:
    """The numbers a verdict rests on, over the smoothed curves after the warm-up (relative to the fp32 loss)."""

    compared_steps: int
    smoothing: int
    """Steps per moving-average window."""
    gap: float
    """Mean |AMP - fp32| of the seed-mean curves, relative to the mean fp32 loss."""
    spread: float
    """Mean seed-to-seed standard deviation of the fp32 curves, relative to the mean fp32 loss."""
    allowed: float
    """The largest mean gap still within the noise (tolerance x the noise of a difference of seed means)."""
    largest_gap: float
    largest_gap_step: int
    parted_at: int | None
    """The first step where the gap leaves the noise band (None: never)."""
    fp32_drop: float
    """How much the fp32 curve fell from the first to the last compared step, relative to its start."""


@dataclass
class ScriptResult:
    """The verdict on one script, with the numbers it rests on."""

    script: Path
    status: str
    """:data:`EQUIVALENT`, :data:`NOT_EQUIVALENT`, :data:`INCONCLUSIVE` or :data:`NOT_RUN`."""
    reasons: list[str] = field(default_factory=list)
    """Why the verdict is not "equivalent" (empty otherwise)."""
    crash: str | None = None
    """For a crash: which run failed, the exception and the last lines of its traceback."""
    fp32: list[RunRecord] = field(default_factory=list)
    amp: list[RunRecord] = field(default_factory=list)
    judgement: Judgement | None = None
    speedup: float | None = None
    """Median fp32 time per step / median AMP time per step, over timed windows of every seed."""
    speedup_range: tuple[float, float] | None = None
    """The speed-up from the windows' quartiles: (slow AMP quartile, fast AMP quartile)."""
    converted_modules: list[str] = field(default_factory=list)
    amp_source: str = "amp-lint's conversion"
    files: list[str] = field(default_factory=list)


@dataclass
class VerifyReport:
    """What :func:`verify_scripts` found: the settings it ran with and one :class:`ScriptResult` per script."""

    device: str
    dtype: str
    steps: int
    warmup: int
    seeds: int
    tolerance: float
    results: list[ScriptResult]
    notes: list[str]
    output_dir: Path | None = None

    @property
    def exit_code(self) -> int:
        """The worst verdict's code (:data:`EXIT_CODES`); 0 when every script is equivalent."""
        statuses = {result.status for result in self.results}
        for status in SEVERITY:
            if status in statuses:
                return EXIT_CODES[status]
        return 0

    def to_dict(self) -> dict[str, Any]:
        scripts = []
        for result in self.results:
            entry = asdict(result)
            entry["script"] = str(result.script)
            entry["exit_code"] = EXIT_CODES[result.status]
            scripts.append(entry)
        return {
            "device": self.device,
            "dtype": self.dtype,
            "steps": self.steps,
            "warmup": self.warmup,
            "seeds": self.seeds,
            "tolerance": self.tolerance,
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "exit_code": self.exit_code,
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
    return [script.resolve() for script in scripts]


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
    """The parent's environment, plus the device, cuBLAS determinism and an import path to this amp_lint.

    On ``--device cpu`` CUDA is hidden from the children, so a script that picks its own device picks the CPU.
    """
    import amp_lint

    environment = dict(os.environ)
    environment[DEVICE_ENVIRONMENT_VARIABLE] = device
    environment.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if device == "cpu":
        environment["CUDA_VISIBLE_DEVICES"] = ""
    package_root = str(Path(amp_lint.__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
    return environment


def verify_scripts(
    paths: Sequence[str | Path],
    *,
    device: str = "auto",
    dtype: str | None = None,
    amp_device: str | None = None,
    steps: int,
    warmup: int,
    seeds: int = 3,
    tolerance: float = 3.0,
    script_args: Sequence[str] = (),
    progress: Progress | None = None,
    converter: Converter | None = None,
    keep_converted: Path | None = None,
    amp_script: Path | None = None,
    output_dir: Path | None = None,
) -> VerifyReport:
    """Verify each script: convert it, run both sides ``seeds`` times for ``steps`` training steps, and judge.

    ``device`` is ``"auto"`` (CUDA when torch sees it, else CPU), ``"cuda"`` or ``"cpu"``: where the runs happen.
    ``dtype`` (default float16, as ``amp-lint --fix`` writes) and ``amp_device`` (default: the device expression
    the script itself uses, as ``amp-lint --fix`` writes) shape the conversion. ``amp_script`` is the user's own
    AMP version of the one script named, run instead of a conversion. ``converter`` replaces
    :func:`amp_lint.engine.convert.convert_source` (tests feed ready-made AMP programs through it);
    ``keep_converted`` is a folder to save the converted scripts in; ``output_dir`` gets per-script loss CSVs and
    plots (None: no files).
    """
    if not 1 <= warmup < steps:
        raise VerifyError(f"--warmup must be at least 1 and below --steps ({steps}), got {warmup}")
    if seeds < 1:
        raise VerifyError(f"--seeds must be at least 1, got {seeds}")
    if dtype not in (None, "float16", "bfloat16"):
        raise VerifyError(f"unsupported AMP dtype {dtype!r}: use float16 or bfloat16")
    dtype = dtype or "float16"
    scripts = collect_scripts(paths)
    if amp_script is not None:
        if len(scripts) != 1:
            raise VerifyError("--amp-script compares one script: name exactly one SCRIPT")
        if not Path(amp_script).is_file():
            raise VerifyError(f"--amp-script {amp_script}: no such file")
    device = _resolve_device(device)
    notes = []
    if device == "cpu":
        notes.append("CPU runs use CPU autocast: their speed-up and memory (peak RSS) are not GPU AMP numbers.")
    if seeds == 1:
        notes.append("One seed per side: no seed-to-seed spread; the gap is judged against a 1% band only.")
    converter = converter or _load_converter()
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
                amp_device=amp_device,
                steps=steps,
                warmup=warmup,
                seeds=seeds,
                script_args=list(script_args),
                progress=progress,
                amp_script=Path(amp_script).resolve() if amp_script is not None else None,
            )
            result = verifier.run(converter)
            if keep_converted is not None:
                for name, code in verifier.converted_files.items():
                    target = keep_converted / (f"{stem}.py" if name == "__main__" else f"{stem}.{name}.py")
                    target.write_text(code, encoding="utf-8")
            if result.status is None:  # both sides ran: judge them
                judge(result, warmup=warmup, tolerance=tolerance, dtype=dtype, own_amp=amp_script is not None)
            if result.fp32 or result.amp:
                _measure_speed(result)
            if output_dir is not None:
                result.files = write_result_files(result, output_dir / stem, warmup)
            results.append(result)
    if output_dir is not None and importlib_missing("matplotlib"):
        notes.append("No loss plots: they need matplotlib (pip install 'amp-lint[plot]'); the CSVs are written.")
    return VerifyReport(device, dtype, steps, warmup, seeds, tolerance, results, notes, output_dir)


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


@dataclass
class _ScriptVerifier:
    """Converts one script (and its local modules) and runs both sides; their records go into a ScriptResult."""

    script: Path
    label: str
    workdir: Path
    device: str
    dtype: str
    amp_device: str | None
    steps: int
    warmup: int
    seeds: int
    script_args: list[str]
    progress: Progress | None
    amp_script: Path | None = None
    converted_files: dict[str, str] = field(default_factory=dict)

    def run(self, converter: Converter) -> ScriptResult:
        result = ScriptResult(self.script, status=None)  # type: ignore[arg-type]  # set by judge or below
        modules: dict[str, str] = {}
        if self.amp_script is not None:
            amp_program, amp_origin = self.amp_script, self.amp_script
            result.amp_source = str(self.amp_script)
        else:
            self._report("converting")
            try:
                converted, reasons = self._convert(converter, modules)
            except Exception as exc:  # a failing conversion is this script's verdict, not the run's end
                result.status = NOT_RUN
                result.crash = _crash_text("the conversion", describe_exception(exc))
                return result
            if not converted:
                result.status = NOT_RUN
                why = "; ".join(reasons) or "no reason given"
                result.reasons.append(f"the conversion converted nothing: {why}")
                return result
            result.converted_modules = sorted(name for name in modules)
            amp_program, amp_origin = self.workdir / self.script.name, self.script
            if "__main__" not in self.converted_files:
                amp_program = self.script

        seeds = ",".join(str(seed) for seed in range(self.seeds))
        result.fp32, crash = self._run_child(self.script, self.script, "fp32", seeds, {})
        if crash is None:
            result.amp, crash = self._run_child(amp_program, amp_origin, "AMP", seeds, modules)
            if crash is not None:
                side = "AMP"
        else:
            side = "fp32"
        if crash is not None:
            result.crash = crash
            records = result.fp32 if side == "fp32" else result.amp
            steps = len(records[-1].losses) if records else 0
            if steps == 0:
                result.status = NOT_RUN
                result.reasons.append(f"the {side} run crashed before its first training step")
            elif side == "AMP":
                result.status = NOT_EQUIVALENT
                result.reasons.append(f"the AMP run crashed after {steps} training step(s); the fp32 run did not")
            else:
                result.status = INCONCLUSIVE
                result.reasons.append(f"the fp32 run itself crashed after {steps} training step(s)")
        return result

    def _convert(self, converter: Converter, modules: dict[str, str]) -> tuple[bool, list[str]]:
        """Convert the script and the local modules it imports; fill ``modules`` (name -> converted file)."""
        source = self.script.read_text(encoding="utf-8")
        conversion = converter(source, amp_dtype=self.dtype, amp_device=self.amp_device)
        reasons = [f"{self.script.name}: {reason}" for reason in conversion.reasons]
        any_converted = bool(conversion.converted)
        if conversion.converted:
            self.converted_files["__main__"] = conversion.code
            (self.workdir / self.script.name).write_text(conversion.code, encoding="utf-8")
        for name, path in local_imports(self.script):
            module_source = path.read_text(encoding="utf-8")
            module_conversion = converter(module_source, amp_dtype=self.dtype, amp_device=self.amp_device)
            if module_conversion.converted:
                any_converted = True
                target = self.workdir / f"module-{name}.py"
                target.write_text(module_conversion.code, encoding="utf-8")
                modules[name] = str(target)
                self.converted_files[name] = module_conversion.code
        return any_converted, reasons

    def _run_child(
        self, program: Path, origin: Path, phase: str, seeds: str, modules: dict[str, str]
    ) -> tuple[list[RunRecord], str | None]:
        """Run ``program`` under the bootstrap for every seed; return the records and a crash description."""
        out = self.workdir / f"{phase.lower()}.json"
        command = [
            sys.executable, "-m", "amp_lint.verify.bootstrap",
            "--script", str(program), "--origin", str(origin), "--seeds", seeds,
            "--steps", str(self.steps), "--warmup", str(self.warmup), "--out", str(out),
            *[f"--module={name}={path}" for name, path in sorted(modules.items())],
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
            cwd=origin.parent,
        ) as child:
            assert child.stdout is not None
            for line in child.stdout:
                if line.startswith(PROGRESS_PREFIX):
                    self._report(f"{phase} run, step {line[len(PROGRESS_PREFIX) :].strip()}")
                else:
                    output_tail.append(line.rstrip("\n"))
        if not out.exists():
            lost = {"type": f"exit code {child.returncode}", "message": "no result written", "traceback_tail": []}
            return [], _crash_text(f"the {phase} run", lost, output_tail)
        records = read_records(out)
        crashed = next((record for record in records if record.status != "ok"), None)
        if crashed is None:
            return records, None
        return records, _crash_text(f"the {phase} run (seed {crashed.seed})", crashed.error or {}, output_tail)

    def _report(self, message: str) -> None:
        if self.progress is not None:
            self.progress(f"{self.label}: {message}")


def local_imports(script: Path, depth: int = 3) -> list[tuple[str, Path]]:
    """The modules of the script's own folder that it imports (``import model``, ``from mingpt.trainer import
    Trainer``), and theirs in turn, as (dotted name, file)."""
    root = script.parent
    found: dict[str, Path] = {}
    pending = [(script, 0)]
    while pending:
        path, level = pending.pop()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
                names += [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                dotted = ".".join(parts[:end])
                candidate = root.joinpath(*parts[:end])
                file = candidate.with_suffix(".py") if candidate.with_suffix(".py").is_file() else candidate / "__init__.py"
                if not file.is_file() or dotted in found or file.resolve() == script.resolve():
                    continue
                found[dotted] = file
                if level + 1 < depth:
                    pending.append((file, level + 1))
    return sorted(found.items())


def _crash_text(phase: str, error: dict[str, Any], output_tail: Sequence[str] = ()) -> str:
    """``<phase> crashed: Type: message`` and the traceback's last lines (else the program's last output)."""
    details = error.get("traceback_tail") or list(output_tail)
    headline = f"{phase} crashed: {error.get('type')}: {error.get('message')}"
    return "\n".join([headline] + [f"  {line}" for line in details])


# --- the judgement ----------------------------------------------------------------------------------------------


def judge(result: ScriptResult, *, warmup: int, tolerance: float, dtype: str, own_amp: bool = False) -> None:
    """Set ``result``'s verdict from its completed runs (several seeds per side).

    After the warm-up, each run's loss curve is smoothed (moving average over a tenth of the compared steps); the
    gap between the AMP and fp32 seed-mean curves is compared with the noise of a difference of two seed means,
    ``spread x sqrt(1/n_fp32 + 1/n_amp)`` where spread is the fp32 curves' seed-to-seed standard deviation at each
    step (at least :data:`NOISE_FLOOR` of the fp32 loss). The sides are *not equivalent* when the mean gap over the
    whole compared curve exceeds ``tolerance`` times the mean noise, or when the AMP loss is non-finite in more than
    :data:`MAX_NONFINITE_FRACTION` of the steps. Otherwise they are *equivalent*, unless the evidence is too thin:
    *inconclusive* when fewer than :data:`MIN_COMPARED_STEPS` steps follow the warm-up, or when the fp32 curve did
    not fall beyond its own noise (agreeing curves that do not learn say nothing). *Not run* when AMP never really
    ran (no enabled autocast, autocast on another device than the parameters', or AMP switching itself off) or no
    training step was recorded at all.
    """
    reasons = result.reasons
    fp32, amp = result.fp32, result.amp
    not_run = _amp_did_not_run(amp, dtype, own_amp)
    if not_run:
        result.status, reasons[:] = NOT_RUN, not_run
        return
    length = min(len(record.losses) for record in [*fp32, *amp])
    if length == 0:
        side = "fp32" if min(len(record.losses) for record in fp32) == 0 else "AMP"
        result.status = NOT_RUN
        reasons.append(
            f"the {side} run recorded no training step: the script ended before its first optimizer step "
            "(or trains in subprocesses, which verify does not follow)"
        )
        return
    compared = length - warmup
    if compared < MIN_COMPARED_STEPS:
        result.status = INCONCLUSIVE
        reasons.append(
            f"too few steps: {length} recorded, {max(compared, 0)} after the warm-up of {warmup} "
            f"(at least {MIN_COMPARED_STEPS} are needed)"
        )
        return
    nonfinite = [
        sum(1 for step, loss in enumerate(record.losses[:length]) if loss is None and step >= _calibration(record))
        for record in amp
    ]
    if max(nonfinite) > MAX_NONFINITE_FRACTION * length:
        result.status = NOT_EQUIVALENT
        reasons.append(f"the AMP loss is non-finite in {max(nonfinite)} of {length} steps (one seed)")
        return
    window = max(1, compared // 10)
    fp32_curves = [_smooth(_filled(record.losses[:length]), warmup, window) for record in fp32]
    amp_curves = [_smooth(_filled(record.losses[:length]), warmup, window) for record in amp]
    if any(curve is None for curve in fp32_curves):
        result.status = INCONCLUSIVE
        reasons.append("the fp32 run's own loss is not finite: nothing to compare with")
        return
    if any(curve is None for curve in amp_curves):
        result.status = NOT_EQUIVALENT
        reasons.append("the AMP run's loss is not finite")
        return
    points = len(fp32_curves[0])
    fp32_mean = [statistics.fmean(curve[t] for curve in fp32_curves) for t in range(points)]
    amp_mean = [statistics.fmean(curve[t] for curve in amp_curves) for t in range(points)]
    factor = math.sqrt(1 / len(fp32_curves) + 1 / len(amp_curves))
    spread = [statistics.stdev(curve[t] for curve in fp32_curves) if len(fp32_curves) > 1 else 0.0 for t in range(points)]
    noise = [max(spread[t] * factor, NOISE_FLOOR * abs(fp32_mean[t])) for t in range(points)]
    gap = [amp_mean[t] - fp32_mean[t] for t in range(points)]
    scale = statistics.fmean(abs(value) for value in fp32_mean) or 1.0
    mean_gap = statistics.fmean(abs(value) for value in gap)
    allowed = tolerance * statistics.fmean(noise)
    largest = max(range(points), key=lambda t: abs(gap[t]))
    parted = next((t for t in range(points) if abs(gap[t]) > tolerance * noise[t]), None)
    first_step = warmup + window - 1  # the step the first smoothed point ends at
    start, end = fp32_mean[0], fp32_mean[-1]
    result.judgement = Judgement(
        compared_steps=compared,
        smoothing=window,
        gap=mean_gap / scale,
        spread=statistics.fmean(spread) / scale,
        allowed=allowed / scale,
        largest_gap=abs(gap[largest]) / scale,
        largest_gap_step=first_step + largest,
        parted_at=first_step + parted if parted is not None else None,
        fp32_drop=(start - end) / abs(start) if start else 0.0,
    )
    if mean_gap > allowed:
        result.status = NOT_EQUIVALENT
        where = f", the curves part at step {first_step + parted}" if parted is not None else ""
        reasons.append(
            f"the AMP curve is {mean_gap / scale:.1%} away from fp32's on average, beyond the noise "
            f"({allowed / scale:.1%}: {tolerance:g} x fp32's seed-to-seed spread{where})"
        )
        return
    if start - end <= 2 * statistics.fmean(noise[: max(1, points // 10)] + noise[-max(1, points // 10) :]):
        result.status = INCONCLUSIVE
        reasons.append(
            f"fp32 itself did not learn: its loss went from {start:.4g} to {end:.4g} after the warm-up, within its "
            "own noise; agreeing curves that do not fall say nothing (train longer: --steps)"
        )
        return
    result.status = EQUIVALENT


def _amp_did_not_run(amp: Sequence[RunRecord], dtype: str, own_amp: bool) -> list[str]:
    reasons = []
    record = amp[0]
    enabled = [entry for entry in record.autocast if entry["enabled"]]
    parameters = (record.device or "").split(":")[0]
    if not enabled:
        reasons.append("AMP did not run: the AMP script never entered an enabled autocast region")
    elif parameters and all(entry["device_type"] != parameters for entry in enabled):
        used = ", ".join(sorted({entry["device_type"] for entry in enabled}))
        reasons.append(
            f"AMP did not run: autocast was entered for {used}, but the parameters are on {parameters}, "
            "so everything ran in fp32"
        )
    elif not own_amp and all(entry["dtype"] != dtype for entry in enabled):
        used = ", ".join(sorted({entry["dtype"] for entry in enabled}))
        reasons.append(f"AMP did not run as asked: autocast ran with {used}, not {dtype}")
    reasons += [f"AMP did not run: it switched itself off: {warning.splitlines()[0]}" for warning in record.disabling_warnings]
    return reasons


def _calibration(record: RunRecord) -> int:
    """How many steps a GradScaler skipped right at the start, while it lowered its initial scale."""
    calibrating = 0
    while calibrating in record.skipped_steps:
        calibrating += 1
    return calibrating


def _filled(losses: Sequence[float | None]) -> list[float | None]:
    """Non-finite losses (skipped steps) replaced by the previous finite one; None until the first finite one."""
    filled: list[float | None] = []
    last = None
    for loss in losses:
        last = loss if loss is not None else last
        filled.append(last)
    return filled


def _smooth(losses: Sequence[float | None], warmup: int, window: int) -> list[float] | None:
    """Trailing moving averages over ``window`` steps, for the steps after the warm-up; None if a value is missing."""
    values = list(losses)
    if any(value is None for value in values[warmup:]):
        return None
    tail = [float(value) for value in values[warmup:]]  # type: ignore[arg-type]
    return [statistics.fmean(tail[t - window + 1 : t + 1]) for t in range(window - 1, len(tail))]


# --- speed ------------------------------------------------------------------------------------------------------


def _measure_speed(result: ScriptResult) -> None:
    fp32 = _windows(result.fp32)
    amp = _windows(result.amp)
    if not fp32 or not amp:
        return
    result.speedup = statistics.median(fp32) / statistics.median(amp)
    if len(fp32) >= 2 and len(amp) >= 2:
        fp32_q = statistics.quantiles(fp32, n=4)
        amp_q = statistics.quantiles(amp, n=4)
        result.speedup_range = (fp32_q[0] / amp_q[2], fp32_q[2] / amp_q[0])


def _windows(records: Sequence[RunRecord]) -> list[float]:
    """Mean seconds per step of :data:`SPEED_WINDOWS` consecutive windows of each run, after the warm-up."""
    windows = []
    for record in records:
        times = record.step_seconds
        size = max(1, len(times) // SPEED_WINDOWS)
        for start in range(0, len(times) - size + 1, size):
            windows.append(statistics.fmean(times[start : start + size]))
    return windows


# --- files ------------------------------------------------------------------------------------------------------


def write_result_files(result: ScriptResult, folder: Path, warmup: int) -> list[str]:
    """``losses.csv`` (one column per side and seed) and, with matplotlib, ``losses.png``; returns the paths."""
    runs = [(f"fp32_seed{r.seed}", r) for r in result.fp32] + [(f"amp_seed{r.seed}", r) for r in result.amp]
    if not runs:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "losses.csv"
    length = max(len(record.losses) for _, record in runs)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", *(name for name, _ in runs)])
        for step in range(length):
            row = [record.losses[step] if step < len(record.losses) else None for _, record in runs]
            writer.writerow([step, *("" if value is None else f"{value:.7g}" for value in row)])
    written = [str(path)]
    if not importlib_missing("matplotlib"):
        written.append(str(_plot(result, folder / "losses.png", warmup)))
    return written


def _plot(result: ScriptResult, path: Path, warmup: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, difference) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    means = {}
    for name, records, style in (("fp32", result.fp32, "-"), ("AMP", result.amp, "--")):
        series = [[math.nan if loss is None else loss for loss in record.losses] for record in records]
        if not series:
            continue
        length = min(len(s) for s in series)
        mean = [statistics.fmean(s[t] for s in series) for t in range(length)]
        low = [min(s[t] for s in series) for t in range(length)]
        high = [max(s[t] for s in series) for t in range(length)]
        line = curves.plot(mean, style, label=f"{name} (mean of {len(series)} seeds)")[0]
        curves.fill_between(range(length), low, high, color=line.get_color(), alpha=0.2)
        means[name] = mean
    if "fp32" in means and "AMP" in means:
        length = min(len(means["fp32"]), len(means["AMP"]))
        difference.plot([means["AMP"][t] - means["fp32"][t] for t in range(length)], color="black")
        difference.axhline(0, color="grey", linewidth=0.5)
    for axes in (curves, difference):
        axes.axvline(warmup, color="grey", linestyle=":", linewidth=0.8)
    curves.set(ylabel="loss", title=f"{result.script.name}: {result.status}")
    curves.legend()
    difference.set(xlabel="training step", ylabel="AMP - fp32")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


# --- the text report --------------------------------------------------------------------------------------------


def format_text(report: VerifyReport) -> str:
    """The verdict table, then why each script got its verdict, then the notes and where the files are."""
    header = ["script", "device/dtype", "steps x seeds", "gap", "spread", "largest gap", "parted at", "speed-up",
              "verdict"]  # fmt: skip
    rows = [header] + [_table_row(result, report) for result in report.results]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for result in report.results:
        details = [f"  - {reason}" for reason in result.reasons]
        if result.crash:
            details.append("  " + result.crash.replace("\n", "\n  "))
        if result.converted_modules:
            details.append(f"  converted modules: {', '.join(result.converted_modules)}")
        if result.amp_source != "amp-lint's conversion":
            details.append(f"  AMP version: {result.amp_source}")
        if details:
            lines += ["", f"{result.script.name}: {result.status} (exit {EXIT_CODES[result.status]})", *details]
    if report.output_dir is not None:
        lines += ["", f"Per-step losses (CSV) and plots: {report.output_dir}"]
    if report.notes:
        lines.append("")
        lines += [f"Note: {note}" for note in report.notes]
    return "\n".join(lines)


def _table_row(result: ScriptResult, report: VerifyReport) -> list[str]:
    amp = result.amp[0] if result.amp else None
    device = (amp.device if amp and amp.device else report.device).split(":")[0]
    enabled = [entry["dtype"] for entry in amp.autocast if entry["enabled"]] if amp else []
    judgement = result.judgement
    steps = min((len(r.losses) for r in result.amp), default=0) if result.amp else 0
    speed = "-"
    if result.speedup is not None:
        speed = f"{result.speedup:.2f}x"
        if result.speedup_range is not None:
            speed += f" ({result.speedup_range[0]:.2f}-{result.speedup_range[1]:.2f})"
    return [
        result.script.name,
        f"{device}/{enabled[0] if enabled else report.dtype}",
        f"{steps} x {len(result.amp)}" if result.amp else "-",
        _format(judgement.gap if judgement else None, ".1%"),
        _format(judgement.spread if judgement else None, ".1%"),
        f"{judgement.largest_gap:.1%} @{judgement.largest_gap_step}" if judgement else "-",
        str(judgement.parted_at) if judgement and judgement.parted_at is not None else "-",
        speed,
        result.status,
    ]


def _format(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"


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
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value
