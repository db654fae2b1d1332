"""A memo of a function's value per LibCST node, for facts asked about the same node many times.

Nodes are not hashable by value (and comparing them is a tree walk), so the memo is keyed by `id(node)`
and keeps the node itself, so that an id reused by a later node after the first was freed is a miss,
not a wrong answer. It is bounded: past `size` entries it starts afresh (a file's analysis asks about
a few thousand nodes at most; a long run must not keep every tree alive).
"""

from __future__ import annotations

from typing import Callable, Dict, Generic, List, Tuple, TypeVar

import libcst as cst

N = TypeVar("N", bound=cst.CSTNode)
V = TypeVar("V")


class NodeMemo(Generic[N, V]):
    _all: "List[NodeMemo]" = []  # every memo, for `forget_all`

    def __init__(self, compute: Callable[[N], V], size: int = 10_000) -> None:
        self._compute = compute
        self._size = size
        self._entries: Dict[int, Tuple[N, V]] = {}
        NodeMemo._all.append(self)

    @classmethod
    def forget_all(cls) -> None:
        """A file's analysis is over: its nodes need not stay alive in any memo."""
        for memo in cls._all:
            memo._entries.clear()

    def __call__(self, node: N) -> V:
        entry = self._entries.get(id(node))
        if entry is not None and entry[0] is node:
            return entry[1]
        value = self._compute(node)
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[id(node)] = (node, value)
        return value
