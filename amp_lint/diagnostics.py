"""What a check produces: diagnostics with 1-based locations, optional fixes, and file errors.

These are plain data. Every output format is a formatter over a `Report` (see `amp_lint.reports`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Optional, Tuple


class Severity(str, enum.Enum):
    ERROR = "error"  # crashes, or certainly wrong numerics
    WARNING = "warning"  # likely wrong, precision loss, deprecated API
    INFO = "info"  # wasted work or style


class Applicability(str, enum.Enum):
    """How far a fix can be trusted (Ruff's terms)."""

    SAFE = "safe"  # keeps behaviour: the code does what the author evidently meant
    UNSAFE = "unsafe"  # makes a decision the author did not write (a dtype, a device, numerics)


class Confidence(str, enum.Enum):
    """How a finding was reached (issue 14, point 5).

    HIGH: proved, on a feasible path with every value it needs known. MEDIUM: it rests on an
    assumption (an unknown callee, receiver or branch condition), which the message states. Findings that
    carry an assumption are reported only with `--show-assumed`, and their fixes are never safe.
    """

    HIGH = "high"
    MEDIUM = "medium"


@dataclass(frozen=True, order=True)
class Location:
    row: int  # 1-based line
    column: int  # 1-based column (in characters)


@dataclass(frozen=True)
class Edit:
    """Replace the text from `location` up to (not including) `end_location` with `content`."""

    location: Location
    end_location: Location
    content: str
    # Jupyter notebooks: the 1-based cell the edit's rows count in (a fix may edit several cells).
    cell: Optional[int] = None


@dataclass(frozen=True)
class RelatedLocation:
    """A place the analysis went through on its way to a finding ("scaler created", a helper call)."""

    message: str
    location: Location
    end_location: Location
    filename: Optional[str] = None  # another file's place (a helper module the proof went through)
    cell: Optional[int] = None  # Jupyter notebooks: the 1-based cell the location counts in


@dataclass(frozen=True)
class FixSummary:
    applicability: Applicability
    message: str
    edits: Tuple[Edit, ...] = ()
    # A fix that changes other files too: (absolute path, its edits, made on the file as read from disk).
    files: Tuple[Tuple[str, Tuple[Edit, ...]], ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    filename: str
    location: Location
    end_location: Location
    severity: Severity
    rule_name: str
    confidence: Confidence = Confidence.HIGH
    fix: Optional[FixSummary] = None
    # The text of the line the diagnostic starts on (for the `full` format and baselines).
    source_line: str = ""
    # Qualified name of the enclosing function ("Trainer.train_step"), "" at module level.
    context: str = ""
    # Jupyter notebooks: the 1-based cell number; `location` is then relative to the cell.
    cell: Optional[int] = None
    # The path the analysis followed (also named in the message, "(scaler created at line 3)").
    related: Tuple[RelatedLocation, ...] = ()

    @property
    def sort_key(self):
        return (self.filename, self.cell or 0, self.location, self.code)


@dataclass(frozen=True)
class FileError:
    """A file that could not be read, parsed or written. Such a run exits 2."""

    filename: str
    message: str
    location: Optional[Location] = None
    cell: Optional[int] = None  # Jupyter notebooks: the cell `location` counts rows in (the message names it)


def _own_message(error: FileError) -> str:
    """The message without a notebook's `cell N: ` in front."""
    message = error.message
    if error.cell is not None and message.startswith("cell ") and ": " in message:
        message = message.split(": ", 1)[1]
    return message


def is_fix_refusal(error: FileError) -> bool:
    """A fix that was checked and refused (`not fixed: ...`): the file was checked, and the finding is reported
    without its fix. An ordinary outcome, as Ruff's unfixable findings: the run exits 1 for the finding left (0
    with `--fix-only` or `--exit-zero`), never 2, the code of a file that could not be read, parsed or written."""
    return _own_message(error).startswith("not fixed")


# A file checked with part of its analysis skipped (`engine.partial_analysis`): an iteration too large to analyse.
PARTIAL_ANALYSIS = "not fully analysed"


def is_partial_analysis(error: FileError) -> bool:
    """A file checked with part of its analysis skipped (`not fully analysed: ...`): a warning, not an error."""
    return _own_message(error).startswith(PARTIAL_ANALYSIS + ":")


def is_note(error: FileError) -> bool:
    """A note on a file that was checked, not a failure of the run (exit 2): a refused fix, or a part of the
    analysis skipped (`not fully analysed: ...`; its findings elsewhere are reported, as Ruff reports a file
    it checked with a warning)."""
    return is_fix_refusal(error) or is_partial_analysis(error)


@dataclass
class Report:
    """Everything one run found, in a stable order."""

    diagnostics: list = field(default_factory=list)  # list[Diagnostic]
    errors: list = field(default_factory=list)  # list[FileError]
    files_checked: int = 0
    fixed: dict = field(default_factory=dict)  # filename -> {code: count} of fixes applied
    # Findings that an --unsafe-fixes run would fix, counted when --unsafe-fixes is off.
    unsafe_fixable: int = 0

    @property
    def failures(self) -> list:
        """The file errors that mean the tool could not do its job (exit 2): all but the notes (`is_note`)."""
        return [error for error in self.errors if not is_note(error)]

    @property
    def fixed_count(self) -> int:
        return sum(sum(codes.values()) for codes in self.fixed.values())

    def sort(self) -> None:
        self.diagnostics.sort(key=lambda d: d.sort_key)
        self.errors.sort(key=lambda e: (e.filename, e.location or Location(0, 0)))


_BREAK = r"[ \t]*(?:\r\n|\r|\n)\s*"


def one_line(message: str) -> str:
    """A message quoting code written over several lines, as one line written the usual way:
    `scaler.scale(\n    loss,\n).backward()` reads `scaler.scale(loss).backward()`; spaces that are not
    next to a line break (inside a string literal, say) are kept."""
    message = re.sub(r",?" + _BREAK + r"([)\]}])", r"\1", message)  # a closing bracket on its own line
    message = re.sub(r"([(\[{])" + _BREAK, r"\1", message)  # after an opening bracket
    return re.sub(_BREAK, " ", message).strip()


# --- serialisation for the result cache -----------------------------------------------------------


def diagnostic_to_record(diagnostic: Diagnostic) -> dict:
    """A JSON-able record that `diagnostic_from_record` turns back into the same Diagnostic."""
    fix = diagnostic.fix
    return {
        "code": diagnostic.code,
        "message": diagnostic.message,
        "filename": diagnostic.filename,
        "location": [diagnostic.location.row, diagnostic.location.column],
        "end_location": [diagnostic.end_location.row, diagnostic.end_location.column],
        "severity": diagnostic.severity.value,
        "rule_name": diagnostic.rule_name,
        "confidence": diagnostic.confidence.value,
        "fix": None
        if fix is None
        else {
            "applicability": fix.applicability.value,
            "message": fix.message,
            "edits": [
                [e.location.row, e.location.column, e.end_location.row, e.end_location.column, e.content]
                + ([e.cell] if e.cell is not None else [])
                for e in fix.edits
            ],
            **({"files": [[path, [[e.location.row, e.location.column, e.end_location.row, e.end_location.column, e.content]
                                  for e in edits]] for path, edits in fix.files]} if fix.files else {}),  # fmt: skip
        },
        "source_line": diagnostic.source_line,
        "context": diagnostic.context,
        "cell": diagnostic.cell,
        "related": [
            [r.message, r.location.row, r.location.column, r.end_location.row, r.end_location.column]
            + ([r.filename] if r.filename is not None or r.cell is not None else [])
            + ([r.cell] if r.cell is not None else [])
            for r in diagnostic.related
        ],
    }


def diagnostic_from_record(record: dict) -> Diagnostic:
    fix = record.get("fix")
    return Diagnostic(
        code=record["code"],
        message=record["message"],
        filename=record["filename"],
        location=Location(*record["location"]),
        end_location=Location(*record["end_location"]),
        severity=Severity(record["severity"]),
        rule_name=record["rule_name"],
        confidence=Confidence(record["confidence"]),
        fix=None
        if fix is None
        else FixSummary(
            Applicability(fix["applicability"]),
            fix["message"],
            tuple(Edit(Location(a, b), Location(c, d), text, *cell) for a, b, c, d, text, *cell in fix["edits"]),
            tuple((path, tuple(Edit(Location(a, b), Location(c, d), text) for a, b, c, d, text in edits))
                  for path, edits in fix.get("files", ())),  # fmt: skip
        ),
        source_line=record.get("source_line", ""),
        context=record.get("context", ""),
        cell=record.get("cell"),
        related=tuple(
            RelatedLocation(entry[0], Location(entry[1], entry[2]), Location(entry[3], entry[4]), *entry[5:7])
            for entry in record.get("related", ())
        ),
    )
