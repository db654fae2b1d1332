"""What ``amp-lint verify`` finds, as data: the four verdicts and their exit codes, the numbers a verdict rests on
(:class:`Judgement`), one :class:`ScriptResult` per script and the :class:`VerifyReport` over all of them.

Verdicts and exit codes (:data:`EXIT_CODES`): ``equivalent`` 0, ``not equivalent`` 1, ``inconclusive`` 3, ``not
run`` 4; the report's exit code is the worst verdict's, in the order not equivalent > not run > inconclusive >
equivalent (2 is left to usage errors: the tool could not do its job).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from amp_lint.verify.bootstrap import RunRecord

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
INCONCLUSIVE = "inconclusive"
NOT_RUN = "not run"

EXIT_CODES = {EQUIVALENT: 0, NOT_EQUIVALENT: 1, INCONCLUSIVE: 3, NOT_RUN: 4}
#: The worst verdict decides the exit code.
SEVERITY = (NOT_EQUIVALENT, NOT_RUN, INCONCLUSIVE, EQUIVALENT)


@dataclass
class Judgement:
    """The numbers a verdict rests on, over the smoothed curves after the warm-up (relative to the fp32 loss)."""

    compared_steps: int
    smoothing: int
    """Steps per moving-average window."""
    gap: float
    """Mean over the steps of |mean over the seeds of (AMP - fp32 of the same seed)|, relative to the mean fp32
    loss."""
    spread: float
    """Mean seed-to-seed standard deviation of the fp32 curves, relative to the mean fp32 loss."""
    allowed: float
    """The band: the largest mean gap still within the noise (tolerance x the seed-to-seed standard error of the
    paired differences, at least the noise floor)."""
    largest_gap: float
    largest_gap_step: int
    parted_at: int | None
    """The first step where the gap leaves the noise band (None: never)."""
    fp32_drop: float
    """How much the fp32 curve fell from the first to the last compared step, relative to its start."""
    paired_spread: float = 0.0
    """Mean seed-to-seed standard deviation of the paired (AMP - fp32, same seed) differences, relative."""
    chaos: float = 1.0
    """How far apart the paired runs came, 0 (together) to 1 (as far apart as two seeds), averaged over the steps."""
    skipped_steps: list[int] = field(default_factory=list)
    """Steps the GradScaler skipped in each AMP run (overflow), in seed order."""
    judged_on: str = "the loss backpropagated in each training step"
    """Which loss the verdict was judged on (the sum of several; or each of several against its fp32 twin)."""


@dataclass
class JudgedCurves:
    """The smoothed seed-mean curves the verdict was reached on, for the plot (not written to JSON)."""

    steps: list[int]
    fp32: list[float]
    amp: list[float]
    band: list[float]
    """The allowed paired gap at each step (tolerance x noise), in loss units."""


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
    speedup_varied: bool = False
    """The quartile range is wide (see judging.WIDE_SPEEDUP_RANGE): the figure is not reliable."""
    warnings: list[str] = field(default_factory=list)
    """What is wrong with the AMP run without deciding the verdict (a GradScaler re-created during the run)."""
    converted_modules: list[str] = field(default_factory=list)
    amp_source: str = "amp-lint's conversion"
    files: list[str] = field(default_factory=list)
    curves: JudgedCurves | None = None
    guard: list[dict[str, Any]] = field(default_factory=list)
    """What the runtime guard (amp_lint.guard) saw in the AMP runs: rule, message, file, line, count."""


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
            entry.pop("curves", None)
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


def _json_safe(value: Any) -> Any:
    """Replace NaN and infinities, which JSON lacks, by null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value
