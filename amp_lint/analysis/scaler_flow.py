"""The GradScaler protocol along the paths of a training step.

The protocol is a small state machine per (scaler, optimizer), as in Infer's typestate checkers:

    ready --unscale_--> unscaled --step--> stepped --update--> ready
    (backward on scaler.scale(loss) makes the gradients *scaled*; unscale_ or step consumes that)

A rule asks about one transition on the paths of one iteration (`StepFlow`): "can this `update()` run
with no `step()` before it in the iteration", "does some path reach the clip from the scaled backward
without an `unscale_`", "can the next iteration's `unscale_` follow this one with no `update()` between".
Each answer is a `Proof` (`amp_lint.analysis.paths`): no such path, a path whatever the unknown
conditions are (PROVED), or a path that needs an unknown condition to go one way (ASSUMED). A finding
that rests on an ASSUMED path is reported with that assumption, at medium confidence.

Calls: the events of a helper function of this file are *its summary*, applied at the call site
(`Summary.applied_at`): they run where the call runs, with the callee's parameters renamed to the
caller's arguments. A project-wide index can provide summaries for functions of other files through the
same `Summary` type (`SUMMARIES` is where such a provider plugs in).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from amp_lint.analysis import cfg
from amp_lint.analysis.paths import ASSUMED, PROVED, Paths, Proof, weakest

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.analysis.events import Event
    from amp_lint.analysis.file_model import FileModel, Scope, TrainingStep


# --- summaries ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What a function does to the scaler protocol: its events, in order, in terms of its parameters."""

    scope: "Scope"
    events: Tuple["Event", ...]
    params: Tuple[str, ...]  # the callee's parameters, `self`/`cls` left out for methods
    runs_loop: bool = False  # a helper with a loop of its own is a training loop, not a step part

    def applied_at(self, call: "Event", depth: int, trail_of: Callable[["Event", "Event"], "Event"]) -> List["Event"]:
        """The callee's events as they happen at `call`, renamed to the caller's arguments."""
        names = self.argument_names(call)
        scaled = self.scaled_arguments(call)
        step = 10.0 ** (-3 * (depth + 1))
        out = []
        for position, event in enumerate(self.events, start=1):
            scaled_by, scale_call = _renamed(event.scaled_by, names), event.scale_call
            if scaled_by is None and event.loss is not None and _head(event.loss) in scaled:
                # `self._backward(scaler.scale(loss))` and `def _backward(self, loss): loss.backward()`
                # (flair): the helper's backward runs on the scaled loss.
                scaled_by, scale_call = scaled[_head(event.loss)]
            out.append(
                dataclasses.replace(
                    event,
                    index=call.index + position * step,
                    loops=call.loops + event.loops,
                    branches=call.branches + event.branches,
                    regions=call.regions + event.regions,
                    receiver=_renamed(event.receiver, names),
                    target=_renamed(event.target, names),
                    scaled_by=scaled_by,
                    scale_call=scale_call,
                    via=call if event.via is None else trail_of(event.via, call),
                )
            )
        return out

    def scaled_arguments(self, call: "Event") -> Dict[str, Tuple[str, object]]:
        """Callee parameter -> (scaler, scale call) for arguments written `scaler.scale(x)`."""
        import libcst as cst

        from amp_lint.analysis.names import dotted_name

        found: Dict[str, Tuple[str, object]] = {}
        position = 0
        for arg in call.call.args:
            if arg.star:
                break
            value = arg.value
            param = arg.keyword.value if arg.keyword is not None else (self.params[position] if position < len(self.params) else None)
            if arg.keyword is None:
                position += 1
            if param is None:
                continue
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "scale":
                scaler = dotted_name(value.func.value)
                if scaler is not None and value.args:
                    found[param] = (scaler, value)
        return found

    def argument_names(self, call: "Event") -> Dict[str, str]:
        """Callee parameter -> the caller's dotted argument, for plain names and attributes."""
        from amp_lint.analysis.names import dotted_name

        mapping: Dict[str, str] = {}
        position = 0
        for arg in call.call.args:
            if arg.star:
                break
            value = dotted_name(arg.value)
            if arg.keyword is not None:
                if value is not None and arg.keyword.value in self.scope.params:
                    mapping[arg.keyword.value] = value
                continue
            if position < len(self.params) and value is not None:
                mapping[self.params[position]] = value
            position += 1
        return mapping


def _head(expr) -> Optional[str]:
    """The plain name an expression starts from (`loss` for `loss`, `loss.mean()`), else None."""
    import libcst as cst

    for _ in range(8):
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            expr = expr.value
        else:
            return None
    return None


