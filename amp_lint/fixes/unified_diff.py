"""The unified diff `--diff` prints: the lines a fix changed, and only those.

`difflib.unified_diff` matches lines with `SequenceMatcher`'s default `autojunk=True`: in a text of 200 lines
or more, a line that makes up over 1% of them (the blank line, nearly always) is "junk", never matched, so
untouched blank lines show as removed and added again. Here the matcher sees every line.
"""

from __future__ import annotations

import difflib
from typing import Iterator, List


def unified_diff(before: str, after: str, from_name: str, to_name: str, context: int = 3) -> str:
    """`before` -> `after` as a unified diff with headers `--- from_name` / `+++ to_name` ("" when equal)."""
    return "".join(_diff_lines(before.splitlines(True), after.splitlines(True), from_name, to_name, context))


def _diff_lines(a: List[str], b: List[str], from_name: str, to_name: str, context: int) -> Iterator[str]:
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    started = False
    for group in matcher.get_grouped_opcodes(context):
        if not started:
            started = True
            yield f"--- {from_name}\n"
            yield f"+++ {to_name}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, a_start, a_end, b_start, b_end in group:
            if tag == "equal":
                yield from _marked(" ", a[a_start:a_end])
                continue
            if tag in ("replace", "delete"):
                yield from _marked("-", a[a_start:a_end])
            if tag in ("replace", "insert"):
                yield from _marked("+", b[b_start:b_end])


def _marked(mark: str, lines: List[str]) -> Iterator[str]:
    for line in lines:
        # A last line without a line break, as diff(1) and difflib show it.
        ends_a_line = line.splitlines()[0] != line
        yield mark + line if ends_a_line else mark + line + "\n\\ No newline at end of file\n"


def _range(start: int, stop: int) -> str:
    """A hunk's `start,length` (difflib's `_format_range_unified`)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1  # an empty range starts on the line before
    return f"{beginning},{length}"
