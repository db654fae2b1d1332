"""Python's own word on a syntax error: its message and its position, for every place that reports one.

LibCST's parser names the tokens it expected (`expected one of !=, %, &, (, *, ...`) at the place it gave up,
often the end of the file; Python says `'(' was never closed` at the bracket. The check (`amp_lint.engine`) and
the language server (`amp_lint.server`) both report Python's message at Python's position, kept inside the
text so that an editor can show it.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from typing import Optional

from amp_lint.diagnostics import Location
from amp_lint.files.lines import LINE_BREAK


@dataclass(frozen=True)
class PythonSyntaxError:
    message: str  # Python's message, as `python -c` prints it ("'(' was never closed")
    start: Location  # 1-based row and column (in characters), inside the text
    end: Location  # where Python says the error ends (the start when it does not say), inside the text


def python_syntax_error(source: str, filename: str = "<unknown>") -> Optional[PythonSyntaxError]:
    """Python's syntax error for `source`, or None when Python compiles it (or cannot say where it fails: a
    text too deeply nested for its parser, a null byte)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        if not error.lineno:
            return None
        start = _inside(source, error.lineno, error.offset or 1)
        end = start
        if error.end_lineno and error.end_offset and (error.end_lineno, error.end_offset) > (error.lineno, error.offset or 1):
            end = _inside(source, error.end_lineno, error.end_offset)
        return PythonSyntaxError(error.msg, start, max(start, end))
    except (ValueError, RecursionError, MemoryError, OverflowError):
        return None
    return None


def _inside(source: str, row: int, column: int) -> Location:
    """(row, column) moved inside the text: Python places "unexpected EOF" one line past the last one."""
    lines = LINE_BREAK.split(source)  # Python's line breaks only (not form feeds)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the break that ends the last line starts no line of its own
    if row > len(lines):
        return Location(len(lines), len(lines[-1]) + 1)
    row = max(row, 1)
    return Location(row, max(1, min(column, len(lines[row - 1]) + 1)))
