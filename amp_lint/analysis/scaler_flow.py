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

Calls: the events of a helper function sit at its call, as its summary put them there
(`function_summary.Summary`, applied when the file's steps are built); `skipped_in_helper` says when
such an event runs on only some of the helper's paths.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from amp_lint.analysis import cfg
from amp_lint.analysis.events import Event, Scope
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.paths import ASSUMED, PROVED, Paths, Proof, weakest


# --- one scope's flow --------------------------------------------------------------------------------


class ScopeFlow:
    """The flow graph of one scope, and where each event of it sits."""

    def __init__(self, scope: Scope) -> None:
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

    def __init__(self, flow: ScopeFlow, step: TrainingStep) -> None:
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

    def before(self, event, events: Iterable) -> List[Tuple[Event, Proof]]:
        """The events that can run before `event` in the iteration, each with how sure that is."""
        found = []
        for other in events:
            if other is event:
                continue
            proof = self.path(other, event)
            if proof is not None:
                found.append((other, proof))
        return found

    def after(self, event, events: Iterable) -> List[Tuple[Event, Proof]]:
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


def flow_of(model: FileModel, step: TrainingStep) -> StepFlow:
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
