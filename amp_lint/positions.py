"""Positions of the few nodes a run reports, without LibCST's PositionProvider over the whole module.

PositionProvider records a range for every node of the module: on torch's 462 kB
`distributed_test.py` that costs 1.1 s, five times the plain code generation (0.2 s). A run needs the
ranges of a handful of nodes (its findings and the nodes their messages name). `node_positions`
generates the code with a codegen state that does PositionProvider's bookkeeping for those nodes
only, counts lines only when one of them starts or ends, and stops as soon as the last one is done.

The ranges are PositionProvider's own (same rules: syntactic positions, hoisted start and end nodes,
the whitespace-inclusive fallback); a test compares them over every node of real files.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Set, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

from amp_lint.lines import LINE_BREAK


class _AllFound(Exception):
    """Raised inside code generation once every wanted node has its range."""


class _NoOp:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


_NO_OP = _NoOp()


class _SyntacticRange:
    """`with state.record_syntactic_position(node)` for a wanted node (PositionProvider's logic)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: "_TargetedPositionState", node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = self.state.here()

    def __exit__(self, *exc) -> bool:
        state = self.state
        start, end = self.start, state.here()
        if self.start_node is not None and id(self.start_node) in state.ranges:
            start = state.ranges[id(self.start_node)].start
        if self.end_node is not None and id(self.end_node) in state.ranges:
            end = state.ranges[id(self.end_node)].end
        state.ranges[id(self.node)] = CodeRange(start, end)
        return False


class _TargetedPositionState(CodegenState):
    def __init__(self, module: cst.Module, target_ids: Iterable[int]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.targets = set(target_ids)
        self.wanted = set(self.targets)  # plus the start/end nodes their ranges are hoisted from
        self.ranges: Dict[int, CodeRange] = {}
        self.inclusive: Dict[int, CodeRange] = {}  # whitespace and leading lines included
        self._starts: Dict[int, CodePosition] = {}
        self._remaining = len(self.targets)
        self._line, self._column, self._scanned = 1, 0, 0

    def here(self) -> CodePosition:
        """The position after every token so far (tokens are counted one by one, as PositionProvider does)."""
        tokens = self.tokens
        line, column = self._line, self._column
        for index in range(self._scanned, len(tokens)):
            token = tokens[index]
            if "\n" not in token and "\r" not in token:
                column += len(token)
                continue
            segments = LINE_BREAK.split(token)  # PositionProvider's own pattern, \\r\\n?|\\n, in other words
            line += len(segments) - 1
            column = len(segments[-1])
        self._line, self._column, self._scanned = line, column, len(tokens)
        return CodePosition(line, column)

    def pop_trailing_newline(self) -> None:
        self.here()  # PositionProvider counted the newline when it was added
        super().pop_trailing_newline()
        self._scanned = len(self.tokens)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self._starts[id(node)] = self.here()

    def after_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key not in self.wanted:
            return
        self.inclusive[key] = CodeRange(self._starts[key], self.here())
        if key not in self.ranges:  # no syntactic range: the whitespace-inclusive one
            self.ranges[key] = self.inclusive[key]
        if key in self.targets:
            self.targets.discard(key)
            self._remaining -= 1
            if not self._remaining:
                raise _AllFound

    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None, end_node: Optional[cst.CSTNode] = None
    ):
        if id(node) not in self.wanted:
            return _NO_OP
        for hoisted in (start_node, end_node):
            if hoisted is not None:
                self.wanted.add(id(hoisted))
        return _SyntacticRange(self, node, start_node, end_node)


class NodeLocator:
    """The positions of chosen nodes of one module, found by one code generation for all of them.

    Callers say which nodes they will ask about (`want`) before the first question; the findings'
    nodes and the statements their fixes change are then placed by the same pass. A node wanted
    after that pass costs a second one (correct, only slower).
    """

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._wanted: Set[int] = set()
        self._state: Optional[_TargetedPositionState] = None
        self._placed: Set[int] = set()  # what the last pass was asked for

    def want(self, node_ids: Iterable[int]) -> None:
        self._wanted.update(node_ids)

    def range_of(self, node_id: int) -> Optional[CodeRange]:
        """PositionProvider's range of the node; None when it is not in the module."""
        return self._located(node_id).ranges.get(node_id)

    def line_span_of(self, node_id: int) -> Optional[Tuple[int, int]]:
        """(first line, line after the last) of a node that spans whole lines (a statement, with its
        leading blank and comment lines); None for a node that starts or ends inside a line."""
        found = self._located(node_id).inclusive.get(node_id)
        if found is None or found.start.column != 0 or found.end.column != 0:
            return None
        return (found.start.line, found.end.line)

    def _located(self, node_id: int) -> _TargetedPositionState:
        self._wanted.add(node_id)
        if self._state is None or not self._wanted <= self._placed:
            self._placed = set(self._wanted)
            self._state = _generate_until_found(self.module, self._placed)
        return self._state


def node_positions(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> Dict[int, CodeRange]:
    """`{id(node): CodeRange}` for `nodes` (as PositionProvider computes them); nodes not in `module` are absent."""
    locator = NodeLocator(module)
    wanted = {id(node) for node in nodes}
    locator.want(wanted)
    found = {key: locator.range_of(key) for key in wanted}
    return {key: value for key, value in found.items() if value is not None}


def node_line_spans(module: cst.Module, node_ids: Iterable[int]) -> Dict[int, Tuple[int, int]]:
    """`{id(node): (first line, line after the last)}` of the nodes (given by id) that span whole lines
    (statements, with their leading blank and comment lines); nodes that start or end inside a line are
    absent."""
    locator = NodeLocator(module)
    wanted = set(node_ids)
    locator.want(wanted)
    found = {key: locator.line_span_of(key) for key in wanted}
    return {key: value for key, value in found.items() if value is not None}


def _generate_until_found(module: cst.Module, wanted: Set[int]) -> _TargetedPositionState:
    state = _TargetedPositionState(module, wanted)
    if wanted:
        try:
            module._codegen(state)
        except _AllFound:
            pass
    return state
