"""`--add-noqa`: suppress every current finding with a `# noqa: CODE` comment on its line.

A migration aid: adopt amp-lint today, fix the old findings later, catch the new ones now. The
comment goes at the end of the finding's first line (where the checker looks for it), or of its last
line when the first cannot take a comment. It is merged into an existing `# noqa: A, B` comment, and
a code already listed is never repeated, so a second run changes nothing.

A line that ends inside a multi-line string, or continues with a backslash, cannot take a comment
without changing the program; such a finding is left alone and reported. Each file is rewritten once,
atomically, keeping its encoding, byte order mark and line endings. Notebooks are edited through
`Notebook`, so only the changed cells' `source` values change in the JSON.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from amp_lint.diagnostics import Diagnostic, FileError, Location, Report
from amp_lint.files.sources import SourceError, SourceText, read_source, write_atomic
from amp_lint.files.lines import lines_with_ends
from amp_lint.parse.noqa_comments import NOQA

# The checker's own pattern (amp_lint.engine.checker): `# noqa` or `# noqa: A1, B2`.
_CODE_SEPARATOR = re.compile(r"[\s,]+")
_LINE_END = re.compile(r"(\r\n|\r|\n)?\Z")


def add_noqa(report: Report) -> Tuple[Dict[str, int], List[FileError]]:
    """Add `# noqa` comments for the report's findings; returns directives added per file, and errors.

    A "directive" is one line's comment, new or extended. Files are edited in name order.
    """
    by_file: Dict[str, List[Diagnostic]] = {}
    for diagnostic in report.diagnostics:
        by_file.setdefault(diagnostic.filename, []).append(diagnostic)
    added: Dict[str, int] = {}
    errors: List[FileError] = []
    for filename in sorted(by_file):
        try:
            count, skipped = _add_to_file(filename, by_file[filename])
        except SourceError as error:
            errors.append(FileError(filename, f"no noqa comments added: {error.message}", error.location))
            continue
        added[filename] = count
        errors.extend(skipped)
    return added, errors


def _add_to_file(filename: str, diagnostics: Sequence[Diagnostic]) -> Tuple[int, List[FileError]]:
    if filename == "-":
        raise SourceError("standard input cannot be edited")
    path = Path(filename)
    source = read_source(path)
    if filename.endswith(".ipynb"):
        return _add_to_notebook(path, source, diagnostics)
    lines = lines_with_ends(source.text)
    edited, skipped = _edit_lines(lines, [(d, d.location.row, d.end_location.row) for d in diagnostics], filename)
    if edited:
        write_atomic(path, "".join(lines), source)
    return edited, skipped


def _add_to_notebook(path: Path, source: SourceText, diagnostics: Sequence[Diagnostic]) -> Tuple[int, List[FileError]]:
    """Edit the notebook's program (its code cells joined), then splice the changed cells back."""
    from amp_lint.files.notebook import Notebook

    notebook = Notebook.parse(source.text)
    lines = lines_with_ends(notebook.source)
    # (cell, row in cell) -> program row. Rows ascend, so a cell's real first row overrides the
    # marker line above it, which `locate` clamps to the same place.
    program_row = {notebook.locate(row, 1)[:2]: row for row in range(1, len(lines) + 1)}
    targets = []
    skipped: List[FileError] = []
    for diagnostic in diagnostics:
        start = program_row.get((diagnostic.cell, diagnostic.location.row))
        end = program_row.get((diagnostic.cell, diagnostic.end_location.row), start)
        if start is None:
            skipped.append(_error(diagnostic, "no such line in the notebook (changed since it was checked?)"))
            continue
        targets.append((diagnostic, start, end))
    edited, more_skipped = _edit_lines(lines, targets, str(path))
    if edited:
        write_atomic(path, notebook.updated_json("".join(lines)), source)
    return edited, skipped + more_skipped


# -- editing lines -----------------------------------------------------------------------------


@dataclass
class _LineFacts:
    """What tokenizing the file tells about the end of each line."""

    in_string: Set[int] = field(default_factory=set)  # rows that end inside a string
    comments: Dict[int, int] = field(default_factory=dict)  # row -> column (0-based) where its comment starts


