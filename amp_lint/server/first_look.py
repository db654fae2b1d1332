"""What the server can say of a document before the engine, the rules and LibCST are loaded (issue 44, item 17).

The first check of a session waits for those imports (seconds on a busy machine). Two answers need none of them:
a document with a syntax error (Python's own `compile` names it), and a document the prefilter rules out (no
name a selected rule needs: no finding is possible). `first_look` gives these at once, so that the editor has a
first result as soon as the document is read; the full check follows and replaces it.

`python_syntax_error` is also how a syntax error is shown after the full check: Python's message and position
(not LibCST's token list), and a range inside the document. Nothing here imports pygls, the rules or LibCST.
"""

from __future__ import annotations

import ast
import warnings
from typing import List, Optional, Tuple

from amp_lint.diagnostics import FileError, Location
from amp_lint.files.lines import split_lines

# (message, start, end), 1-based rows and columns in characters, both inside the document.
SyntaxProblem = Tuple[str, Location, Location]


def python_syntax_error(program: str) -> Optional[SyntaxProblem]:
    """Python's own syntax error for `program` ("syntax error: '(' was never closed"), or None when it parses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(program, "<document>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        lines = split_lines(program)
        start = _inside(lines, error.lineno or 1, error.offset or 1)
        end = _inside(lines, error.end_lineno or 0, error.end_offset or 0)
        if (end.row, end.column) <= (start.row, start.column):
            end = _inside(lines, start.row, start.column + 1)
        return f"syntax error: {error.msg}", start, end
    except (ValueError, RecursionError, MemoryError):  # a null byte, code nested too deep: the engine says
        return None
    return None


def _inside(lines, row: int, column: int) -> Location:
    """(row, column) moved into the document: past the last line is the end of the last line."""
    if not lines:
        return Location(1, 1)
    if row > len(lines) or row < 1:
        row, column = len(lines), len(lines[-1].rstrip("\r\n")) + 1
    content = lines[row - 1].rstrip("\r\n")
    return Location(row, max(1, min(column, len(content) + 1)))


def first_look(view, settings_of) -> Optional[List[FileError]]:
    """The result of `view` (a text document) when it needs no engine: its syntax error, or nothing (excluded, or
    no finding possible); None when only the full check can tell. `settings_of(path)`: the server's settings."""
    from amp_lint.engine.runner import may_match

    if python_syntax_error(view.program) is not None:
        return [FileError(view.path, "syntax error", Location(1, 1))]  # placed by `python_syntax_error`
    settings = settings_of(view.path)
    return [] if settings.excluded or not may_match(view.program, settings.config) else None
