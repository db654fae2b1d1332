"""The statements on some lines of a module, as a small module of their own: the prefilter's second step
asks what the code on a few lines of a large module names, and `ast` then parses those statements
instead of the module.

A statement here is a logical line: from the line where it starts to the one where its brackets close and
no backslash carries it on. They are found in the text without its strings and comments
(`code_text.without_strings_and_comments`), so that a bracket or a line inside a string counts for
nothing. Each becomes a statement of its own that `ast` can parse alone, with what the line itself
holds: a compound statement's header gets a `pass` body (`elif` becomes `if`, `except` gets its `try`),
a decorator decorates a `def _(): pass`, and the whole sits in an `async def` (so that `return`, `yield`
and `await` parse). Headers that hold no expression (`else:`, `try:`, `finally:`) are left out.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence

from amp_lint.parse.code_text import without_strings_and_comments

_KEYWORD = re.compile(r"(async[ \t]+)?([A-Za-z_]\w*)")
# Compound statements' clauses that hold no expression of their own.
_BARE_CLAUSES = frozenset({"else", "try", "finally"})


def statements_on(text: str, lines: Sequence[int]) -> Optional[str]:
    """A module of the logical lines of `text` that hold one of `lines` (sorted, 1-based), each made a
    statement of its own (see the module's doc); None where they cannot be found so (`\\r` line breaks,
    a `match` statement's `case`)."""
    if "\r" in text:
        return None
    if not lines:
        return ""
    structure = without_strings_and_comments(text).split("\n")
    original = text.split("\n")
    parts: List[str] = ["async def _():\n pass\n"]
    wanted = iter(lines)
    next_line = next(wanted, None)
    start = -1  # the first line (0-based) of the logical line being read
    depth = 0
    continued = False
    for index, line in enumerate(structure):
        if next_line is None:
            break
        code = line.lstrip(" \t")
        if not code:  # blank, a comment, or a string alone (which may end a backslash's statement)
            if start >= 0 and (depth > 0 or continued):
                continued = False
                if depth == 0:
                    next_line = _take(parts, structure, original, start, index, next_line, wanted)
                    start = -1
                    if next_line is False:
                        return None
            elif start < 0 and index + 1 == next_line:
                next_line = next(wanted, None)  # nothing on the line (a comment, a string: no statement)
            continue
        if start < 0:
            start = index
        if "(" in code or ")" in code or "[" in code or "]" in code or "{" in code or "}" in code:
            depth = max(0, depth + code.count("(") + code.count("[") + code.count("{") - code.count(")") - code.count("]") - code.count("}"))
        continued = code.rstrip().endswith("\\")
        if depth == 0 and not continued:  # the logical line ends here
            next_line = _take(parts, structure, original, start, index, next_line, wanted)
            start = -1
            if next_line is False:
                return None
    if next_line is not None:
        return None  # a line past the last statement, or in one that never ends (no Python)
    return "".join(parts)


def _take(parts: List[str], structure: List[str], original: List[str], start: int, end: int, next_line, wanted):
    """Add the logical line `start`..`end` (0-based) to `parts` if it holds `next_line` (1-based); the next
    line wanted after it (None: none left), or False when it cannot stand alone."""
    if next_line > end + 1:
        return next_line
    while next_line is not None and next_line <= end + 1:
        next_line = next(wanted, None)
    head = structure[start].lstrip(" \t")
    found = _KEYWORD.match(head)
    keyword = found.group(2) if found else ""
    statement = [original[start].lstrip(" \t")] + original[start + 1 : end + 1]
    is_header = structure[end].rstrip().endswith(":") and keyword in _HEADERS
    if not is_header and keyword in _BARE_CLAUSES and head[len(keyword) :].lstrip(" \t").startswith(":"):
        # `else: x = 1`: the clause's own statement, alone
        statement[0] = statement[0][len(keyword) :].lstrip(" \t")[1:].lstrip(" \t")
    elif not is_header and keyword == "elif":
        statement[0] = "if" + statement[0][4:]
    elif not is_header and keyword == "except":
        statement = ["try: pass"] + statement
    elif head.startswith("@"):
        statement.append("def _(): pass")
    elif is_header and keyword in _BARE_CLAUSES:
        return next_line
    elif is_header and keyword in ("case", "match"):
        return False
    elif is_header and keyword == "elif":
        statement[0] = "if" + statement[0][4:]
        statement.append(" pass")
    elif is_header and keyword == "except":
        statement = ["try: pass"] + statement + [" pass"]
    elif is_header:
        statement.append(" pass")
    parts.append("".join(" " + line + "\n" for line in statement))
    return next_line


_HEADERS = frozenset(
    {"if", "elif", "else", "while", "for", "with", "try", "except", "finally", "def", "class", "async", "match", "case"}
)