def _renamed(key: Optional[str], names: Dict[str, str]) -> Optional[str]:
    if key is None or not names:
        return key
    head, dot, rest = key.partition(".")
    if head in names:
        return names[head] + dot + rest
    return key


# A provider of summaries for callees this file does not define (the project index plugs in here):
# called with (model, call event), returns a Summary or None.
SUMMARIES: List[Callable[["FileModel", "Event"], Optional[Summary]]] = []
# Dotted callees (`helpers.clip`, `self.callback.on_after_backward`) that such a provider can follow: the
# model records a call event for those only (by default it records plain names and `self.method` calls).
FOLLOWED_CALLS: List[Callable[[str], bool]] = []


# --- one scope's flow --------------------------------------------------------------------------------


class ScopeFlow:
    """The flow graph of one scope, and where each event of it sits."""

    def __init__(self, scope: "Scope") -> None:
        self.scope = scope
        self.graph = cfg.build(scope.node)
        self.paths = Paths(self.graph)

    def node(self, event) -> Optional[int]:
        """The graph node of an event (or call/assignment site); a helper's event sits at its call."""
        outer = event
        while getattr(outer, "via", None) is not None:
            outer = outer.via
        statement = getattr(outer, "flow_statement", None) or outer.statement
        return self.graph.node_of.get(id(statement))

    def in_handler(self, event) -> bool:
        node = self.node(event)
        return node is not None and node in self.graph.handler_nodes

    def _same_node_order(self, first, second) -> Optional[Proof]:
        if first.index < second.index and first.compatible(second):
            return PROVED
        return None

    def path(self, first, second, avoid: Sequence = (), start: Optional[int] = None) -> Optional[Proof]:
        """Can `second` run after `first` on one forward path (one iteration), with no `avoid` event between?"""
        a, b = self.node(first), self.node(second)
        if a is None or b is None:
            return None
        if not first.compatible(second):
            # Branches inside helpers are not in this graph (a helper's events sit at its call): their
            # tests still correlate with the caller's (`if self._scaler is not None:` in both, allennlp).
            return None
        blocked = self._blocked_nodes(first, second, a, b, avoid)
        if blocked is None:
            return None
        if a == b:
            return self._same_node_order(first, second)
        if start is not None and start < a:
            start = None  # `first` is not inside the iteration that starts there
        return self.paths.query(a, b, blocked, start)

    def path_from(self, start: int, event, avoid: Sequence = ()) -> Optional[Proof]:
        node = self.node(event)
        if node is None:
            return None
        blocked = self._blocked_nodes(None, event, None, node, avoid)
        if blocked is None:
            return None
        if start == node:
            return PROVED
        return self.paths.query(start, node, blocked)

    def path_to(self, event, end: int, avoid: Sequence = ()) -> Optional[Proof]:
        node = self.node(event)
        if node is None:
            return None
        blocked = self._blocked_nodes(event, None, node, None, avoid)
        if blocked is None:
            return None
        return self.paths.query(node, end, blocked)

    def _blocked_nodes(self, first, second, a, b, avoid) -> Optional[List[int]]:
        """Nodes of `avoid` events; None when an avoided event sits between the two in the same node."""
        blocked = []
        for event in avoid:
            node = self.node(event)
            if node is None:
                continue
            if node == a and first is not None and event.index > first.index and event.compatible(first):
                if node != b or second is None or event.index < second.index:
                    return None
                continue
            if node == b and second is not None and event.index < second.index and event.compatible(second):
                if node != a or first is None or event.index > first.index:
                    return None
                continue
            if node in (a, b):
                continue
            blocked.append(node)
        return blocked


