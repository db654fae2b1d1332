"""What a report may print: text from the checked files, made safe for a terminal and a document.

Messages, source lines and file names come from the files being checked. A comment can hold terminal escape
sequences (CSI colours, OSC window titles, clipboard writes and links) and a file name can hold bytes that are
not UTF-8: printed raw, the first reach the user's terminal (or a CI log) and the second make an invalid JSON,
XML or SARIF document, or a `UnicodeEncodeError`. Every format renders the report this module returns:
escape sequences and other control characters removed from messages and source lines (tabs kept; a line
break left in a file error's message is escaped), and every control character of a file name escaped as Python writes it
(`\n`, `\x1b`), undecodable bytes of a name shown as U+FFFD, as Ruff shows them. Fix edits are left exactly
as they are: they are code, and the machine formats escape them.
"""

from __future__ import annotations

import dataclasses
import re

from amp_lint.diagnostics import Diagnostic, FileError, Report

# ESC followed by: a CSI sequence, an OSC/DCS/SOS/PM/APC string (ended by BEL or ST), or one more character;
# then the 8-bit forms of the same (C1 CSI, OSC, ...), then every other C0/C1 control but tab and line breaks.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|\x9c|$)"
    r"|\x1b.?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x9d\x90\x98\x9e\x9f].*?(?:\x07|\x1b\\|\x9c|$)"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]",
    re.S,
)
_SURROGATES = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` without terminal escape sequences and control characters, its lone surrogates (bytes of a
    file name that are not UTF-8) replaced by U+FFFD."""
    if text.isprintable():
        return text
    text = _ESCAPES.sub("", text)
    return _SURROGATES.sub("\ufffd", text)


# Every control character a file name can hold, line breaks and tabs included, and the Unicode line separators.
_PATH_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def _escaped(match: "re.Match[str]") -> str:
    return repr(match.group())[1:-1]  # `\n`, `\x1b`, `\u2028`: as Python writes it in a string


def printable_path(path: str) -> str:
    """A file name as every report and listing shows it: each control character escaped as Python writes it
    (`a\n::error file=x::y.py` stays on one line: no CI log reads a workflow command out of a file name, no
    terminal an escape sequence), undecodable bytes as U+FFFD."""
    if path.isprintable():
        return path
    return _PATH_CONTROLS.sub(_escaped, _SURROGATES.sub("\ufffd", path))


def printable_message(text: str) -> str:
    """A file error's message on one line: `printable`, and a line break left in it (from a file name it
    quotes: `not fixed: AMP030 at <name>:12: ...`) escaped. (A finding's message is one line already.)"""
    return _LINE_BREAKS.sub(_escaped, printable(text))


def printable_report(report: Report) -> Report:
    """A copy of `report` whose texts are all `printable`."""
    return dataclasses.replace(
        report,
        diagnostics=[_diagnostic(d) for d in report.diagnostics],
        errors=[_error(e) for e in report.errors],
        fixed={printable_path(name): counts for name, counts in report.fixed.items()},
    )


def _diagnostic(diagnostic: Diagnostic) -> Diagnostic:
    fix = diagnostic.fix
    if fix is not None:
        fix = dataclasses.replace(fix, message=printable(fix.message))
    related = tuple(
        dataclasses.replace(
            place,
            message=printable(place.message),
            filename=printable_path(place.filename) if place.filename is not None else None,
        )
        for place in diagnostic.related
    )
    return dataclasses.replace(
        diagnostic,
        message=printable(diagnostic.message),
        filename=printable_path(diagnostic.filename),
        source_line=printable(diagnostic.source_line.rstrip("\r\n")) + diagnostic.source_line[len(diagnostic.source_line.rstrip("\r\n")):],
        context=printable(diagnostic.context),
        fix=fix,
        related=related,
    )


def _error(error: FileError) -> FileError:
    return dataclasses.replace(error, filename=printable_path(error.filename), message=printable_message(error.message))
