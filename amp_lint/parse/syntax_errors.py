"""Python's own word on a syntax error: its message and its position, for every place that reports one.

LibCST's parser names the tokens it expected (`expected one of !=, %, &, (, *, ...`) at the place it gave up,
often the end of the file; Python says `'(' was never closed` at the bracket. The check (`amp_lint.engine`) and
the language server (`amp_lint.server`) both report Python's message at Python's position, kept inside the
text so that an editor can show it.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from amp_lint.diagnostics import FileError, Location
from amp_lint.parse import python_ast
from amp_lint.files.lines import LINE_BREAK

if TYPE_CHECKING:  # pragma: no cover (LibCST is not imported where only Python's word is wanted)
    import libcst as cst


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


def parse_failure(filename: str, source: str, error: cst.ParserSyntaxError) -> FileError:
    """A syntax error as Python states it, at Python's position (`'(' was never closed` at the bracket, not
    LibCST's list of expected tokens at the end of the file); or LibCST's limit on valid Python, said so."""
    python_error = python_syntax_error(source, filename)
    if python_error is not None:
        return FileError(filename, f"syntax error: {python_error.message}", python_error.start)
    if python_ast.parse_quietly(source) is None:  # Python cannot say where (too deep, a null byte): LibCST's word
        return FileError(filename, libcst_message(error), libcst_location(error))
    return FileError(filename, f"not analysed: valid Python that LibCST cannot parse ({libcst_message(error)})")


def libcst_location(error: cst.ParserSyntaxError) -> Location:
    # The native parser names the offending token's position in its message; prefer it.
    match = re.search(r"error at (\d+):(\d+)", error.message)
    if match:
        return Location(int(match.group(1)), int(match.group(2)) + 1)
    return Location(error.editor_line, error.editor_column)


def libcst_message(error: cst.ParserSyntaxError) -> str:
    message = re.sub(r"^(parser error: )?error at \d+:\d+: ", "", error.message)
    if len(message) > 120:
        message = message[:117] + "..."
    return f"syntax error: {message}"
