"""What the checker sees of an editor's document, and the way back: positions, edits, cells.

A text document is its own program. A notebook (LSP notebook-document sync) is its Python code cells joined
the way `amp_lint.files.notebook.Notebook` joins them on disk, so the same checker runs on the same program;
a finding in it is placed in its cell's document with cell-relative positions, and a changed program is put
back cell by cell (refused, like on disk, when a fix would touch the cell markers or IPython magics).

The engine counts 1-based rows and columns in characters (code points); LSP counts 0-based lines and
columns in the code units of the negotiated position encoding (UTF-16 unless the client offers another).
`units(text)` is that count for a piece of a line. Nothing here imports pygls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import Edit, Location
from amp_lint.files.lines import lines_with_ends, split_lines
from amp_lint.files.sources import SourceError

Units = Callable[[str], int]
# (uri, 0-based line, column in client units)
Place = Tuple[str, int, int]


@dataclass(frozen=True)
class Cell:
    uri: str
    text: str
    is_python_code: bool
    version: object = None  # the cell document's version, which an edit of it names


class DocumentView:
    """One document as the checker sees it (`program`), and how its places map back to the editor's."""

    key: str  # the uri results are kept under (the document's, or the notebook's)
    path: str  # the file path the settings are resolved for and the checker names
    program: str
    version: object

    def uris(self) -> List[str]:
        raise NotImplementedError

    def place(self, location: Location, units: Units) -> Place:
        """Where a 1-based program location is in the editor."""
        raise NotImplementedError

    def changes_for(self, new_program: str) -> Dict[str, List[Edit]]:
        """The edits per document uri (1-based, in that document's text) that turn `program` into
        `new_program`; raises `SourceError` when the change cannot be put back (notebook markers)."""
        raise NotImplementedError

    def text_of(self, uri: str) -> str:
        raise NotImplementedError

    def version_of(self, uri: str) -> object:
        """The version of the document `uri` this view was made from (what an edit of it must apply to)."""
        raise NotImplementedError

    def message_of(self, finding) -> str:
        """The finding's message as the editor shows it (a notebook's names lines by cell)."""
        return finding.message


class TextView(DocumentView):
    def __init__(self, uri: str, path: str, text: str, version: object) -> None:
        self.key = uri
        self.path = path
        self.program = text
        self.version = version
        self._lines: Optional[List[str]] = None

    def uris(self) -> List[str]:
        return [self.key]

    def text_of(self, uri: str) -> str:
        return self.program

    def version_of(self, uri: str) -> object:
        return self.version

    def place(self, location: Location, units: Units) -> Place:
        if self._lines is None:
            self._lines = split_lines(self.program)
        line, character = client_position(self._lines, self.program, location, units)
        return self.key, line, character

    def changes_for(self, new_program: str) -> Dict[str, List[Edit]]:
        from amp_lint.fixes.text_edits import text_edits  # LibCST: not before the first check

        return {self.key: list(text_edits(self.program, new_program))}


class NotebookView(DocumentView):
    """An LSP notebook: its cells in order (markdown and non-Python cells kept, for the numbering)."""

    def __init__(self, uri: str, path: str, cells: Sequence[Cell], version: object) -> None:
        from amp_lint.files.notebook import Notebook

        self.key = uri
        self.path = path
        self.version = version
        self.cells = list(cells)
        self._json = _notebook_json(self.cells)
        self.notebook = Notebook.parse(self._json)
        self.program = self.notebook.source
        self._cell_lines: Dict[str, List[str]] = {}

    def uris(self) -> List[str]:
        return [cell.uri for cell in self.cells if cell.is_python_code]

    def message_of(self, finding) -> str:
        return self.notebook.in_cell(finding).message  # "(scaler created at cell 2, line 3)"

    def text_of(self, uri: str) -> str:
        return next(cell.text for cell in self.cells if cell.uri == uri)

    def version_of(self, uri: str) -> object:
        return next(cell.version for cell in self.cells if cell.uri == uri)

    def place(self, location: Location, units: Units) -> Place:
        number, row, column = self.notebook.locate(location.row, location.column)
        cell = self.cells[number - 1]
        lines = self._cell_lines.get(cell.uri)
        if lines is None:
            lines = self._cell_lines[cell.uri] = split_lines(cell.text)
        line, character = client_position(lines, cell.text, Location(row, column), units)
        return cell.uri, line, character

    def changes_for(self, new_program: str) -> Dict[str, List[Edit]]:
        from amp_lint.fixes.text_edits import text_edits

        new_json = self.notebook.updated_json(new_program)  # SourceError: markers or magics touched
        new_cells = json.loads(new_json)["cells"]
        changes: Dict[str, List[Edit]] = {}
        for cell, new_cell in zip(self.cells, new_cells):
            source = new_cell.get("source", "")
            new_text = "".join(source) if isinstance(source, list) else source
            if new_text != cell.text:
                changes[cell.uri] = list(text_edits(cell.text, new_text))
        return changes


def _notebook_json(cells: Sequence[Cell]) -> str:
    """nbformat 4 JSON of the cells, as `Notebook.parse` reads it (non-Python code cells as raw cells)."""
    document = {
        "cells": [
            {"cell_type": "code" if cell.is_python_code else "raw", "metadata": {}, "source": cell.text}
            for cell in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document)


# --- positions ------------------------------------------------------------------------------------


def client_position(lines: Sequence[str], text: str, location: Location, units: Units) -> Tuple[int, int]:
    """A 1-based (row, character column) as a 0-based LSP (line, code-unit column).

    A location past the last line (the end of an edit that runs to the end of the file) is the end of
    the document; a column past the end of its line is the line's end.
    """
    row, column = location.row, location.column
    if row > len(lines):
        if text and not text.endswith(("\n", "\r")) and lines:
            return len(lines) - 1, units(lines[-1])
        return len(lines), 0
    line = lines[row - 1] if row >= 1 else ""
    return max(row - 1, 0), units(line[: max(column - 1, 0)])


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with the (non-overlapping) 1-based edits applied."""
    lines = lines_with_ends(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(location: Location) -> int:
        if location.row > len(lines):
            return len(text)
        start = starts[location.row - 1]
        content = lines[location.row - 1].rstrip("\r\n")
        return start + min(location.column - 1, len(content))

    pieces = []
    done = len(text)
    for edit in sorted(edits, key=lambda e: (e.location, e.end_location), reverse=True):
        begin, end = offset(edit.location), offset(edit.end_location)
        if end > done:
            raise SourceError("overlapping edits")
        pieces.append(text[end:done])
        pieces.append(edit.content)
        done = begin
    pieces.append(text[:done])
    return "".join(reversed(pieces))