def _edit_lines(
    lines: List[str], targets: Iterable[Tuple[Diagnostic, int, int]], filename: str
) -> Tuple[int, List[FileError]]:
    """Add the codes to `lines` (edited in place); returns the number of lines changed, and skips."""
    facts = _line_facts("".join(lines))
    codes_by_row: Dict[int, Set[str]] = {}
    skipped: List[FileError] = []
    for diagnostic, start, end in targets:
        if not 0 < start <= len(lines) or not _same_line(lines[start - 1], diagnostic.source_line):
            raise SourceError(f"{filename} changed since it was checked; run amp-lint again")
        row = next((r for r in dict.fromkeys((start, end)) if 0 < r <= len(lines) and _can_comment(lines, r, facts)), None)
        if row is None:
            skipped.append(_error(diagnostic, _why_not(lines, start, facts)))
            continue
        codes_by_row.setdefault(row, set()).add(diagnostic.code.upper())
    edited = 0
    for row, codes in codes_by_row.items():
        new_line = _with_codes(lines[row - 1], sorted(codes), facts.comments.get(row))
        if new_line != lines[row - 1]:
            lines[row - 1] = new_line
            edited += 1
    return edited, skipped


def _with_codes(line: str, codes: List[str], comment_column: Optional[int]) -> str:
    content, ending = _content(line), line[len(_content(line)) :]
    if comment_column is not None:
        noqa = NOQA.search(content, comment_column)
        if noqa is not None:
            if noqa.group("codes") is None:
                return line  # a bare `# noqa` already suppresses every code
            listed = {code.upper() for code in _CODE_SEPARATOR.split(noqa.group("codes")) if code}
            missing = [code for code in codes if code not in listed]
            if not missing:
                return line
            insert_at = noqa.end("codes")
            return content[:insert_at] + ", " + ", ".join(missing) + content[insert_at:] + ending
    return content.rstrip(" \t\f") + "  # noqa: " + ", ".join(codes) + ending


def _can_comment(lines: List[str], row: int, facts: _LineFacts) -> bool:
    return row not in facts.in_string and not _continued(lines, row, facts)


def _continued(lines: List[str], row: int, facts: _LineFacts) -> bool:
    """A backslash at the end of a line outside strings and comments joins it to the next line."""
    return row not in facts.comments and _content(lines[row - 1]).endswith("\\")


def _why_not(lines: List[str], row: int, facts: _LineFacts) -> str:
    if row in facts.in_string:
        return "line ends inside a multi-line string, so a comment there would change the string; add the noqa by hand"
    return "line continues with a backslash, so a comment there would break the code; add the noqa by hand"


def _line_facts(text: str) -> _LineFacts:
    """Rows ending inside a (multi-line) string, and where comments start, from Python's tokenizer."""
    facts = _LineFacts()
    # The tokenizer reads lines ending in "\n"; rows and columns do not change.
    readline = io.StringIO(re.sub(r"\r\n?", "\n", text)).readline
    open_strings: List[int] = []  # start rows of the f-strings (3.12+: split into parts) now open
    try:
        for token in tokenize.generate_tokens(readline):
            name = tokenize.tok_name.get(token.type, "")
            if token.type == tokenize.COMMENT:
                facts.comments[token.start[0]] = token.start[1]
            elif token.type == tokenize.STRING:
                facts.in_string.update(range(token.start[0], token.end[0]))
            elif name.endswith("STRING_START"):
                open_strings.append(token.start[0])
            elif name.endswith("STRING_END") and open_strings:
                facts.in_string.update(range(open_strings.pop(), token.end[0]))
    except (tokenize.TokenError, SyntaxError) as error:
        raise SourceError(f"cannot tokenize the file ({error})") from None
    return facts


def _same_line(line: str, source_line: str) -> bool:
    return not source_line or _content(line).rstrip() == source_line.rstrip()


def _error(diagnostic: Diagnostic, reason: str) -> FileError:
    where = f"cell {diagnostic.cell}: " if diagnostic.cell is not None else ""
    return FileError(
        diagnostic.filename,
        f"{where}{diagnostic.code} at line {diagnostic.location.row} not suppressed: {reason}",
        Location(diagnostic.location.row, diagnostic.location.column),
    )


def _content(line: str) -> str:
    return _LINE_END.sub("", line)
