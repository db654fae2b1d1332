"""Baselines: adopt amp-lint on an existing code base and fail only on findings added since.

`amp-lint --write-baseline amp-lint-baseline.json` records today's findings; `amp-lint --baseline
amp-lint-baseline.json` then reports only the findings that are not in it. A finding is recognised by
its fingerprint, not its line number, so that edits elsewhere in the file (which shift lines) keep it
baselined:

    (file path, rule code, enclosing function, the finding's source line normalised)

The file path is relative to the baseline file's folder, so that a run from a subfolder or with
absolute paths matches a baseline written at the project root.

The source line is normalised by collapsing whitespace and dropping a trailing `# noqa` comment, so
re-indenting or reformatting a line does not make it new. Each fingerprint carries a count: a second
identical finding in the same function (the same mistake copied once more) is a new finding.

The file is JSON, `{"version": 1, "findings": [...]}`, sorted and indented so that it diffs well in
review and a rewrite with nothing new is byte for byte the same.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Dict, Iterable, Optional, Tuple

from amp_lint.diagnostics import Applicability, Diagnostic, Report
from amp_lint.files.sources import SourceError, SourceText, read_bytes, write_atomic

_BASELINE_BYTES_LIMIT = 256 * 1024 * 1024  # a baseline of a million findings is about 200 MB

BASELINE_VERSION = 1

# (filename, code, context, normalised source line)
Fingerprint = Tuple[str, str, str, str]

_WHITESPACE = re.compile(r"\s+")
_TRAILING_NOQA = re.compile(r"#\s*noqa\b.*$", re.IGNORECASE)
_FIELDS = ("filename", "code", "context", "source")


class BaselineError(ValueError):
    """A baseline file that cannot be read or written; the message is one line naming the file."""


def normalise_source_line(line: str) -> str:
    """The line as the fingerprint sees it: no trailing `# noqa...` comment, whitespace collapsed."""
    return _WHITESPACE.sub(" ", _TRAILING_NOQA.sub("", line)).strip()


def _normalise_path(filename: str) -> str:
    """`./src\\x.py` and `src/x.py` name the same file; relative paths stay relative."""
    return PurePath(os.path.normpath(filename)).as_posix()


def fingerprint(diagnostic: Diagnostic, base: Optional[str] = None) -> Fingerprint:
    """The finding's identity; with `base` (the baseline file's folder) its path is relative to that folder,
    so that a run from a subfolder or with absolute paths names the file as the baseline does."""
    filename = diagnostic.filename
    if base is not None and filename != "-":
        filename = os.path.relpath(os.path.abspath(filename), base)
    return (
        _normalise_path(filename),
        diagnostic.code,
        diagnostic.context,
        normalise_source_line(diagnostic.source_line),
    )


@dataclass(frozen=True)
class Baseline:
    """How many findings of each fingerprint were accepted when the baseline was written."""

    counts: Dict[Fingerprint, int]
    base: Optional[str] = None  # the folder the recorded paths are relative to (the baseline file's)

    @classmethod
    def from_diagnostics(cls, diagnostics: Iterable[Diagnostic], base: Optional[str] = None) -> "Baseline":
        return cls(dict(Counter(fingerprint(d, base) for d in diagnostics)), base)

    def filter(self, report: Report) -> Report:
        """A copy of `report` without the baselined findings; file errors are always kept.

        Within one fingerprint the first findings (in report order) use up the baseline's count; any
        beyond it are new.
        """
        remaining = dict(self.counts)
        kept = []
        removed_unsafe = 0
        for diagnostic in report.diagnostics:
            key = fingerprint(diagnostic, self.base)
            if remaining.get(key, 0) > 0:
                remaining[key] -= 1
                if diagnostic.fix is not None and diagnostic.fix.applicability is Applicability.UNSAFE:
                    removed_unsafe += 1
                continue
            kept.append(diagnostic)
        return replace(
            report,
            diagnostics=kept,
            errors=list(report.errors),
            fixed={name: dict(codes) for name, codes in report.fixed.items()},
            # Only findings with an unsafe fix are counted there (when --unsafe-fixes is off).
            unsafe_fixable=max(report.unsafe_fixable - removed_unsafe, 0),
        )

    def to_json(self) -> str:
        findings = [dict(zip(_FIELDS, key), count=count) for key, count in sorted(self.counts.items()) if count > 0]
        document = {"version": BASELINE_VERSION, "findings": findings}  # keys in this order, for readers
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_baseline(path: Path, report: Report) -> None:
    """Record the report's findings in `path` (replaced atomically), or raise `BaselineError`."""
    text = Baseline.from_diagnostics(report.diagnostics, _folder_of(path)).to_json()
    try:
        _write_text(Path(path), text)
    except SourceError as error:
        raise BaselineError(f"cannot write baseline {path}: {error.message}") from None
    except OSError as error:
        raise BaselineError(f"cannot write baseline {path}: {error.strerror or error}") from None


