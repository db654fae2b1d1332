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
from typing import Iterator, List, Optional, Sequence, Tuple

from amp_lint.parse.code_text import without_strings_and_comments

_KEYWORD = re.compile(r"(async[ \t]+)?([A-Za-z_]\w*)")
# Compound statements' clauses that hold no expression of their own.
_BARE_CLAUSES = frozenset({"else", "try", "finally"})


def statements_on(text: str, lines: Sequence[int]) -> Optional[str]:
    """A module of the logical lines of `text` that hold one of `lines` (sorted, 1-based), each made a
    statement of its own (see the module's doc); None where they cannot be found so (`\\r` line breaks,
    a `match` statement's `case`, a statement that never ends)."""
    if "\r" in text:
        return None
    if not lines:
        return ""
    structure = without_strings_and_comments(text).split("\n")
    original = text.split("\n")
    parts: List[str] = ["async def _():\n pass\n"]
    wanted = iter(lines)
    next_line = next(wanted, None)
    for first, last in logical_lines(structure):
        while next_line is not None and next_line <= first:
            next_line = next(wanted, None)  # a line outside every statement: blank, or a comment
        if next_line is None:
            break
        if last < 0:
            return None  # a statement that never ends: no Python
        if next_line > last + 1:
            continue
        while next_line is not None and next_line <= last + 1:
            next_line = next(wanted, None)
        statement = _alone(structure, original, first, last)
        if statement is None:
            return None
        parts.append(statement)
    return "".join(parts)


def logical_lines(structure: List[str]) -> Iterator[Tuple[int, int]]:
    """The first and last line (0-based) of each logical line of a text without its strings and comments
    (`without_strings_and_comments`, split at `\\n`): a statement goes on while its brackets are open or a
    line ends with a backslash. Lines outside every statement (blank, a comment) are in none. A last
    statement that never ends comes as (first, -1)."""
    start = -1
    depth = 0  # open brackets
    continued = False  # the line before ended with a backslash
    for index, line in enumerate(structure):
        code = line.lstrip(" \t")
        if not code:  # blank, a comment, or a string alone (which ends a backslash's statement)
            if start >= 0 and continued and depth == 0:
                yield start, index
                start = -1
            continued = False
            continue
        if start < 0:
            start = index
        if "(" in code or ")" in code or "[" in code or "]" in code or "{" in code or "}" in code:
            opened = code.count("(") + code.count("[") + code.count("{")
            depth = max(0, depth + opened - code.count(")") - code.count("]") - code.count("}"))
        continued = code.rstrip().endswith("\\")
        if depth == 0 and not continued:
            yield start, index
            start = -1
    if start >= 0:
        yield start, -1


def _alone(structure: List[str], original: List[str], start: int, end: int) -> Optional[str]:
    """The logical line `start`..`end` (0-based) as a statement of its own, indented for the `async def`
    ("" for a clause that holds no expression); None when it cannot stand alone."""
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
        return ""
    elif is_header and keyword in ("case", "match"):
        return None
    elif is_header and keyword == "elif":
        statement[0] = "if" + statement[0][4:]
        statement.append(" pass")
    elif is_header and keyword == "except":
        statement = ["try: pass"] + statement + [" pass"]
    elif is_header:
        statement.append(" pass")
    return "".join(" " + line + "\n" for line in statement)


_HEADERS = frozenset(
    {"if", "elif", "else", "while", "for", "with", "try", "except", "finally", "def", "class", "async", "match", "case"}
)
