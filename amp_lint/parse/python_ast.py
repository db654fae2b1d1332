"""Python's own parser (`ast`), for the cheap decisions made before and beside LibCST's parse.

Three of them read the same file: the prefilter's second step, the project index's facts about the
checked module, and the cross-file provider's look at the `self.attr = Class(...)` assignments of the
checked module. `parse` keeps the tree of the last text it parsed, so that a file is parsed by `ast` once
(a tree is never changed by its readers). The tree of a large text would sit in memory beside LibCST's
(the run's peak): the checker drops it (`release_large`) before its LibCST parse.
"""

from __future__ import annotations

import ast
import warnings
from typing import Optional, Tuple, Union

_KEEP_CHARS = 400_000  # kept beside LibCST's tree up to this size: a tree of a text this long is a few tens of MB
_last: Optional[Tuple[Union[str, bytes], Optional[ast.Module]]] = None


def parse(text: Union[str, bytes]) -> Optional[ast.Module]:
    """The module's tree, or None when this Python cannot read it (newer syntax, null bytes, too deep)."""
    global _last
    if _last is not None and (_last[0] is text or _last[0] == text):
        return _last[1]
    _last = None  # not two large trees at once
    tree = parse_quietly(text)
    _last = (text, tree)
    return tree


def is_kept(text: Union[str, bytes]) -> bool:
    """Whether `parse(text)` would answer from the kept tree, without parsing."""
    return _last is not None and (_last[0] is text or _last[0] == text)


def parse_quietly(text: Union[str, bytes]) -> Optional[ast.Module]:
    """`ast.parse` without its warnings (invalid escape sequences and the like are not ours to report), kept
    nowhere; None when this Python cannot read the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def release_large() -> None:
    """Forget the kept tree if its text is large (before a LibCST parse of it: see the module's doc)."""
    global _last
    if _last is not None and len(_last[0]) > _KEEP_CHARS:
        _last = None


def forget() -> None:
    """Forget the kept tree (a long-lived process between checks: the language server)."""
    global _last
    _last = None
