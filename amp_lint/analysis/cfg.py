"""A control-flow graph per function and module body, built from LibCST statements.

One node per simple statement line and per compound statement's header (`if`, `for`, `while`, `with`,
`try`, `except`, `match`), plus an entry, a normal exit, an exceptional exit and one *latch* per loop (the
end of an iteration, from which the back edge returns to the header). Branch edges carry an `Atom`
(`amp_lint.analysis.conditions`); loop headers get an atom of their own ("the body runs again"), so a
loop body is entered once or skipped on a forward path, and the back edges are kept apart.

Built from the statements alone: no metadata providers (they multiply the parse cost). Nodes are
numbered so that every forward edge goes from a larger number to a smaller one: a question about all
forward paths is one pass over the nodes in increasing order (`amp_lint.analysis.paths`).

Exceptions: every statement of a `try` body has an *exceptional* edge to each handler; `raise` goes to
the handlers of its `try`, else to the exceptional exit. Handlers are not the normal path: a path that
goes through one rests on the assumption that the exception happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import libcst as cst

from amp_lint.analysis.conditions import Atom, atom_of

# An edge's label: None (unconditional), an Atom (a branch), or EXCEPTION.
EXCEPTION = Atom("<exception>", True)

Body = Union[cst.Module, cst.FunctionDef]


@dataclass(eq=False)
class Graph:
    """The flow graph of one scope."""

    succ: List[List[Tuple[int, Optional[Atom]]]] = field(default_factory=list)
    statements: List[Optional[cst.CSTNode]] = field(default_factory=list)
    back: Dict[int, int] = field(default_factory=dict)  # latch -> loop header
    node_of: Dict[int, int] = field(default_factory=dict)  # id(statement) -> node
    loop_latch: Dict[int, int] = field(default_factory=dict)  # id(loop) -> its latch
    loop_body: Dict[int, int] = field(default_factory=dict)  # id(loop) -> first node of its body
    loop_header: Dict[int, int] = field(default_factory=dict)  # id(loop) -> header node
    handler_nodes: set = field(default_factory=set)  # nodes inside `except` handlers
    exit: int = 0
    raise_exit: int = 1
    entry: int = 0

    def add(self, statement: Optional[cst.CSTNode], edges: Sequence[Tuple[int, Optional[Atom]]] = ()) -> int:
        self.succ.append(list(edges))
        self.statements.append(statement)
        node = len(self.succ) - 1
        if statement is not None:
            self.node_of[id(statement)] = node
        return node

    def __len__(self) -> int:
        return len(self.succ)


@dataclass
class _Context:
    loop_latch: Optional[int] = None  # `continue` target
    loop_break: Optional[int] = None  # `break` target
    handlers: Tuple[int, ...] = ()  # entries of the `except` handlers around
    in_handler: bool = False


def build(scope_node: Body) -> Graph:
    graph = Graph()
    graph.exit = graph.add(None)
    graph.raise_exit = graph.add(None)
    body = scope_node.body
    statements = body.body if isinstance(body, (cst.IndentedBlock, cst.Module)) else [body]
    if isinstance(scope_node, cst.Module):
        statements = scope_node.body
    builder = _Builder(graph)
    first = builder.block(statements, graph.exit, _Context())
    graph.entry = graph.add(None, [(first, None)])
    return graph


class _Builder:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def block(self, statements: Sequence[cst.CSTNode], following: int, ctx: _Context) -> int:
        entry = following
        for statement in reversed(list(statements)):
            entry = self.statement(statement, entry, ctx)
        return entry

    def suite(self, suite: cst.BaseSuite, following: int, ctx: _Context) -> int:
        if isinstance(suite, cst.IndentedBlock):
            return self.block(suite.body, following, ctx)
        # `if x: a; b` - a SimpleStatementSuite: one node, like a statement line
        return self._simple(suite, suite.body, following, ctx)

    def _node(self, statement: cst.CSTNode, edges: List[Tuple[int, Optional[Atom]]], ctx: _Context) -> int:
        edges = edges + [(h, EXCEPTION) for h in ctx.handlers]
        node = self.graph.add(statement, edges)
        if ctx.in_handler:
            self.graph.handler_nodes.add(node)
        return node

    def _simple(self, statement: cst.CSTNode, smalls: Sequence[cst.BaseSmallStatement], following: int, ctx: _Context) -> int:
        last = smalls[-1] if smalls else None
        if isinstance(last, cst.Return):
            target = self.graph.exit
        elif isinstance(last, cst.Raise):
            target = self.graph.raise_exit if not ctx.handlers else ctx.handlers[0]
        elif isinstance(last, cst.Continue) and ctx.loop_latch is not None:
            target = ctx.loop_latch
        elif isinstance(last, cst.Break) and ctx.loop_break is not None:
            target = ctx.loop_break
        else:
            target = following
        return self._node(statement, [(target, None)], ctx)

    def statement(self, statement: cst.CSTNode, following: int, ctx: _Context) -> int:
        if isinstance(statement, cst.SimpleStatementLine):
            return self._simple(statement, statement.body, following, ctx)
        if isinstance(statement, cst.If):
            return self._if(statement, following, ctx)
        if isinstance(statement, (cst.For, cst.While)):
            return self._loop(statement, following, ctx)
        if isinstance(statement, (cst.Try, getattr(cst, "TryStar", cst.Try))):
            return self._try(statement, following, ctx)
        if isinstance(statement, cst.With):
            body = self.suite(statement.body, following, ctx)
            return self._node(statement, [(body, None)], ctx)
        if isinstance(statement, getattr(cst, "Match", ())):
            return self._match(statement, following, ctx)
        # def / class / anything else: one node; nested bodies are scopes of their own.
        return self._node(statement, [(following, None)], ctx)

    def _if(self, statement: cst.If, following: int, ctx: _Context) -> int:
        body = self.suite(statement.body, following, ctx)
        orelse = statement.orelse
        if orelse is None:
            other = following
        elif isinstance(orelse, cst.If):
            other = self._if(orelse, following, ctx)
        else:
            other = self.suite(orelse.body, following, ctx)
        return self._test(statement.test, statement, body, other, ctx)

    def _test(self, test: cst.BaseExpression, statement: cst.CSTNode, yes: int, no: int, ctx: _Context) -> int:
        """The branch of a test, its `and`/`or` short-circuited into one branch node per operand (as a compiler
        lowers them): the false edge of `if clip or log:` says `clip` is false, so a later `if clip:` on that
        path is known (issue 26, principle 1: correlated conditions). The leftmost operand's node, built
        last, is the statement's."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and isinstance(test.expression, cst.BooleanOperation):
            return self._test(test.expression, statement, no, yes, ctx)
        if isinstance(test, cst.BooleanOperation):
            if isinstance(test.operator, cst.And):
                right = self._test(test.right, statement, yes, no, ctx)
                return self._test(test.left, statement, right, no, ctx)
            right = self._test(test.right, statement, yes, no, ctx)
            return self._test(test.left, statement, yes, right, ctx)
        return self._node(statement, [(yes, atom_of(test, True)), (no, atom_of(test, False))], ctx)

    def _loop(self, loop: Union[cst.For, cst.While], following: int, ctx: _Context) -> int:
        graph = self.graph
        after_normal = self.suite(loop.orelse.body, following, ctx) if loop.orelse is not None else following
        latch = graph.add(None, [(after_normal, None)])
        inner = _Context(loop_latch=latch, loop_break=following, handlers=ctx.handlers, in_handler=ctx.in_handler)
        body = self.suite(loop.body, latch, inner)
        if isinstance(loop, cst.While):
            enter, leave = atom_of(loop.test, True), atom_of(loop.test, False)
            infinite = isinstance(loop.test, cst.Name) and loop.test.value == "True"
        else:
            enter, leave = Atom(f"<loop {id(loop)}>", True), Atom(f"<loop {id(loop)}>", False)
            infinite = False
        edges = [(body, enter)] if infinite else [(body, enter), (after_normal, leave)]
        header = self._node(loop, edges, ctx)
        graph.back[latch] = header
        graph.loop_latch[id(loop)] = latch
        graph.loop_body[id(loop)] = body
        graph.loop_header[id(loop)] = header
        return header

    def _try(self, statement: cst.Try, following: int, ctx: _Context) -> int:
        final = following
        if statement.finalbody is not None:
            final = self.suite(statement.finalbody.body, following, ctx)
        handler_ctx = _Context(ctx.loop_latch, ctx.loop_break, ctx.handlers, in_handler=True)
        handlers = []
        for handler in statement.handlers:
            body = self.suite(handler.body, final, handler_ctx)
            node = self._node(handler, [(body, None)], handler_ctx)
            handlers.append(node)
        after_body = self.suite(statement.orelse.body, final, ctx) if statement.orelse is not None else final
        body_ctx = _Context(ctx.loop_latch, ctx.loop_break, tuple(handlers) + ctx.handlers, ctx.in_handler)
        body = self.suite(statement.body, after_body, body_ctx)
        return self._node(statement, [(body, None)], ctx)

    def _match(self, statement: cst.CSTNode, following: int, ctx: _Context) -> int:
        edges: List[Tuple[int, Optional[Atom]]] = []
        for case in statement.cases:  # type: ignore[attr-defined]
            body = self.suite(case.body, following, ctx)
            edges.append((body, Atom(f"<case {id(case)}>", True)))
        edges.append((following, Atom(f"<no case {id(statement)}>", True)))
        return self._node(statement, edges, ctx)