class StepFlow:
    """The paths of one training step: a loop body (one iteration) or a step function's body."""

    def __init__(self, flow: ScopeFlow, step: "TrainingStep") -> None:
        self.flow = flow
        self.step = step
        graph = flow.graph
        loop = step.loop
        if loop is not None and id(loop) in graph.loop_body:
            self.start = graph.loop_body[id(loop)]
            self.end = graph.loop_latch[id(loop)]
            self.closed = True  # the iteration's whole order is in view
        else:
            self.start = graph.entry
            self.end = graph.exit
            self.closed = False  # a step function: its caller decides what runs before and after

    def node(self, event) -> Optional[int]:
        return self.flow.node(event)

    def path(self, first, second, avoid: Sequence = ()) -> Optional[Proof]:
        return self.flow.path(first, second, avoid, self.start)

    def from_start(self, event, avoid: Sequence = ()) -> Optional[Proof]:
        """A path from the iteration's start to `event` that passes no `avoid` event."""
        return self.flow.path_from(self.start, event, avoid)

    def to_end(self, event, avoid: Sequence = ()) -> Optional[Proof]:
        """A path from `event` to the iteration's end (the next iteration) that passes no `avoid` event."""
        return self.flow.path_to(event, self.end, avoid)

    def next_iteration(self, first, second, avoid: Sequence = ()) -> Optional[Proof]:
        """`second` in the next iteration after `first`, with no `avoid` event between (closed loops only)."""
        if not self.closed:
            return None
        return weakest(self.to_end(first, avoid), self.from_start(second, avoid))

    def before(self, event, events: Iterable) -> List[Tuple["Event", Proof]]:
        """The events that can run before `event` in the iteration, each with how sure that is."""
        found = []
        for other in events:
            if other is event:
                continue
            proof = self.path(other, event)
            if proof is not None:
                found.append((other, proof))
        return found

    def after(self, event, events: Iterable) -> List[Tuple["Event", Proof]]:
        found = []
        for other in events:
            if other is event:
                continue
            proof = self.path(event, other)
            if proof is not None:
                found.append((other, proof))
        return found

    def in_handler(self, event) -> bool:
        return self.flow.in_handler(event)


def flow_of(model: "FileModel", step: "TrainingStep") -> StepFlow:
    """The step's flow, its scope's graph built once per model."""
    cache = model.__dict__.setdefault("_flows", {})
    scope_flow = cache.get(id(step.scope))
    if scope_flow is None:
        scope_flow = cache[id(step.scope)] = ScopeFlow(step.scope)
    steps = model.__dict__.setdefault("_step_flows", {})
    flow = steps.get(id(step))
    if flow is None:
        flow = steps[id(step)] = StepFlow(scope_flow, step)
    return flow


def assumption_text(proof: Optional[Proof], what: str = "a branch condition") -> Optional[str]:
    """The assumption a finding rests on, or None for a proved one."""
    if proof is ASSUMED:
        return f"assumes {what} can go the way this path needs"
    return None


# --- the protocol as a typestate ----------------------------------------------------------------------

UNSCALED = "unscaled"
STEPPED = "stepped"

_MAX_STATES = 64  # per node; beyond, further states are dropped (no finding rests on them)


@dataclass(frozen=True)
class ProtocolState:
    """The scaler protocol at one point of one path through the iteration.

    `stages`: (scaler, optimizer, UNSCALED or STEPPED, the event that got it there) since the last
    `update()`; an optimizer not listed is *ready*. `scaled`: the scalers whose scaled gradients are
    waiting for a step (a scaled backward ran since the last step). `updated`: scalers updated on this
    path in this iteration.
    """

    stages: frozenset = frozenset()
    scaled: frozenset = frozenset()
    updated: frozenset = frozenset()

    def stage(self, scaler: str, optimizer: str) -> Optional[Tuple[str, object]]:
        for s, o, stage, event in self.stages:
            if s == scaler and o == optimizer:
                return stage, event
        return None

    def after(self, event) -> "ProtocolState":
        from amp_lint.analysis.events import EventKind

        kind = event.kind
        if kind is EventKind.BACKWARD and event.scaled_by is not None:
            return dataclasses.replace(self, scaled=self.scaled | {event.scaled_by})
        if kind in (EventKind.SCALER_UNSCALE, EventKind.SCALER_STEP) and event.target is not None:
            stage = UNSCALED if kind is EventKind.SCALER_UNSCALE else STEPPED
            kept = frozenset(t for t in self.stages if not (t[0] == event.receiver and t[1] == event.target))
            scaled = self.scaled - {event.receiver} if kind is EventKind.SCALER_STEP else self.scaled
            return dataclasses.replace(self, stages=kept | {(event.receiver, event.target, stage, event)}, scaled=scaled)
        if kind is EventKind.SCALER_UPDATE:
            kept = frozenset(t for t in self.stages if t[0] != event.receiver)
            return dataclasses.replace(self, stages=kept, updated=self.updated | {event.receiver})
        return self


