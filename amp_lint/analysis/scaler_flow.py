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
import re
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
            if any(_is_none(_renamed(key, names)) for key in (event.receiver, event.scaled_by) if key is not None):
                # `self._grad_clipping(..., scaler=None)` (coqui's trainer on its apex path): the helper's
                # calls on that scaler cannot run at this call (they would raise), so they do not happen here.
                continue
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
        from amp_lint.analysis.steps import argument_names

        return argument_names(self.scope, call.call, self.params)


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


def _is_none(key: Optional[str]) -> bool:
    """A key renamed to the literal `None` a caller passed for the parameter."""
    return key == "None" or (key is not None and key.startswith("None."))


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

    def path_from(self, start: int, event, avoid: Sequence = (), avoid_nodes: Sequence[int] = ()) -> Optional[Proof]:
        node = self.node(event)
        if node is None:
            return None
        blocked = self._blocked_nodes(None, event, None, node, avoid)
        if blocked is None:
            return None
        blocked += [n for n in avoid_nodes if n != node]
        if start == node:
            return PROVED
        if start in blocked:
            return None  # an avoided event at the iteration's first statement runs on every path
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
        # What rules derive from this flow and several of them ask (the step's accumulation, say), by name.
        self.memo: Dict[str, object] = {}
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

    def from_start(self, event, avoid: Sequence = (), avoid_nodes: Sequence[int] = ()) -> Optional[Proof]:
        """A path from the iteration's start to `event` that passes no `avoid` event (nor graph node of
        `avoid_nodes`)."""
        return self.flow.path_from(self.start, event, avoid, avoid_nodes)

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
    cache = model.flows  # shared with `flow_queries.scope_flow` and `whole_scope_flow`
    scope_flow = cache.get(("scope", id(step.scope)))
    if scope_flow is None:
        scope_flow = cache[("scope", id(step.scope))] = ScopeFlow(step.scope)
    flow = cache.get(("step", id(step)))
    if flow is None:
        flow = cache[("step", id(step))] = StepFlow(scope_flow, step)
    return flow


# A test of whether mixed precision runs at all (the scaler's presence or state, an AMP/fp16/precision switch):
# the other way of such a test is also the way where the backward is not scaled, so it is correlated with
# the scaled backward and does not make a helper's event optional. Over-matching only keeps events must.
_PRECISION_TEST = re.compile(r"scal|amp|fp16|bf16|half|mixed|precision|enabled|OptState|stage", re.IGNORECASE)


def skipped_in_helper(event, *others) -> bool:
    """Issue 26, principle 3: a callee's event that happens on only some of its paths is a *may*-event at
    the call site, not a must-event. True when `event`, seen through a call, sits under a branch of the
    helper whose other way can run together with `others` (none of them is under the same arm or a test
    of the same condition held the same way) and whose test is not about whether mixed precision runs.
    Only the helper's branches around the event are looked at here (a loop around it counts as running)."""
    if getattr(event, "via", None) is None:
        return False
    outer = event
    while outer.via is not None:
        outer = outer.via
    at_call = {id(branch.node) for branch in outer.branches}
    for branch in event.branches:
        if id(branch.node) in at_call:
            continue
        key, holds = branch.condition
        if _PRECISION_TEST.search(key):
            continue
        if not any(_needs(other, branch, key, holds) for other in others):
            return True
    return False


def _needs(other, branch, key: str, holds: bool) -> bool:
    """Does `other` run only where `branch` goes the event's way (same arm, or the same test held alike)?"""
    for mine in other.branches:
        if mine.node is branch.node and mine.taken == branch.taken:
            return True
        if tuple(mine.condition) == (key, holds):
            return True
    return False


def assumption_text(proof: Optional[Proof], what: str = "a branch condition") -> Optional[str]:
    """The assumption a finding rests on, or None for a proved one."""
    if proof is ASSUMED:
        return f"assumes {what} can go the way this path needs"
    return None
