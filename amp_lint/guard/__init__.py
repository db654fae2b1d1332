"""``amp_lint.guard``: the GradScaler and autocast protocol, checked at run time inside a training process.

Static analysis cannot follow every path (callbacks, frameworks, dynamic dispatch); the guard watches the calls
themselves and reports a breach with the rule ID and message the static rules use: update before step (AMP022),
update twice (AMP023), a second ``unscale_`` or one after ``step`` (AMP024), clipping or reading gradients before
``unscale_`` (AMP030), a step without update (AMP021), ``zero_grad`` between the scaled backward and the step
(AMP043), a backward inside autocast (AMP001), a scaler rebuilt for an optimizer another scaler stepped (AMP013),
and the scale collapsing (AMPG01, which only a run can show)::

    import amp_lint.guard
    amp_lint.guard.install("raise")             # every GradScaler of the process, until uninstall()
    scaler = amp_lint.guard.wrap(torch.amp.GradScaler("cuda"), "warn")   # or just this one
    with amp_lint.guard.guarded("record", report_path="guard.json"): ...

    python -m amp_lint.guard [--mode warn|raise|record] [--report guard.json] train.py [args]
    pytest --amp-guard=warn|raise|record [--amp-guard-report guard.json]

Modes: ``warn`` (an :class:`AmpGuardWarning` the first time at each place), ``raise`` (:class:`AmpProtocolError`,
before torch's own error), ``record`` (silent; the report only). The protocol is the static
rules' own table (:mod:`amp_lint.analysis.protocol`, pure data), worded for a run by
:mod:`amp_lint.guard.breaches` and followed by :mod:`~amp_lint.guard.monitor`; :mod:`~amp_lint.guard.hooks` wraps
the torch entry points. torch is imported only when the guard is installed.

Stage 3 (it runs inside training processes). May import: of amp_lint only the pure-data
protocol table `amp_lint.analysis.protocol` (no LibCST, no rules, no analysis code).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from amp_lint.guard.hooks import install, installed_report, uninstall, wrap
from amp_lint.guard.monitor import Violation
from amp_lint.guard.breaches import RULES
from amp_lint.guard.report import MODES, AmpGuardWarning, AmpProtocolError, GuardReport


@contextlib.contextmanager
def guarded(mode: str = "warn", *, report_path: str | Path | None = None, grad_reads: bool = False) -> Iterator[GuardReport]:
    """Guard every GradScaler inside the ``with`` block; the report is written to ``report_path`` at its end."""
    report = install(mode, grad_reads=grad_reads)
    try:
        yield report
    finally:
        uninstall()
        if report_path is not None:
            report.write(report_path)


__all__ = [
    "MODES", "RULES", "AmpGuardWarning", "AmpProtocolError", "GuardReport", "Violation", "guarded", "install",
    "installed_report", "uninstall", "wrap",
]  # fmt: skip
