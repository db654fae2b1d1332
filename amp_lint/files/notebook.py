"""Jupyter notebooks as one Python program, and fixes put back into the notebook JSON.

The code cells are joined into a single program, each after a marker line (`# amp-lint: cell 3`),
so the parser, the model and the rules see ordinary Python. IPython syntax is not Python: each line
of a magic (`%time f()`, `!pip install x`, `obj?`, `x = !ls`, a whole `%%bash` cell) becomes a
numbered placeholder line that parses (`pass  # amp-lint: ipython-magic 4`) and keeps the line count,
so locations map back to the cell with no arithmetic beyond an offset.

Putting a fix back is surgical: only the `source` value of a changed cell is rewritten in the JSON
text, so outputs, metadata, key order and formatting stay byte for byte. A fix that moved, dropped
or edited a marker or a placeholder is refused (`SourceError`) rather than guessed at.

Cells are numbered like Ruff does: the 1-based position among ALL cells (markdown included), so the
number is the same whether or not the cells above are code.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import Diagnostic, Edit, FileError, Location, RelatedLocation
from amp_lint.files.sources import SourceError
from amp_lint.files.lines import lines_with_ends

_CELL_MARKER = re.compile(r"# amp-lint: cell (\d+)")
_PLACEHOLDER = re.compile(r"[ \t\f]*(?:pass  )?# amp-lint: ipython-magic (\d+)")
_LINE_END = re.compile(r"(\r\n|\r|\n)?\Z")
# At the start of a logical line these cannot begin Python code: IPython's escapes
# (% magic, ! shell, ? help, / , ; autocall).
_ESCAPE = re.compile(r"[ \t\f]*[%!?/,;]")
_HELP = re.compile(r"[ \t\f]*[\w.*\[\]]+\?\??[ \t\f]*")  # `obj?`, `obj.attr??`
_MAGIC_ASSIGNMENT = re.compile(r"[ \t\f]*[\w.]+(?:[ \t\f]*,[ \t\f]*[\w.]+)*[ \t\f]*=[ \t\f]*[%!]")  # `x = !ls`
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _content(line: str) -> str:
    return _LINE_END.sub("", line)


def _ending(line: str) -> str:
    return line[len(_content(line)) :]


@dataclass
class _CodeCell:
    index: int  # 1-based among all cells
    text: str  # the cell's source, joined
    source_is_list: bool
    first_row: int = 0  # the program row of the cell's first line
    magic_lines: Dict[int, Tuple[str, str]] = field(default_factory=dict)  # id -> (original, placeholder)


def _parse_int(digits: str):
    """An integer of the notebook's JSON. Python refuses to convert more than `sys.get_int_max_str_digits()`
    digits (4,300 by default; a `ValueError` that would end the run): such a number (an output's data, say)
    stays a string. Only the cells' sources are ever written back, so nothing else of the JSON changes."""
    return int(digits) if len(digits) <= 4000 else digits


class Notebook:
    """A parsed notebook; `source` is the program the checker sees."""

    def __init__(self, text: str, cells: Sequence[_CodeCell], source: str) -> None:
        self.text = text
        self.source = source
        self._cells = list(cells)
        self._first_rows = [cell.first_row for cell in self._cells]

    @classmethod
    def parse(cls, text: str) -> "Notebook":
        """Read nbformat 4 JSON, raising `SourceError` (one line) for anything else."""
        try:
            document = json.loads(text, parse_int=_parse_int)
        except json.JSONDecodeError as exc:
            raise SourceError(f"invalid notebook JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
        except RecursionError:  # `[[[[...` thousands deep: json's parser recurses
            raise SourceError("invalid notebook JSON: nested too deeply") from None
        if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
            raise SourceError("not a Jupyter notebook (nbformat 4): no list of cells")
        cells: List[_CodeCell] = []
        program: List[str] = []
        next_magic_id = 1
        for index, cell in enumerate(document["cells"], start=1):
            if not isinstance(cell, dict):
                raise SourceError(f"invalid notebook: cell {index} is not a JSON object")
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source")
            if isinstance(source, list) and all(isinstance(line, str) for line in source):
                cell_text = "".join(source)
            elif isinstance(source, str):
                cell_text = source
            else:
                raise SourceError(f"invalid notebook: cell {index} has no source text")
            _no_lone_surrogate(cell_text, index)
            code_cell = _CodeCell(index, cell_text, isinstance(source, list))
            program.append(f"# amp-lint: cell {index}\n")
            code_cell.first_row = len(program) + 1
            lines, next_magic_id = _hide_magics(lines_with_ends(cell_text), code_cell.magic_lines, next_magic_id)
            if lines and not _ending(lines[-1]):
                lines[-1] += "\n"
            program.extend(lines)
            cells.append(code_cell)
        return cls(text, cells, "".join(program))

    @property
    def cell_numbers(self) -> List[int]:
        """The 1-based numbers (among all cells) of the code cells, in order."""
        return [cell.index for cell in self._cells]

    def locate(self, row: int, column: int) -> Tuple[int, int, int]:
        """A 1-based program location as (cell number among all cells, row in the cell, column)."""
        if not self._cells:
            return 1, row, column
        position = max(bisect_right(self._first_rows, row) - 1, 0)
        cell = self._cells[position]
        return cell.index, max(row - cell.first_row + 1, 1), column

    def in_cell(self, diagnostic: Diagnostic) -> Diagnostic:
        """The diagnostic with its location, end, fix edits and related places relative to their cells, as
        Ruff reports them; each edit and related place names its own cell (a fix may add an import at the
        top of the first code cell), and the message names a line of the notebook by cell and row."""
        cell, row, column = self.locate(diagnostic.location.row, diagnostic.location.column)
        _, end_row, end_column = self.locate(diagnostic.end_location.row, diagnostic.end_location.column)
        fix = diagnostic.fix
        if fix is not None and fix.edits:
            fix = replace(fix, edits=tuple(self._edit_in_cell(edit) for edit in fix.edits))
        related = tuple(self._related_in_cell(place) for place in diagnostic.related)
        message = diagnostic.message
        for before, after in zip(diagnostic.related, related):
            if after.cell is not None:
                # The checker says "(scaler created at line 7)", counting rows of the joined cells.
                message = message.replace(
                    f"{before.message} at line {before.location.row}",
                    f"{after.message} at cell {after.cell}, line {after.location.row}",
                )
        return replace(
            diagnostic,
            message=message,
            cell=cell,
            location=Location(row, column),
            end_location=Location(end_row, end_column),
            fix=fix,
            related=related,
        )

    def _edit_in_cell(self, edit: Edit) -> Edit:
        cell, row, column = self.locate(edit.location.row, edit.location.column)
        _, end_row, end_column = self.locate(edit.end_location.row, edit.end_location.column)
        return replace(edit, location=Location(row, column), end_location=Location(end_row, end_column), cell=cell)

    def _related_in_cell(self, place: RelatedLocation) -> RelatedLocation:
        if place.filename is not None or place.cell is not None:
            return place  # a place in another file
        cell, row, column = self.locate(place.location.row, place.location.column)
        _, end_row, end_column = self.locate(place.end_location.row, place.end_location.column)
        return replace(place, location=Location(row, column), end_location=Location(end_row, end_column), cell=cell)

    def error_in_cell(self, error: FileError) -> FileError:
        if error.location is None:
            return error
        cell, row, column = self.locate(error.location.row, error.location.column)
        return FileError(error.filename, f"cell {cell}: {error.message}", Location(row, column), cell)

    def updated_json(self, new_source: str) -> str:
        """The notebook JSON with the cells of a fixed program put back; unchanged cells keep every byte.

        Lines a fix added above the first marker (new imports) go to the top of the first code cell.
        """
        segments = self._split_cells(new_source)
        replacements: Dict[int, str] = {}
        for position, (cell, lines) in enumerate(zip(self._cells, segments)):
            new_text = "".join(_restore_magics(lines, cell))
            if not _ending(cell.text) and new_text.endswith("\n"):
                new_text = new_text[:-1]  # the newline `parse` added after a cell's last line
            if new_text != cell.text:
                replacements[position] = new_text
        if not replacements:
            return self.text
        try:
            return self._with_sources(replacements)
        except RecursionError:  # parsed once at this depth, but the writer's own walk may not be so lucky
            raise SourceError("notebook JSON nested too deeply to rewrite") from None
        except ValueError as error:  # the JSON parsed once: a value the writer's walk cannot take stops this file only
            raise SourceError(f"notebook JSON cannot be rewritten ({error}); not written") from None

    def _split_cells(self, new_source: str) -> List[List[str]]:
        segments: List[List[str]] = []
        found: List[int] = []
        prefix: List[str] = []
        for line in lines_with_ends(new_source):
            marker = _CELL_MARKER.fullmatch(_content(line))
            if marker:
                found.append(int(marker.group(1)))
                segments.append([])
            else:
                (segments[-1] if segments else prefix).append(line)
        expected = self.cell_numbers
        if found != expected:
            problem = _marker_problem(expected, found)
            raise SourceError(f"the fix changed the notebook's cell markers ({problem}); not written")
        if segments:
            segments[0][:0] = prefix
        elif any(line.strip() for line in prefix):
            raise SourceError("the fix added code to a notebook without code cells; not written")
        return segments

    def _with_sources(self, replacements: Dict[int, str]) -> str:
        """Splice new `source` values into the original JSON text, formatted like their neighbours."""
        spans = _source_spans(self.text, self.cell_numbers)
        style = _JsonStyle.of(self.text)
        pieces: List[str] = []
        end = len(self.text)
        for position in sorted(replacements, reverse=True):
            cell = self._cells[position]
            new_text = replacements[position]
            value_start, value_end, key_indent = spans[position]
            value = lines_with_ends(new_text) if cell.source_is_list else new_text
            pieces.append(self.text[value_end:end])
            pieces.append(style.dump(value, key_indent))
            end = value_start
        pieces.append(self.text[:end])
        return "".join(reversed(pieces))


def _no_lone_surrogate(cell_text: str, index: int) -> None:
    """JSON's `\\ud800` escape decodes to half a UTF-16 pair, which no Python source holds and no UTF-8 text
    can carry: say where, instead of failing later on the first encode."""
    try:
        cell_text.encode("utf-8")
    except UnicodeEncodeError as error:
        before = cell_text[: error.start]
        row = before.count("\n") + 1
        column = error.start - (before.rfind("\n") + 1) + 1
        code = ord(cell_text[error.start])
        raise SourceError(f"cell {index}: lone surrogate \\u{code:04x} at line {row}, column {column}") from None


def _marker_problem(expected: List[int], found: List[int]) -> str:
    missing = [number for number in expected if number not in found]
    if missing:
        return f"marker of cell {missing[0]} missing"
    repeated = [number for number in found if found.count(number) > 1 or number not in expected]
    if repeated:
        return f"marker of cell {repeated[0]} repeated or unknown"
    return "markers out of order"


# -- IPython syntax ----------------------------------------------------------------------------


def _hide_magics(lines: List[str], magic_lines: Dict[int, Tuple[str, str]], next_id: int) -> Tuple[List[str], int]:
    """Replace IPython-only lines by numbered placeholders; record them in `magic_lines` by id."""

    def hide(line: str, statement: bool) -> str:
        nonlocal next_id
        indent = line[: len(line) - len(line.lstrip(" \t\f"))]
        placeholder = f"{indent}{'pass  ' if statement else ''}# amp-lint: ipython-magic {next_id}"
        magic_lines[next_id] = (_content(line), placeholder)
        next_id += 1
        return placeholder + _ending(line)

    result: List[str] = []
    first_code = next((position for position, line in enumerate(lines) if line.strip()), None)
    if first_code is not None and lines[first_code].lstrip().startswith("%%"):
        magic = lines[first_code].lstrip()[2:].split(None, 1)
        if not magic or magic[0] not in PYTHON_CELL_MAGICS:  # `%%bash`, `%%html`: the whole cell is not Python
            return [hide(line, statement=False) for line in lines], next_id
        # `%%time` and the like run the rest of the cell as Python: only the magic's own line is hidden.
        result = lines[:first_code] + [hide(lines[first_code], statement=False)]
        lines = lines[first_code + 1 :]

    scanner = _LogicalLines()
    continued_magic = False
    for line in lines:
        content = _content(line)
        if continued_magic:
            result.append(hide(line, statement=False))
        elif scanner.at_statement_start and _is_magic(content):
            result.append(hide(line, statement=True))
        else:
            scanner.feed(content)
            result.append(line)
            continue
        continued_magic = content.endswith("\\")  # IPython joins a magic's backslash-continued lines
    return result, next_id


# Cell magics whose body is Python, checked as Ruff checks them (ruff_notebook's cell.rs); any other cell
# magic (`%%bash`, `%%writefile`, `%%html`) makes the whole cell opaque.
PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})


