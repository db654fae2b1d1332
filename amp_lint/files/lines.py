r"""Lines as Python counts them: broken at \r\n, \r and \n only.

`str.splitlines` also breaks at \f, \v, \x1c-\x1e and Unicode separators, which would shift every
line number after one of them; every module that splits source text into lines uses these instead.
"""

from __future__ import annotations

import re
from typing import List

LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def split_lines(text: str) -> List[str]:
    """The lines without their endings; a final line break does not start another, empty line."""
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def lines_with_ends(text: str) -> List[str]:
    """The lines, each with its own ending: `"".join(lines_with_ends(text)) == text`."""
    return _LINE_WITH_END.findall(text)
