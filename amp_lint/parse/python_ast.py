"""Python's own parser (`ast`), for the cheap decisions made before and beside LibCST's parse.

Three of them read the same file: the prefilter's second step, the project index's facts about the
checked module, and the cross-file provider's look at the `self.attr = Class(...)` assignments of the
checked module. `parse` keeps the tree of the last text it parsed, so that a file is parsed by `ast` once
(a tree is never changed by its readers). Large texts are not kept: their tree would sit in memory
beside LibCST's (the run's peak); they are parsed again, as before.
"""

from __future__ import annotations

import ast
import warnings
from typing import Optional, Tuple, Union

_KEEP_CHARS = 400_000  # a tree of a text this long is a few tens of MB
_last: Optional[Tuple[Union[str, bytes], Optional[ast.Module]]] = None


def parse(text: Union[str, bytes]) -> Optional[ast.Module]:
    """The module's tree, or None when this Python cannot read it (newer syntax, null bytes, too deep)."""
    global _last
    if _last is not None and (_last[0] is text or _last[0] == text):
        return _last[1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like are not ours to report
            tree: Optional[ast.Module] = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        tree = None
    _last = (text, tree) if len(text) <= _KEEP_CHARS else None
    return tree