def _is_magic(content: str) -> bool:
    return bool(_ESCAPE.match(content) or _HELP.fullmatch(content) or _MAGIC_ASSIGNMENT.match(content))


class _LogicalLines:
    """Tracks strings, brackets and backslashes, to know where a new statement may begin.

    Without it a `%` or `!` line inside a triple-quoted string or a bracket would be taken for a magic.
    """

    def __init__(self) -> None:
        self.quote: Optional[str] = None  # the open string's quote: ', ", ''' or \"\"\"
        self.depth = 0
        self.continued = False

    @property
    def at_statement_start(self) -> bool:
        return self.quote is None and self.depth == 0 and not self.continued

    def feed(self, line: str) -> None:
        position = 0
        in_comment = False
        while position < len(line):
            char = line[position]
            if self.quote:
                if char == "\\":
                    position += 2
                elif line.startswith(self.quote, position):
                    position += len(self.quote)
                    self.quote = None
                else:
                    position += 1
                continue
            if char == "#":
                in_comment = True
                break
            if char in "\"'":
                self.quote = char * 3 if line.startswith(char * 3, position) else char
                position += len(self.quote)
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(self.depth - 1, 0)
            position += 1
        backslash = line.endswith("\\") and not in_comment
        if self.quote and len(self.quote) == 1 and not backslash:
            self.quote = None  # an unterminated one-line string: invalid code, the parser will say so
        self.continued = backslash and self.quote is None


