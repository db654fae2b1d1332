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

import bisect
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

from amp_lint.files.lines import LINE_BREAK


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
    def __init__(self, module: cst.Module, target_ids: Iterable[int], stop_when_found: bool = True) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.stop_when_found = stop_when_found
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
            if not self._remaining and self.stop_when_found:
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
    """The positions of chosen nodes of one module.

    Callers say which nodes they will ask about (`want`), so that one placement serves them all. Given the module's
    text and the analysis model's parent map, a node is placed through the innermost statement above it
    whose text occurs exactly once in the file: that statement alone is generated, its text found, and
    the positions counted from there (a few kB of code generation instead of everything before the
    node). Nodes that cannot be placed so (no parent known, no unique statement above them) are placed
    by one code generation of the module that stops after the last of them. A node wanted after the
    first question costs another placement (correct, only slower).
    """

    def __init__(
        self, module: cst.Module, code: Optional[str] = None, parents: Optional[Mapping[int, cst.CSTNode]] = None
    ) -> None:
        self.module = module
        self.code = code
        self.parents = parents or {}
        self._pending: Set[int] = set()  # wanted, not placed yet (kept as it goes: no whole-set difference per call)
        self._placed: Set[int] = set()
        self.ranges: Dict[int, CodeRange] = {}
        self.inclusive: Dict[int, CodeRange] = {}  # whitespace and leading lines included
        self._line_starts: Optional[List[int]] = None

    def want(self, node_ids: Iterable[int]) -> None:
        self._pending.update(key for key in node_ids if key not in self._placed)

    def range_of(self, node_id: int) -> Optional[CodeRange]:
        """PositionProvider's range of the node; None when it is not in the module."""
        self._place(node_id)
        return self.ranges.get(node_id)

    def line_span_of(self, node_id: int) -> Optional[Tuple[int, int]]:
        """(first line, line after the last) of a node that spans whole lines (a statement, with its
        leading blank and comment lines); None for a node that starts or ends inside a line."""
        self._place(node_id)
        found = self.inclusive.get(node_id)
        if found is None or found.start.column != 0 or found.end.column != 0:
            return None
        return (found.start.line, found.end.line)

    def _place(self, node_id: int) -> None:
        if node_id not in self._placed:
            self._pending.add(node_id)
        if not self._pending:
            return
        pending, self._pending = self._pending, set()
        self._placed |= pending
        by_statement: Dict[int, Tuple[cst.CSTNode, List[str], Set[int]]] = {}
        # Placing through statements costs a search of the whole file each: past a few dozen, one
        # generation of the whole module (linear) is cheaper, and the cost stays linear in the file.
        if self.code is not None and len(pending) <= _STATEMENT_PLACEMENTS:
            for key in pending:
                found = self._statements_above(key)
                if found:
                    statement, indents = found[0]  # the innermost: grouped by it, widened below if not unique
                    by_statement.setdefault(id(statement), (statement, indents, set()))[2].add(key)
        left = set(pending)
        for statement, indents, keys in by_statement.values():
            if self._place_through(statement, indents, keys):
                left -= keys
        if left:
            state = _generate_until_found(self.module, left)
            self._keep(state, left, 0)

    def _statements_above(self, key: int) -> List[Tuple[cst.CSTNode, List[str]]]:
        """The whole-line statements above the node (innermost first), each with the indentation of the
        blocks around it; empty when the chain of parents does not reach the module."""
        above: List[cst.CSTNode] = []  # parent, grandparent, ..., the module
        node = self.parents.get(key)
        while node is not None:
            above.append(node)
            node = self.parents.get(id(node))
        if not above or above[-1] is not self.module:
            return []
        statements = []
        for index in range(len(above) - 1):
            statement, holder = above[index], above[index + 1]
            if isinstance(statement, _WHOLE_LINE_STATEMENTS) and isinstance(holder, (cst.IndentedBlock, cst.Module)):
                blocks = [node for node in reversed(above[index + 1 :]) if isinstance(node, cst.IndentedBlock)]
                statements.append((statement, [b.indent if b.indent is not None else self.module.default_indent for b in blocks]))
        return statements

    def _place_through(self, statement: cst.CSTNode, indents: List[str], keys: Set[int]) -> bool:
        """Place `keys` through `statement` or, when its text is not unique in the file, a statement above."""
        candidates = [(statement, indents)] + self._statements_above(id(statement))
        for candidate, candidate_indents in candidates:
            state = _TargetedPositionState(self.module, keys, stop_when_found=False)
            state.indent_tokens = list(candidate_indents)
            candidate._codegen(state)
            text = "".join(state.tokens)
            start = self.code.find(text)
            if start < 0:
                return False  # the statement alone does not generate what the file holds (the end of a file without a final newline, say)
            if self.code.find(text, start + 1) >= 0:
                continue  # not unique: try the statement above
            if start and self.code[start - 1] not in "\r\n":
                return False
            if not all(key in state.inclusive for key in keys):
                return False
            self._keep(state, keys, self._line_of(start) - 1)
            return True
        return False

    def _keep(self, state: "_TargetedPositionState", keys: Set[int], lines_before: int) -> None:
        for key in keys:
            for found, into in ((state.ranges, self.ranges), (state.inclusive, self.inclusive)):
                if key in found:
                    into[key] = _shifted(found[key], lines_before)

    def _line_of(self, offset: int) -> int:
        code = self.code
        if self._line_starts is None:
            self._line_starts = [0] + [match.end() for match in LINE_BREAK.finditer(code)]
        return bisect.bisect_right(self._line_starts, offset)


_WHOLE_LINE_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_STATEMENT_PLACEMENTS = 32


def _shifted(code_range: CodeRange, lines: int) -> CodeRange:
    if not lines:
        return code_range
    return CodeRange(
        CodePosition(code_range.start.line + lines, code_range.start.column),
        CodePosition(code_range.end.line + lines, code_range.end.column),
    )


def node_positions(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> Dict[int, CodeRange]:
    """`{id(node): CodeRange}` for `nodes` (as PositionProvider computes them); nodes not in `module` are absent."""
    locator = NodeLocator(module)
    wanted = {id(node) for node in nodes}
    locator.want(wanted)
    found = {key: locator.range_of(key) for key in wanted}
    return {key: value for key, value in found.items() if value is not None}


def _generate_until_found(module: cst.Module, wanted: Set[int]) -> _TargetedPositionState:
    state = _TargetedPositionState(module, wanted)
    if wanted:
        try:
            module._codegen(state)
        except _AllFound:
            pass
    return state