def protocol_states(flow: StepFlow) -> Dict[int, frozenset]:
    """For each event of the step (by id): the protocol states that can hold just before it.

    A forward dataflow over one iteration (no back edge), on the normal path (exception handlers left
    out), once per assignment of the correlated conditions: states of contradicting branches never meet.
    """
    cache = flow.__dict__.get("_states")
    if cache is not None:
        return cache
    paths = flow.flow.paths
    at_node: Dict[int, List] = {}
    for event in flow.step.events:
        node = flow.node(event)
        if node is not None:
            at_node.setdefault(node, []).append(event)
    for events in at_node.values():
        events.sort(key=lambda e: e.index)
    result: Dict[int, set] = {}
    start = flow.start
    for varying, unknowns in paths._assignments(0, start):
        for unknown in unknowns:  # type: ignore[attr-defined]
            values = dict(varying + unknown)
            incoming: Dict[int, set] = {start: {ProtocolState()}}
            for node in range(start, -1, -1):
                states = incoming.pop(node, None)
                if not states:
                    continue
                events = at_node.get(node, ())
                for position, event in enumerate(events):
                    # Events of one node (a helper's, or one line's) run in order, unless their own
                    # branches (inside the helper) contradict.
                    before = states
                    for earlier in events[:position]:
                        if earlier.compatible(event):
                            before = {s.after(earlier) for s in before}
                    result.setdefault(id(event), set()).update(before)
                for event in events:
                    states = {s.after(event) for s in states}
                for target in paths._successors(node, values, False):
                    bucket = incoming.setdefault(target, set())
                    if len(bucket) < _MAX_STATES:
                        bucket |= states
    frozen = {key: frozenset(value) for key, value in result.items()}
    flow.__dict__["_states"] = frozen
    return frozen


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
    cache = model.__dict__.setdefault("_flows", {})
    flow = cache.get(id(scope))
    if flow is None:
        flow = cache[id(scope)] = ScopeFlow(scope)
    return flow


def query_holding(
    paths: Paths, src: int, dst: int, avoid: Iterable[int] = (), holding: Holding = (), start: Optional[int] = None
) -> Optional[Proof]:
    """`Paths.query`, on the paths where every condition of `holding` has its given value (PROVED: a path
    whatever the other unknown conditions are, given those)."""
    if not holding:
        return paths.query(src, dst, avoid, start)
    fixed = dict(holding)
    avoided = frozenset(n for n in avoid if n != src and n != dst)
    origin = paths.graph.entry if start is None else start
    found = proved = False
    for varying, unknowns in paths._assignments(min(src, dst), max(origin, src)):
        varying = tuple(kv for kv in varying if kv[0] not in fixed)
        here, every = False, True
        for unknown in unknowns:  # type: ignore[attr-defined]
            assignment = tuple(holding) + varying + tuple(kv for kv in unknown if kv[0] not in fixed)
            if not paths._reach(src, frozenset(), assignment, True)[origin]:
                continue
            if not paths._reach(dst, frozenset(), assignment, True)[src]:
                continue
            if paths._reach(dst, avoided, assignment, True)[src]:
                found = here = True
            if not paths._must(dst, avoided, assignment)[src]:
                every = False
        if here and every:
            proved = True
    if not found:
        return None
    return PROVED if proved else ASSUMED


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
    return query_holding(scope.paths, a, b, blocked, holding, origin)


def gate(flow: ScopeFlow, src: int, dst: int, key: str, start: Optional[int] = None) -> Optional[bool]:
    """The value condition `key` must have on every path src -> dst (graph nodes); None when either value
    allows a path (or neither does)."""
    if src == dst:
        return None
    on_true = query_holding(flow.paths, src, dst, (), ((key, True),), start) is not None
    on_false = query_holding(flow.paths, src, dst, (), ((key, False),), start) is not None
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
    `avoid` between)? A `break` or `return` right after it means it runs once."""
    graph = flow.flow.graph
    latch, body = graph.loop_latch.get(id(loop)), graph.loop_body.get(id(loop))
    if latch is None or body is None:
        return None
    return weakest(flow.flow.path_to(event, latch, avoid), flow.flow.path_from(body, event, avoid))


@dataclass(eq=False)
class _WholeScope:
    """A scope's body as one open step (no loop, no events of its own): what `StepFlow` reads of a step."""

    scope: "Scope"
    loop: None = None
    events: Tuple = ()


def whole_scope_flow(model: "FileModel", scope: "Scope") -> StepFlow:
    """The paths of a whole scope, entry to exit, as one open step: for questions about events that need
    no iteration (what reaches a call from the function's start)."""
    cache = model.__dict__.setdefault("_scope_step_flows", {})
    flow = cache.get(id(scope))
    if flow is None:
        flow = cache[id(scope)] = StepFlow(scope_flow(model, scope), _WholeScope(scope))  # type: ignore[arg-type]
    return flow
