"""What the guard does with a breach: warn, raise, or record it, and the report (JSON) of every breach seen.

Every mode keeps the report: one :class:`~amp_lint.guard.monitor.Violation` per rule and place, with how many
times it happened there. ``warn`` issues an :class:`AmpGuardWarning` the first time at each place, attributed to
the user's line; ``raise`` raises :class:`AmpProtocolError` there (before torch's own error, when torch has one);
``record`` stays silent. :meth:`GuardReport.write` writes the JSON.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from amp_lint.guard.monitor import Site, Violation
from amp_lint.guard.breaches import Breach

WARN, RAISE, RECORD = "warn", "raise", "record"
MODES = (WARN, RAISE, RECORD)


class AmpGuardWarning(UserWarning):
    """A breach of the GradScaler / autocast protocol seen at run time (mode ``warn``)."""


class AmpProtocolError(RuntimeError):
    """A breach of the GradScaler / autocast protocol seen at run time (mode ``raise``)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(str(violation))
        self.violation = violation


class GuardReport:
    """The breaches seen, in the order first seen; ``mode`` says what happens at each."""

    def __init__(self, mode: str = WARN) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown guard mode {mode!r}: use {', '.join(MODES)}")
        self.mode = mode
        self._violations: dict[tuple[str, Site], Violation] = {}
        self.complete = True
        """False while the run it reports on goes on (:meth:`write_as_it_goes`), until its end is written."""
        self.ending: str | None = None
        """How the run ended when that is worth saying (``os._exit(0)``: the script skipped its normal end)."""
        self._live_path: str | Path | None = None

    @property
    def violations(self) -> list[Violation]:
        return list(self._violations.values())

    def __call__(self, breach: Breach, site: Site, names: dict[str, Any]) -> None:
        key = (breach.rule, site)
        violation = self._violations.get(key)
        if violation is not None:
            violation.count += 1
        else:
            message = breach.message.format_map(_Names(names))
            filename, line = site if site is not None else (None, None)
            violation = self._violations[key] = Violation(breach.rule, message, filename, line)
            if self._live_path is not None:
                self.write(self._live_path)
            if self.mode == WARN:
                warnings.warn_explicit(
                    f"{breach.rule} {message}", AmpGuardWarning, filename or "<unknown>", line or 0, module="amp_lint.guard"
                )
        if self.mode == RAISE:
            raise AmpProtocolError(violation)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"mode": self.mode, "complete": self.complete}
        if self.ending:
            data["ending"] = self.ending
        data["violations"] = [violation.to_dict() for violation in self.violations]
        return data

    def write(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # as `amp-lint -o out/r.json`: the folder is made
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    def write_as_it_goes(self, path: str | Path) -> None:
        """Write the report now, marked ``"complete": false``, and again at each new breach, until :meth:`finish`:
        a run killed before its end (SIGKILL, the machine's OOM killer) leaves a report that says so."""
        self.complete, self._live_path = False, path
        self.write(path)

    def finish(self, path: str | Path | None, ending: str | None = None) -> None:
        """The run is over: write the complete report (to ``path``, if any)."""
        self.complete, self._live_path, self.ending = True, None, ending or self.ending
        if path is not None:
            self.write(path)

    def summary(self) -> str:
        """One line per breach, for the end of a run."""
        ended = f" (the script ended with {self.ending}, skipping its normal end)" if self.ending else ""
        if not self._violations:
            return f"amp_lint.guard: no breach of the AMP protocol seen{ended}"
        lines = [f"amp_lint.guard: {len(self._violations)} breach(es) of the AMP protocol{ended}:"]
        lines += [f"  {violation}" + (f" ({violation.count}x)" if violation.count > 1 else "") for violation in self.violations]
        return "\n".join(lines)


class _Names(dict):  # type: ignore[type-arg]
    """Format names: a placeholder without a value stays as it is written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"
