"""Run training scripts as written (fp32) and as converted to AMP, several seeds each, and judge whether both train
alike.

Each side runs in a fresh interpreter (``python -m amp_lint.verify.bootstrap``) from the script's own folder, once per
seed (default 3), with the same deterministic settings, arguments and device: the fp32 side as written, the AMP side
as :func:`amp_lint.engine.convert.convert_source` rewrites it (the same code ``amp-lint --select AMP100 --fix
--unsafe-fixes`` writes, with the local modules the script imports converted too), or as the user's own AMP version
(``amp_script``). The bootstrap records the loss of every training step (the AMP side under the runtime guard);
:func:`judge` compares the two sides pairwise, seed for seed. This parent process never imports torch; even whether CUDA is available is
asked of a child, so that ``amp-lint`` itself stays light.

The steps, one module each: this one runs the sides (:class:`_ScriptVerifier`: convert, run the children, read their
records); :mod:`amp_lint.verify.judging` gives the verdict and the speed-up; :mod:`amp_lint.verify.reporting`
writes the CSV, the plot and the text report; :mod:`amp_lint.verify.results` holds the verdicts, their exit codes
and the result classes.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_lint.verify.bootstrap import PROGRESS_PREFIX, RunRecord, describe_exception, read_records
from amp_lint.verify.child import DEFAULT_TIMEOUT, run_child
from amp_lint.verify.launch import read_python_source
from amp_lint.verify.judging import explain_with_guard, judge, measure_speed, merge_guard_reports, scaler_warnings
from amp_lint.verify import reporting
from amp_lint.verify.reporting import format_text, write_result_files
from amp_lint.verify.results import (
    EQUIVALENT,
    EXIT_CODES,
    INCONCLUSIVE,
    NOT_EQUIVALENT,
    NOT_RUN,
    SEVERITY,
    Judgement,
    ScriptResult,
    VerifyReport,
)

__all__ = [
    "BUNDLED_SCRIPTS", "EQUIVALENT", "EXIT_CODES", "INCONCLUSIVE", "NOT_EQUIVALENT", "NOT_RUN", "SEVERITY",
    "Judgement", "RunRecord", "ScriptResult", "VerifyError", "VerifyReport", "child_environment", "collect_scripts",
    "format_text", "judge", "local_imports", "verify_scripts", "write_result_files",
]  # fmt: skip

#: The fp32 training scripts shipped with amp-lint, verified when no script is named.
BUNDLED_SCRIPTS = Path(__file__).with_name("scripts")

#: Set in both runs' environment: the device the fixtures (and any script that reads it) must use.
DEVICE_ENVIRONMENT_VARIABLE = "AMP_LINT_VERIFY_DEVICE"


Progress = Callable[[str], None]
Converter = Callable[..., Any]
"""``convert_source(source, *, amp_dtype, amp_device)``; its result has ``.code``, ``.converted``, ``.reasons``."""


class VerifyError(Exception):
    """The verification cannot start at all (no CUDA for ``--device cuda``, no scripts, bad options)."""


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
    first_seed: int = 0,
    tolerance: float = 3.0,
    script_args: Sequence[str] = (),
    progress: Progress | None = None,
    progress_steps: bool = True,
    converter: Converter | None = None,
    keep_converted: Path | None = None,
    amp_script: Path | None = None,
    output_dir: Path | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> VerifyReport:
    """Verify each script: convert it, run both sides ``seeds`` times for ``steps`` training steps, and judge.

    ``device`` is ``"auto"`` (CUDA when torch sees it, else CPU), ``"cuda"`` or ``"cpu"``: where the runs happen.
    ``dtype`` (default float16, as ``amp-lint --fix`` writes) and ``amp_device`` (default: the device expression
    the script itself uses, as ``amp-lint --fix`` writes) shape the conversion. ``amp_script`` is the user's own
    AMP version of the one script named, run instead of a conversion. ``converter`` replaces
    :func:`amp_lint.engine.convert.convert_source` (tests feed ready-made AMP programs through it);
    ``keep_converted`` is a folder to save the converted scripts in; ``output_dir`` gets per-script loss CSVs and
    plots (None: no files). ``progress`` receives one line per phase (converting, each side's run) and, with
    ``progress_steps``, a line per tenth of each seed's steps. ``first_seed`` is the first run's seed (both sides run
    seeds ``first_seed`` ... ``first_seed + seeds - 1``). Every AMP run runs under :mod:`amp_lint.guard` (record
    mode): its breaches of the GradScaler protocol go into the result. ``timeout`` bounds each run (one side of one
    script, every seed) in seconds (None: no limit); a run past it is stopped with everything it started, and the
    script is "not run: timed out".
    """
    if not 1 <= warmup < steps:
        raise VerifyError(f"--warmup must be at least 1 and below --steps ({steps}), got {warmup}")
    if seeds < 1:
        raise VerifyError(f"--seeds must be at least 1, got {seeds}")
    if timeout is not None and not timeout > 0:
        raise VerifyError(f"--timeout must be above 0 seconds, got {timeout:g}")
    if first_seed < 0:
        raise VerifyError(f"--first-seed must be 0 or more, got {first_seed}")
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
        notes.append(
            "One seed per side: no seed-to-seed spread; the gap is judged against the AMP dtype's rounding and the "
            "pair's step-to-step jitter only."
        )
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
                first_seed=first_seed,
                script_args=list(script_args),
                progress=progress,
                progress_steps=progress_steps,
                amp_script=Path(amp_script).resolve() if amp_script is not None else None,
                timeout=timeout,
            )
            result = verifier.run(converter)
            if keep_converted is not None:
                for name, code in verifier.converted_files.items():
                    target = keep_converted / (f"{stem}.py" if name == "__main__" else f"{stem}.{name}.py")
                    target.write_text(code, encoding="utf-8")
            if result.status is None:  # both sides ran: judge them
                judge(result, warmup=warmup, tolerance=tolerance, dtype=dtype, own_amp=amp_script is not None)
            explain_with_guard(result)
            if result.fp32 or result.amp:
                measure_speed(result)
            result.warnings += scaler_warnings(result)
            if output_dir is not None:
                result.files = write_result_files(result, output_dir / stem, warmup)
            results.append(result)
    if output_dir is not None and reporting.importlib_missing("matplotlib"):
        notes.append(reporting.MATPLOTLIB_MISSING)
    return VerifyReport(device, dtype, steps, warmup, seeds, tolerance, results, notes, output_dir)


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
    first_seed: int
    script_args: list[str]
    progress: Progress | None
    progress_steps: bool = True
    amp_script: Path | None = None
    timeout: float | None = DEFAULT_TIMEOUT
    converted_files: dict[str, str] = field(default_factory=dict)
    timed_out: bool = False
    exited_early: tuple[str, int | None, int] | None = None
    """(side, exit code, last step a progress line announced) of a run that ended without writing its result."""

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

        seeds = ",".join(str(seed) for seed in range(self.first_seed, self.first_seed + self.seeds))
        result.fp32, crash = self._run_child(self.script, self.script, "fp32", seeds, {})
        if crash is None:
            result.amp, crash = self._run_child(amp_program, amp_origin, "AMP", seeds, modules)
            if crash is not None:
                side = "AMP"
        else:
            side = "fp32"
        result.guard = merge_guard_reports(result.amp)
        if crash is not None:
            result.crash = crash
            records = result.fp32 if side == "fp32" else result.amp
            steps = len(records[-1].losses) if records else 0
            if self.timed_out:
                result.status = NOT_RUN
                result.reasons.append(f"timed out: the {side} run was stopped after {self.timeout:g} s (--timeout)")
            elif self.exited_early is not None:
                _, code, reported = self.exited_early
                result.status = NOT_RUN
                seen = f", at least {reported} reported" if reported else ""
                result.reasons.append(
                    f"the {side} run exited without writing its result (exit code {code}); steps unknown{seen}"
                )
            elif steps == 0:
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
        source, encoding = read_python_source(self.script)
        conversion = converter(source, amp_dtype=self.dtype, amp_device=self.amp_device)
        reasons = [f"{self.script.name}: {reason}" for reason in conversion.reasons]
        any_converted = bool(conversion.converted)
        if conversion.converted:
            self.converted_files["__main__"] = conversion.code
            # In the script's own encoding: the coding cookie the converted code keeps must still be true.
            (self.workdir / self.script.name).write_text(conversion.code, encoding=encoding)
        for name, path in local_imports(self.script):
            module_source, module_encoding = read_python_source(path)
            module_conversion = converter(module_source, amp_dtype=self.dtype, amp_device=self.amp_device)
            if module_conversion.converted:
                any_converted = True
                target = self.workdir / f"module-{name}.py"
                target.write_text(module_conversion.code, encoding=module_encoding)
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
            *(["--guard"] if phase == "AMP" else []),
            "--", *self.script_args,
        ]  # fmt: skip
        first, last = seeds.split(",")[0], seeds.split(",")[-1]
        self._report(f"{phase} run, seed{'s' if first != last else ''} {first}{'-' + last if first != last else ''}")
        reached = [0]  # the last step a progress line announced

        def on_line(line: str) -> bool:
            if not line.startswith(PROGRESS_PREFIX):
                return True  # the script's own output
            step, _, seed = line[len(PROGRESS_PREFIX) :].strip().partition(" seed ")
            reached[0] = max(reached[0], _leading_int(step))
            if self.progress_steps:
                self._report(f"{phase} run, seed {seed or '?'}, step {step}")
            return False

        ended = run_child(
            command, env=child_environment(self.device), cwd=origin.parent, timeout=self.timeout, on_line=on_line
        )
        output_tail = ended.output_tail
        if ended.timed_out:
            self.timed_out = True
            seen = f"; {reached[0]} training step(s) reported" if reached[0] else ", before its first training step"
            headline = f"the {phase} run timed out: stopped after {self.timeout:g} s (--timeout){seen}"
            return [], "\n".join([headline, *(f"  {line}" for line in output_tail)])
        if not out.exists():
            # The bootstrap writes its result at the end: a run that left without it (os._exit, a signal) may
            # have trained any number of steps.
            self.exited_early = (phase, ended.returncode, reached[0])
            lost = {"type": f"exit code {ended.returncode}", "message": "no result written", "traceback_tail": []}
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
            tree = ast.parse(path.read_bytes())  # bytes: the coding cookie or BOM decides, as for Python
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
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


def _leading_int(text: str) -> int:
    """``12`` of ``"12/200"``; 0 when the text does not start with a number."""
    digits = text.split("/", 1)[0].strip()
    return int(digits) if digits.isdigit() else 0


def _crash_text(phase: str, error: dict[str, Any], output_tail: Sequence[str] = ()) -> str:
    """``<phase> crashed: Type: message`` and the traceback's last lines (else the program's last output)."""
    details = error.get("traceback_tail") or list(output_tail)
    headline = f"{phase} crashed: {error.get('type')}: {error.get('message')}"
    return "\n".join([headline] + [f"  {line}" for line in details])


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
    """Ask a child interpreter, so this process never imports torch or creates a CUDA context.

    The child runs in an empty folder of its own, and with ``PYTHONSAFEPATH``: a ``torch.py`` in the current folder
    is not imported (nor executed) in torch's place.
    """
    with tempfile.TemporaryDirectory(prefix="amp-lint-probe-") as neutral:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
            capture_output=True,
            text=True,
            cwd=neutral,
            env={**os.environ, "PYTHONSAFEPATH": "1"},
            check=False,
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
