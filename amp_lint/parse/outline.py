"""A module's outline: its text with the bodies of its functions hollowed, for the readers of the modules a
checked file imports that need what a module defines, not what its functions do: the project index's facts
(its functions, classes, their bases and members, its imports), a scaler factory's one function, the
`self.attr = Class(...)` assignments of its classes' methods.

The bodies are most of a module: `ast` parses the outline of torch's 264 kB `common_utils.py` in a sixth
of the time of the whole, and finding the bodies takes about as long again. They are found from the
text's lines without its strings and comments (`code_text.without_strings_and_comments`), by
indentation: a body starts after its `def`'s header (the header's logical line, however many lines its
signature takes) and ends before the next logical line at the `def`'s indentation or less. Its lines
become one string statement (`hollow.hollow`), so every line keeps its number. Where the reading is
wrong, the outline does not parse (`parse`), and the caller parses the whole text.
"""

from __future__ import annotations

import ast
import re
from typing import Collection, List, Optional, Tuple

from amp_lint.files.lines import lines_with_ends
from amp_lint.parse import python_ast
from amp_lint.parse.code_text import without_strings_and_comments
from amp_lint.parse.hollow import hollow
from amp_lint.parse.logical_lines import logical_lines

_DEF = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)")

# A module is read from its outline from this size: below it, the whole parse costs less than the
# outline's making.
MIN_CHARS = 16_000

# The outline must empty at least this share of the module's lines to be worth its parse.
_LEAST_HOLLOWED = 0.5


def parse(text: str, *, methods: bool = True, keep: Collection[str] = ()) -> Optional[ast.Module]:
    """The `ast` of the module's outline (see `outline`); the whole text's (`python_ast.parse`) when the text
    is small, the outline would save little, or it does not parse."""
    if len(text) >= MIN_CHARS and not python_ast.is_kept(text):
        hollowed = outline(text, methods=methods, keep=keep)
        tree = python_ast.parse_quietly(hollowed) if hollowed is not None else None
        if tree is not None:
            return tree
    return python_ast.parse(text)


def outline(text: str, *, methods: bool = True, keep: Collection[str] = ()) -> Optional[str]:
    """`text` with the bodies of its top-level functions hollowed, but those named in `keep`, and with
    `methods`, the bodies of every other function that is not inside one of those (methods, and functions
    in `if` and `try` blocks). None when that would not empty half of its lines, or the text has `\\r` line
    breaks (a string's line numbers would be lost in `without_strings_and_comments`)."""
    if "\r" in text:
        return None
    regions = _bodies(without_strings_and_comments(text).split("\n"), methods, keep)
    lines = lines_with_ends(text)
    if sum(last - first + 1 for first, last in regions) < _LEAST_HOLLOWED * len(lines):
        return None
    hollow(lines, regions)
    return "".join(lines)


def _bodies(structure: List[str], methods: bool, keep: Collection[str]) -> List[Tuple[int, int]]:
    """The (first, last) lines, 1-based, of the function bodies to hollow, none inside another: from the
    first logical line after the `def`'s header to the last before a logical line at the `def`'s
    indentation or less."""
    regions: List[Tuple[int, int]] = []
    body_indent = -1  # the indentation of the `def` whose body is being read
    hollowing = False  # that body is to be hollowed (not one of `keep`)
    first = last = -1  # the body's first and last lines (0-based)
    for start, end in logical_lines(structure):
        if end < 0:
            break  # a statement that never ends: the outline will not parse
        code = structure[start].lstrip(" \t")
        indent = len(structure[start]) - len(code)
        if body_indent >= 0 and indent <= body_indent:
            if hollowing and first >= 0:
                regions.append((first + 1, last + 1))
            body_indent = -1
        if body_indent >= 0:
            first, last = (start if first < 0 else first), end
        elif methods or indent == 0:
            found = _DEF.match(code)
            if found is not None and structure[end].rstrip().endswith(":"):  # a block follows the header
                body_indent, first, last = indent, -1, end
                hollowing = not (indent == 0 and found.group(1) in keep)
    if body_indent >= 0 and hollowing and first >= 0:
        regions.append((first + 1, last + 1))
    return regions