def _restore_magics(lines: List[str], cell: _CodeCell) -> List[str]:
    """Put each placeholder's original line back; refuse if one was changed, dropped or moved."""
    restored: List[str] = []
    seen: List[int] = []
    for line in lines:
        match = _PLACEHOLDER.fullmatch(_content(line))
        if not match:
            restored.append(line)
            continue
        magic_id = int(match.group(1))
        original, placeholder = cell.magic_lines.get(magic_id, (None, None))
        if _content(line) != placeholder:
            raise SourceError(f"the fix changed an IPython magic line in cell {cell.index}; not written")
        seen.append(magic_id)
        restored.append(original + _ending(line))
    if seen != sorted(cell.magic_lines):
        raise SourceError(f"the fix dropped or moved an IPython magic line in cell {cell.index}; not written")
    return restored


# -- JSON text surgery -------------------------------------------------------------------------


@dataclass(frozen=True)
class _JsonStyle:
    """How the notebook's JSON was written, so a replaced value looks like the rest of the file."""

    indent: Optional[str]
    separators: Tuple[str, str]
    ensure_ascii: bool
    newline: str

    @classmethod
    def of(cls, text: str) -> "_JsonStyle":
        opening = text.index("{")
        gap = _WHITESPACE.match(text, opening + 1).group()
        indent = gap.rsplit("\n", 1)[1] if "\n" in gap else None
        key_end = text.index('"', text.index('"', opening) + 1) + 1  # the notebook's first key
        spaced = text[key_end : key_end + 2] == ": "
        separators = ("," if indent is not None or not spaced else ", ", ": " if spaced else ":")
        # nbformat writes UTF-8 as is; a file full of \\u escapes was written with ensure_ascii.
        ensure_ascii = text.isascii() and "\\u" in text
        return cls(indent, separators, ensure_ascii, "\r\n" if "\r\n" in gap else "\n")

    def dump(self, value: object, key_indent: str) -> str:
        dumped = json.dumps(value, indent=self.indent, separators=self.separators, ensure_ascii=self.ensure_ascii)
        return dumped.replace("\n", self.newline + key_indent)  # JSON strings never hold a raw newline


