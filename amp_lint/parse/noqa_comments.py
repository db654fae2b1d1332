"""`# noqa` comments as the checker reads them: a line's `# noqa` / `# noqa: AMP001, AMP010` and the
file-level `# amp-lint: noqa` (`--add-noqa`, in `amp_lint.fixes.noqa`, writes the first kind).
"""

from __future__ import annotations

import re
from typing import FrozenSet, Optional, Sequence

NOQA = re.compile(r"#\s*noqa(?::[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:[ \t]*,?[ \t]*[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
FILE_NOQA = re.compile(r"^[ \t]*#[ \t]*amp-lint[ \t]*:[ \t]*noqa(?::[ \t]*(?P<codes>[A-Za-z0-9, \t]+))?[ \t]*$", re.I | re.M)


def suppressing_row(code: str, lines: Sequence[str], first_row: int, last_row: int) -> int:
    """The row of the `# noqa` that suppresses `code` on these rows, or 0."""
    for row in sorted({first_row, last_row}):
        if not 0 < row <= len(lines) or "noqa" not in lines[row - 1].lower():
            continue
        match = NOQA.search(lines[row - 1])
        if match is None:
            continue
        codes = match.group("codes")
        if codes is None:
            return row
        if code.upper() in {c.upper() for c in re.split(r"[\s,]+", codes) if c}:
            return row
    return 0


def file_level_noqa(source: str) -> Optional[FrozenSet[str]]:
    """None: no file-level comment; empty set: the whole file is exempt; else the codes exempted."""
    if "amp-lint" not in source:
        return None
    codes: set = set()
    found = False
    for match in FILE_NOQA.finditer(source):
        found = True
        listed = match.group("codes")
        if listed is None:
            return frozenset()
        codes |= {c.upper() for c in re.split(r"[\s,]+", listed) if c}
    return frozenset(codes) if found else None
