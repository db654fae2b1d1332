"""Path questions the rules ask beyond the protocol's own (`scaler_flow`): placing any statement on the flow
graph, reaching definitions, the last/first of several events by paths, a loop's next pass, paths that
hold a condition fixed or avoid graph nodes (an accumulation boundary is a condition on the path), and a
function's whole-scope flow. Each answer is a `Proof` (`amp_lint.analysis.paths`) or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.analysis.paths import ASSUMED, PROVED, Proof, weakest
from amp_lint.analysis.scaler_flow import ScopeFlow, StepFlow
from amp_lint.analysis.syntax import ifs_in, names_in

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.analysis.file_model import FileModel, Scope


# --- queries for AMP030..AMP043 ---------------------------------------------------------------------
#
# Two more ways to constrain a path, beside the events it must not pass:
# - graph `nodes` it must not pass (the first node of an `if` body: a path that avoids it does not take
#   that branch; a loop's header: a path that avoids it stays in one pass of the loop);
# - `holding` conditions, (atom key, value) pairs fixed on the whole path: "a path on which
#   `(i + 1) % accum == 0` is false" is a micro-batch that only accumulates. A condition is one atom key
#   (`amp_lint.analysis.conditions`), so every branch on that test agrees with it.
# `gate` says which way a condition must go for one node to follow another: the accumulation boundary of
# a step is the condition that gates its `scaler.step()`.

Holding = Tuple[Tuple[str, bool], ...]


def scope_flow(model: "FileModel", scope: "Scope") -> ScopeFlow:
    """The flow of any scope (a helper's too), built once per model; `flow_of` shares it."""
    flow = model.flows.get(("scope", id(scope)))
    if flow is None:
        flow = model.flows[("scope", id(scope))] = ScopeFlow(scope)
    return flow


def path_with(
    flow: StepFlow, first, second, avoid: Sequence = (), nodes: Iterable[int] = (), holding: Holding = ()
) -> Optional[Proof]:
    """A path `first` -> `second` in one iteration (None: the iteration's start, or its end) that passes
    no `avoid` event and no graph node of `nodes`, on which every `holding` condition holds.

    `first` and `second` are events, or any site with a `statement` (an assignment): a site on the same
    line as the other end counts as reaching it."""
    scope = flow.flow
    a = flow.start if first is None else scope.node(first)
    b = flow.end if second is None else scope.node(second)
    if a is None or b is None:
        return None
    if first is not None and second is not None and hasattr(first, "compatible") and hasattr(second, "compatible"):
        plain = scope.path(first, second, avoid, flow.start)
        if plain is None or a == b or (not nodes and not holding):
            return plain  # one node: the order of its events is the machinery's (`ScopeFlow.path`)
    elif a == b:
        return PROVED  # one statement (the iteration starts or ends there, or a site of that line)
    blocked = scope._blocked_nodes(first, second, a if first is not None else None, b if second is not None else None, avoid)
    if blocked is None:
        return None
    blocked = blocked + [n for n in nodes if n != a and n != b]
    origin = flow.start if first is not None and flow.start >= a else None
    return scope.paths.query(a, b, blocked, origin, holding)


def gate(flow: ScopeFlow, src: int, dst: int, key: str, start: Optional[int] = None) -> Optional[bool]:
    """The value condition `key` must have on every path src -> dst (graph nodes); None when either value
    allows a path (or neither does)."""
    if src == dst:
        return None
    on_true = flow.paths.query(src, dst, (), start, ((key, True),)) is not None
    on_false = flow.paths.query(src, dst, (), start, ((key, False),)) is not None
    return on_true if on_true != on_false else None


def branch_tests(flow: ScopeFlow, accept: Callable, low: int = -1, high: Optional[int] = None) -> List[int]:
    """The `if`/`elif` test nodes (numbers in (low, high]) whose test `accept`s, first on the path first."""
    import libcst as cst

    top = len(flow.graph) - 1 if high is None else high
    return [
        node
        for node in range(top, low, -1)
        if isinstance(flow.graph.statements[node], cst.If) and accept(flow.graph.statements[node].test)  # type: ignore[union-attr]
    ]


def condition_of(flow: ScopeFlow, test_node: int) -> Tuple[str, bool]:
    """(condition key, its value when the `if` body runs) of an `if` test node."""
    from amp_lint.analysis.conditions import atom_of

    atom = atom_of(flow.graph.statements[test_node].test, True)  # type: ignore[union-attr]
    return atom.key, atom.holds


def iteration_nodes(flow: StepFlow) -> Tuple[int, int]:
    """(low, high): the graph nodes of one iteration are the numbers in (low, high]."""
    return flow.end, flow.start


def call_levels(model: "FileModel", flow: StepFlow, event) -> List[Tuple[ScopeFlow, int, int]]:
    """Where `event` runs, level by level, as (graph, from node, to node): the iteration's start to the
    call that leads to the event (or to the event), then each helper's entry to its next call (or to the
    event). An event of the step's own code has one level."""
    trail = event.trail() if hasattr(event, "trail") else []
    outer = flow.node(event)
    if outer is None:
        return []
    levels = [(flow.flow, flow.start, outer)]
    for inner in trail[1:] + [event] if trail else []:
        helper = scope_flow(model, inner.scope)
        statement = getattr(inner, "flow_statement", None) or inner.statement
        node = helper.graph.node_of.get(id(statement))
        if node is None:
            return levels
        levels.append((helper, helper.graph.entry, node))
    return levels


# --- queries for AMP002..AMP031 ---
#
# Order and feasibility for things that are not protocol events (assignment sites, autocast regions, a
# `def` statement) and between events of one step: every answer is a path question on the step's graph.
# Two things in one graph node (one statement line, or a helper's events at its call) run in their
# evaluation order inside that node (`index`); nothing else here reads the source order.


@dataclass(frozen=True)
class Site:
    """A statement to place on the graph that is no event: `Site(region.node)`, `Site(function_def)`."""

    statement: object
    index: float = 0.0


def _is_event(thing) -> bool:
    return hasattr(thing, "compatible") and hasattr(thing, "kind")


def _before_in_node(first, second) -> bool:
    return getattr(first, "index", 0) < getattr(second, "index", 0)


def site_path(flow: StepFlow, first, second, avoid: Sequence = ()) -> Optional[Proof]:
    """`StepFlow.path` for any placed things (events, assignment sites, `Site`s): can `second` run after
    `first` in one iteration with none of `avoid` between? None: no such path."""
    if _is_event(first) and _is_event(second) and all(_is_event(a) for a in avoid):
        return flow.path(first, second, avoid)
    scope_flow = flow.flow
    a, b = scope_flow.node(first), scope_flow.node(second)
    if a is None or b is None:
        return None
    if a == b:
        if not _before_in_node(first, second):
            return None
        killed = any(
            scope_flow.node(x) == a and _before_in_node(first, x) and _before_in_node(x, second)
            for x in avoid
            if x is not first and x is not second
        )
        return None if killed else PROVED
    blocked = []
    for other in avoid:
        if other is first or other is second:
            continue
        node = scope_flow.node(other)
        if node is None:
            continue
        if node == a:
            if _before_in_node(first, other):
                return None  # `first`'s own line overrides it
            continue
        if node == b:
            if _before_in_node(other, second):
                return None
            continue
        blocked.append(node)
    start = flow.start if flow.start >= a else None
    return scope_flow.paths.query(a, b, blocked, start)


def in_iteration(flow: StepFlow, thing) -> bool:
    """Does `thing`'s statement run inside the step's iteration (the loop body, inner loops included; for a
    step function, its body)? Nodes of a loop body lie between its latch and its first node."""
    node = flow.node(thing)
    if node is None:
        return False
    if not flow.closed:
        return True
    return flow.end < node <= flow.start


def reaching(flow: StepFlow, use, sites: Sequence, kills: Optional[Sequence] = None) -> List[Tuple[object, Proof]]:
    """The `sites` (definitions) of the iteration that reach `use`: a path from the site to the use with no
    site of `kills` between (default: the other `sites`, as a reaching-definitions question)."""
    kills = sites if kills is None else kills
    found = []
    for site in sites:
        if not in_iteration(flow, site):
            continue
        proof = site_path(flow, site, use, [k for k in kills if k is not site])
        if proof is not None:
            found.append((site, proof))
    return found


def any_path(flow: StepFlow, first, others: Iterable, avoid: Sequence = ()) -> Tuple[List, Optional[Proof]]:
    """The `others` that can run after `first` in the iteration, and the strongest proof among them."""
    found, best = [], None
    for other in others:
        if other is first:
            continue
        proof = site_path(flow, first, other, avoid)
        if proof is not None:
            found.append(other)
            best = proof if best is None or proof is PROVED else best
    return found, best


def last_of(flow: StepFlow, things: Sequence):
    """The one of `things` that runs last: none of the others can follow it on a path of the iteration.

    Several such (the two sides of an if/else) are all last; the one met last in `things` is taken, so
    that the answer does not change from run to run. None for an empty list.
    """
    things = list(things)
    last = [t for t in things if not any(o is not t and site_path(flow, t, o) is not None for o in things)]
    return (last or things or [None])[-1]


def first_of(flow: StepFlow, things: Sequence):
    """The one of `things` that runs first (none of the others can run before it); see `last_of`."""
    things = list(things)
    first = [t for t in things if not any(o is not t and site_path(flow, o, t) is not None for o in things)]
    return (first or things or [None])[0]


def again_in_loop(flow: StepFlow, event, loop, avoid: Sequence = ()) -> Optional[Proof]:
    """Can `event`, inside the inner `loop` of the iteration, run again on the loop's next pass (with no
    `avoid` between)? A `break` or `return` right after it means it runs once; so does a test that holds on
    one pass at most (`if i == idx:`, see `_selected`); one that may hold on every pass
    (`if idx is not None and i != idx: continue`) leaves it ASSUMED."""
    graph = flow.flow.graph
    latch, body = graph.loop_latch.get(id(loop)), graph.loop_body.get(id(loop))
    if latch is None or body is None:
        return None
    selected = _selected(event, loop)
    if selected == _ONE_PASS:
        return None
    proof = weakest(flow.flow.path_to(event, latch, avoid), flow.flow.path_from(body, event, avoid))
    return ASSUMED if proof is PROVED and selected == _SOME_PASSES else proof


_ONE_PASS, _SOME_PASSES = "one pass", "some passes"


def _selected(event, loop) -> Optional[str]:
    """Does a test around `event` inside `loop` pick one element of what the loop runs over? A comparison
    of a loop variable with something the loop does not bind (`i == idx`, `name is target`) holds on one
    pass at most: `_ONE_PASS` when the event needs it (`if i == idx:`, or after `if i != idx: continue`),
    `_SOME_PASSES` when it is one alternative of several (`if idx is None or i == idx:`)."""
    targets = getattr(loop, "target", None)
    if targets is None or not event.branches:
        return None
    bound = names_in(targets)
    inside = None  # the loop body's `if` nodes, found once when asked
    found = None
    for branch in event.branches:
        test = branch.node.test
        kind = _selection(test, branch.taken, bound)
        if kind is None:
            continue
        if inside is None:
            inside = ifs_in(loop)
        if id(branch.node) not in inside:
            continue
        if kind == _ONE_PASS:
            return _ONE_PASS
        found = _SOME_PASSES
    return found


def _selection(test: cst.BaseExpression, holds: bool, bound: set) -> Optional[str]:
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, holds = test.expression, not holds
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And) == holds  # `a and b` holds: both; fails: either
        parts = [_selection(side, holds, bound) for side in (test.left, test.right)]
        if _ONE_PASS in parts:
            return _ONE_PASS if conjunction else _SOME_PASSES
        return _SOME_PASSES if _SOME_PASSES in parts else None
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if isinstance(target.operator, (cst.Equal, cst.Is)):
        equal = holds
    elif isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
        equal = not holds
    else:
        return None
    sides = (test.left, target.comparator)
    variables = [isinstance(side, cst.Name) and side.value in bound for side in sides]
    if variables.count(True) != 1:
        return None
    other = sides[variables.index(False)]
    if isinstance(other, cst.Name) and other.value == "None" or names_in(other) & bound:
        return None  # `opt is None` holds on every pass that has no optimizer; `i == j` on many
    return _ONE_PASS if equal else None


@dataclass(eq=False)
class _WholeScope:
    """A scope's body as one open step (no loop, no events of its own): what `StepFlow` reads of a step."""

    scope: "Scope"
    loop: None = None
    events: Tuple = ()


def whole_scope_flow(model: "FileModel", scope: "Scope") -> StepFlow:
    """The paths of a whole scope, entry to exit, as one open step: for questions about events that need
    no iteration (what reaches a call from the function's start)."""
    flow = model.flows.get(("whole", id(scope)))
    if flow is None:
        flow = model.flows[("whole", id(scope))] = StepFlow(scope_flow(model, scope), _WholeScope(scope))  # type: ignore[arg-type]
    return flow