def _folder_of(path: Path) -> str:
    """The folder paths in the baseline `path` are relative to: its own (absolute)."""
    return os.path.dirname(os.path.abspath(path))


def _write_text(path: Path, text: str) -> None:
    """Write UTF-8 `text` through `write_atomic`, which replaces an existing file only.

    A new file is first created empty (with the usual permissions), then replaced; if that fails,
    the empty file is removed again.
    """
    created = False
    if os.path.lexists(path):
        raw = read_bytes(str(path), _BASELINE_BYTES_LIMIT)  # a FIFO or a device: a SourceError, never a hang
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        created, raw = True, b""
    try:
        write_atomic(path, text, SourceText(text="", raw=raw, encoding="utf-8", bom=False))
    except BaseException:
        if created:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise


def load_baseline(path: Path) -> Baseline:
    """Read a baseline written by `write_baseline`; any problem is a `BaselineError` of one line."""
    path = Path(path)
    if not os.path.lexists(path):
        raise BaselineError(f"baseline file {path} not found (create it with --write-baseline {path})")
    try:
        # Non-blocking and regular files only (`read_bytes`): `--baseline` naming a FIFO must not hang the run.
        raw = read_bytes(str(path), _BASELINE_BYTES_LIMIT)
    except SourceError as error:
        raise BaselineError(f"cannot read baseline {path}: {error.message}") from None
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BaselineError(f"{path}: not a valid amp-lint baseline (not UTF-8 text)") from None
    except RecursionError:
        raise BaselineError(f"{path}: not a valid amp-lint baseline (JSON nested too deeply)") from None
    except json.JSONDecodeError as error:
        raise BaselineError(
            f"{path}: not a valid amp-lint baseline (invalid JSON: {error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    if not isinstance(document, dict) or "version" not in document:
        raise BaselineError(f"{path}: not a valid amp-lint baseline (expected an object with a \"version\")")
    if document["version"] != BASELINE_VERSION:
        raise BaselineError(
            f"{path}: unsupported baseline version {document['version']!r} (this amp-lint reads version "
            f"{BASELINE_VERSION}; rewrite it with --write-baseline)"
        )
    findings = document.get("findings")
    if not isinstance(findings, list):
        raise BaselineError(f"{path}: not a valid amp-lint baseline (\"findings\" must be a list)")
    counts: Dict[Fingerprint, int] = {}
    for index, record in enumerate(findings):
        key, count = _read_record(record, path, index)
        counts[key] = counts.get(key, 0) + count
    return Baseline(counts, _folder_of(path))


def _read_record(record: object, path: Path, index: int) -> Tuple[Fingerprint, int]:
    where = f"{path}: invalid baseline entry findings[{index}]"
    if not isinstance(record, dict):
        raise BaselineError(f"{where} (expected an object)")
    for name in _FIELDS:
        if not isinstance(record.get(name), str):
            raise BaselineError(f"{where} (\"{name}\" must be a string)")
    count = record.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise BaselineError(f"{where} (\"count\" must be a positive integer)")
    filename, code, context, source = (record[name] for name in _FIELDS)
    return (_normalise_path(filename), code, context, normalise_source_line(source)), count