def _source_spans(text: str, cell_numbers: List[int]) -> List[Tuple[int, int, str]]:
    """For the given cells: where their `source` value starts and ends in the text, and its key's indent."""
    decoder = json.JSONDecoder(parse_int=_parse_int)  # as `Notebook.parse` reads it: a huge integer too
    members, _ = _object_members(text, _WHITESPACE.match(text).end(), decoder)
    cells_start = [start for key, _, start, _ in members if key == "cells"][-1]
    spans: List[Tuple[int, int, str]] = []
    position = _WHITESPACE.match(text, cells_start + 1).end()
    number = 0
    while text[position] != "]":
        number += 1
        cell_members, position = _object_members(text, position, decoder)
        if number in cell_numbers:
            key_start, value_start, value_end = [m[1:] for m in cell_members if m[0] == "source"][-1]
            line = text[text.rfind("\n", 0, key_start) + 1 : key_start]
            spans.append((value_start, value_end, line[: len(line) - len(line.lstrip())]))
        position = _WHITESPACE.match(text, position).end()
        if text[position] == ",":
            position = _WHITESPACE.match(text, position + 1).end()
    return spans


def _object_members(
    text: str, position: int, decoder: json.JSONDecoder
) -> Tuple[List[Tuple[str, int, int, int]], int]:
    """(key, key start, value start, value end) of each member of the object at `position`, and its end."""
    members = []
    position = _WHITESPACE.match(text, position + 1).end()
    while text[position] != "}":
        key_start = position
        key, position = json.decoder.scanstring(text, position + 1)
        position = _WHITESPACE.match(text, position).end() + 1  # past the colon
        value_start = _WHITESPACE.match(text, position).end()
        _, value_end = decoder.raw_decode(text, value_start)
        members.append((key, key_start, value_start, value_end))
        position = _WHITESPACE.match(text, value_end).end()
        if text[position] == ",":
            position = _WHITESPACE.match(text, position + 1).end()
    return members, position + 1
