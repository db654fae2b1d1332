"""The engine that runs the GradScaler protocol table (`protocol`) over the paths of one iteration.

Each event of a training step is an operation of the table (`operation_of`); `run(flow)` is a forward
dataflow over the iteration's flow graph (no back edge, exception handlers left out), once per assignment
of the correlated conditions, so that states of contradicting branches never meet. Its answer
(`Typestate`) holds, for every event, the protocol states that can hold just before it, the violations
the table names at it (with the event that caused each: the `unscale_` before a second `unscale_`, the
`update()` before a step that divides the gradients again), and the states that reach the end of the
iteration (the loop's latch, or a step function's return): what the next iteration starts from.

The order rules are predicates over this (`protocol.PREDICATES`): "a violation of mine at this event",
"a state at the end of the iteration that the next iteration's first call refuses"; `holds` evaluates a
predicate's state part on one state, `matching` on the states at an event, `proof_of` says whether it
holds on every state that reaches the event (PROVED, whichever way the branches go) or on some
(ASSUMED), `violations_of` names the table's violations that a predicate is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Tuple

from amp_lint.analysis import protocol as P
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.paths import ASSUMED, PROVED, Proof
from amp_lint.analysis.syntax import code_of

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.analysis.events import Event
    from amp_lint.analysis.scaler_flow import StepFlow

_MAX_STATES = 64  # per node; beyond, further states are dropped (no finding rests on them)

_READ_SCALED = P.PREDICATE_OF["read-scaled"]  # gradients read while every one of the scaler's is SCALED

EVERY = P.ANY  # the gradients of every optimizer of a scaler that has no entry of its own


@dataclass(frozen=True)
class ProtocolState:
    """The protocol at one point of one path through the iteration.

    `stages`: (scaler, optimizer, stage, event that set it) for each optimizer not READY. `grads`:
    (scaler, optimizer or EVERY, gradient state, accumulating). `checks`: scalers with inf checks
    recorded since their last update. `updated`: (scaler, update event) for the updates of this iteration.
    `backed`: scalers whose scaled backward ran in this iteration. `applied`: (scaler or None, optimizer,
    operation, event) for the steps that applied an optimizer's gradients in this iteration.
    """

    stages: frozenset = frozenset()
    grads: frozenset = frozenset()
    checks: frozenset = frozenset()
    updated: frozenset = frozenset()
    backed: frozenset = frozenset()
    applied: frozenset = frozenset()

    def stage(self, scaler: str, optimizer: str) -> Optional[Tuple[str, object]]:
        """(stage, the event that set it), or None when the optimizer is READY."""
        for s, o, stage, event in self.stages:
            if s == scaler and o == optimizer:
                return stage, event
        return None

    def grads_of(self, scaler: str, optimizer: str) -> Tuple[str, bool]:
        """(gradient state, accumulating) of an optimizer's gradients for this scaler."""
        every = (P.FRESH, False)
        for s, o, state, acc in self.grads:
            if s == scaler and o == optimizer:
                return state, acc
            if s == scaler and o == EVERY:
                every = (state, acc)
        return every

    @property
    def scaled(self) -> FrozenSet[str]:
        """Scalers with gradients of some optimizer still scaled (a scaled backward waiting for its step)."""
        return frozenset(s for s, _, state, _ in self.grads if state in (P.SCALED, P.MIXED))

    def optimizers(self, scaler: str, stage: str) -> List[str]:
        """The optimizers of `scaler` in `stage` (UNSCALED or STEPPED; READY ones have no entry)."""
        return [o for s, o, st, _ in self.stages if s == scaler and st == stage]

    def updates(self, scaler: str) -> List[object]:
        return [event for s, event in self.updated if s == scaler]

    def _stage_value(self, scaler: str, optimizer: str) -> str:
        found = self.stage(scaler, optimizer)
        return found[0] if found is not None else P.READY


def operation_of(event: "Event") -> Optional[Tuple[str, Optional[str], Optional[str]]]:
    """(operation, scaler, optimizer) of an event; None for an event the protocol does not see. An
    `unscale_`/`step` that names no optimizer has none (the engine, which keys stages by it, skips it)."""
    kind = event.kind
    if kind is EventKind.BACKWARD and event.scaled_by is not None:
        return P.SCALED_BACKWARD, event.scaled_by, None
    if kind in (EventKind.SCALER_UNSCALE, EventKind.SCALER_STEP):
        operation = P.UNSCALE if kind is EventKind.SCALER_UNSCALE else P.STEP
        return operation, event.receiver, optimizer_key(event) if event.call.args else None
    if kind is EventKind.SCALER_UPDATE:
        return (P.UPDATE_NEW_SCALE if event.call.args else P.UPDATE), event.receiver, None
    if kind is EventKind.ZERO_GRAD:
        return P.ZERO_GRAD, None, event.receiver
    if kind in (EventKind.CLIP, EventKind.GRAD_READ):
        return P.READ_GRADS, None, None
    if kind is EventKind.OPTIMIZER_STEP:
        return P.OPTIMIZER_STEP, None, event.receiver
    return None


def optimizer_key(event: "Event") -> str:
    """The optimizer an unscale_/step names: its dotted name, else the code of the argument
    (`optimizers[i]`, `self.optimizers()[0]`), so that two calls on the same expression meet one state."""
    return event.target or code_of(event.call.args[0].value)


@dataclass(frozen=True)
class Violation:
    name: str  # a key of protocol.VIOLATIONS
    event: object  # where it happens
    cause: Optional[object]  # the earlier event that set the state it breaks on (None: the start)
    scaler: Optional[str]
    optimizer: Optional[str]

    @property
    def rule(self) -> str:
        return P.rule_of(self.name)


def after(state: ProtocolState, event: "Event", violations: Optional[List[Violation]] = None) -> ProtocolState:
    """The state after `event`, by the table; the violations it names are appended to `violations`."""
    op = operation_of(event)
    if op is None or (op[0] in (P.UNSCALE, P.STEP) and op[2] is None):
        return state
    operation, scaler, optimizer = op

    def report(name: Optional[str], cause, s, o) -> None:
        if name is not None and violations is not None:
            violations.append(Violation(name, event, cause, s, o))

    if operation == P.SCALED_BACKWARD:
        return dataclasses.replace(state, grads=_backward(state, scaler), backed=state.backed | {scaler})
    applied = state.applied
    if operation in (P.STEP, P.OPTIMIZER_STEP) and (operation == P.OPTIMIZER_STEP or scaler in state.backed):
        for s, o, earlier_operation, earlier in state.applied:
            if o == optimizer:
                report(P.APPLIED_TWICE.get((operation, earlier_operation)), earlier, s or scaler, optimizer)
        applied = applied | {(scaler, optimizer, operation, event)}
    if operation in (P.UNSCALE, P.STEP):
        stage_before = state.stage(scaler, optimizer)
        stage, stage_event = stage_before if stage_before is not None else (P.READY, None)
        new_stage, violation = P.stage_after(operation, stage)
        report(violation, stage_event, scaler, optimizer)
        grads, acc = state.grads_of(scaler, optimizer)
        new_grads, grad_violation = P.grads_after(operation, stage, grads)
        if grad_violation is not None:
            report(grad_violation, _last_update(state, scaler), scaler, optimizer)
        stages = frozenset(t for t in state.stages if not (t[0] == scaler and t[1] == optimizer))
        stages |= {(scaler, optimizer, new_stage, event)} if new_stage != P.READY else frozenset()
        checks, _ = P.inf_checks_after(operation, scaler in state.checks, False)
        return dataclasses.replace(
            state,
            stages=stages,
            grads=_set_grads(state.grads, scaler, optimizer, new_grads, acc),
            checks=state.checks | {scaler} if checks else state.checks - {scaler},
            applied=applied,
        )
    if operation in P.RESETS_SCALER:
        updated_before = bool(state.updates(scaler))
        recorded, violation = P.inf_checks_after(operation, scaler in state.checks, updated_before)
        report(violation, _last_update(state, scaler), scaler, None)
        return dataclasses.replace(
            state,
            stages=frozenset(t for t in state.stages if t[0] != scaler),
            checks=state.checks | {scaler} if recorded else state.checks - {scaler},
            updated=state.updated | {(scaler, event)},
        )
    # Operations on gradients, for every scaler whose gradients the state follows.
    grads = state.grads
    for s in {t[0] for t in state.grads}:
        if operation == P.READ_GRADS:
            if holds(state, _READ_SCALED, s):
                report(_READ_SCALED.violation, None, s, None)
            continue
        if operation == P.OPTIMIZER_STEP or (optimizer is not None and any(t[0] == s and t[1] == optimizer for t in state.grads)):
            targets = [optimizer]
        else:
            targets = [EVERY] + [t[1] for t in state.grads if t[0] == s and t[1] != EVERY]
        for o in targets:
            before, acc = state.grads_of(s, o)  # (EVERY: the entry for the optimizers without one)
            new, violation = P.grads_after(operation, state._stage_value(s, o), before)
            report(violation, None, s, o)
            grads = _set_grads(grads, s, o, new, acc and new == before)
    return dataclasses.replace(state, grads=grads, applied=applied)


def _backward(state: ProtocolState, scaler: str) -> frozenset:
    """A scaled backward adds scaled gradients to every optimizer's gradients of that scaler."""
    kept = frozenset(t for t in state.grads if t[0] != scaler)
    entries = [t for t in state.grads if t[0] == scaler] or [(scaler, EVERY, P.FRESH, False)]
    if not any(t[1] == EVERY for t in entries):
        entries.append((scaler, EVERY, P.FRESH, False))
    new = set()
    for _, o, before, _acc in entries:
        after_state, _ = P.grads_after(P.SCALED_BACKWARD, P.ANY, before)
        new.add((scaler, o, after_state, before in P.ACCUMULATES))
    return kept | frozenset(new)


def _set_grads(grads: frozenset, scaler: str, optimizer: str, state: str, acc: bool) -> frozenset:
    kept = frozenset(t for t in grads if not (t[0] == scaler and t[1] == optimizer))
    if optimizer != EVERY and not any(t[0] == scaler for t in kept):
        kept |= {(scaler, EVERY, P.FRESH, False)}
    return kept | {(scaler, optimizer, state, acc)}


def _last_update(state: ProtocolState, scaler: str):
    updates = state.updates(scaler)
    return max(updates, key=lambda e: e.index) if updates else None


@dataclass
class Typestate:
    """What the engine found on one iteration's paths."""

    before: Dict[int, FrozenSet[ProtocolState]]  # id(event) -> states just before it
    violations: Dict[int, Tuple[Violation, ...]]  # id(event) -> the violations at it
    end: FrozenSet[ProtocolState]  # the states that reach the end of the iteration

    def at(self, event, *names: str) -> List[Violation]:
        """The violations at `event`, in source order of their causes: the states they come from are a set,
        and an answer must not change from run to run (two steps on the sides of an if/else both cause one)."""
        found = [v for v in self.violations.get(id(event), ()) if not names or v.name in names]
        return sorted(found, key=lambda v: (-1 if v.cause is None else v.cause.index, v.name))


def run(flow: "StepFlow") -> Typestate:
    """The protocol along every path of one iteration (computed once per flow)."""
    cached = flow.memo.get("typestate")
    if cached is not None:
        return cached  # type: ignore[return-value]
    paths = flow.flow.paths
    at_node: Dict[int, List] = {}
    for event in flow.step.events:
        node = flow.node(event)
        if node is not None:
            at_node.setdefault(node, []).append(event)
    for events in at_node.values():
        events.sort(key=lambda e: e.index)
    before: Dict[int, set] = {}
    found: Dict[int, Dict[Violation, None]] = {}
    end_states: set = set()
    start, end = flow.start, flow.end
    # Below the iteration's last event and its end, no node has an event or is the end: the walk stops
    # there, and only the conditions deciding a branch in between are enumerated (a loop of a function
    # of N loops costs its own size, issue 45).
    low = min([end] + list(at_node))
    for varying, unknowns in paths._assignments(low, start):
        for unknown in unknowns:  # type: ignore[attr-defined]
            values = dict(varying + unknown)
            incoming: Dict[int, set] = {start: {ProtocolState()}}
            for node in range(start, low - 1, -1):
                states = incoming.pop(node, None)
                if not states:
                    continue
                if node == end:
                    end_states |= states
                events = at_node.get(node, ())
                for position, event in enumerate(events):
                    # Events of one node (a helper's, or one line's) run in order, unless their own
                    # branches (inside the helper) contradict.
                    here = states
                    for earlier in events[:position]:
                        if earlier.compatible(event):
                            here = {after(s, earlier) for s in here}
                    before.setdefault(id(event), set()).update(here)
                    reported: List[Violation] = []
                    for state in here:
                        after(state, event, reported)
                    bucket = found.setdefault(id(event), {})
                    for violation in reported:
                        bucket[violation] = None
                for event in events:
                    states = {after(s, event) for s in states}
                if node == end and flow.closed:
                    continue  # the latch: what follows the loop is not this iteration
                for target in paths._successors(node, values, False):
                    bucket_states = incoming.setdefault(target, set())
                    if len(bucket_states) < _MAX_STATES:
                        bucket_states |= states
    result = Typestate(
        before={key: frozenset(value) for key, value in before.items()},
        violations={key: tuple(value) for key, value in found.items() if value},
        end=frozenset(end_states),
    )
    flow.memo["typestate"] = result
    return result


def follows(flow: "StepFlow", event, operations, scaler=None, optimizer=None, proved: bool = False, among=None, before: bool = False):
    """The table's "X follows E": the events of the iteration (or of `among`) doing one of the protocol's
    `operations` on `scaler` and `optimizer` (`optimizer_key`; None: any) that can run after `event`, in
    source order, and the strongest proof among them; with `proved`, only those that follow whatever the
    unknown conditions; with `before`, those that can run before it instead. Each proof is the paths'
    backward run from the later event (`Paths.query`)."""
    found = []
    for other in flow.step.events if among is None else among:
        op = operation_of(other)
        if other is not event and op is not None and op[0] in operations and scaler in (None, op[1]) and optimizer in (None, op[2]):
            proof = flow.path(other, event) if before else flow.path(event, other)
            if proof is PROVED or (proof is not None and not proved):
                found.append((other, proof))
    return [e for e, _ in found], (PROVED if any(p is PROVED for _, p in found) else found[0][1] if found else None)


def holds(state: ProtocolState, predicate: P.Predicate, scaler: str, optimizer: Optional[str] = None) -> bool:
    """Does the state part of an order rule's predicate (`protocol.PREDICATES`) hold in `state`, for the
    (scaler, optimizer) its event names? The one evaluator every order query asks."""
    if predicate.stage is not None and state._stage_value(scaler, optimizer) != predicate.stage:
        return False
    if predicate.grads is not None or predicate.accumulating is not None:
        # One optimizer's gradients, or (no optimizer: a read of every gradient) all of the scaler's.
        if optimizer is not None:
            pairs = [state.grads_of(scaler, optimizer)]
        else:
            pairs = [(t[2], t[3]) for t in state.grads if t[0] == scaler] or [(P.FRESH, False)]
        for grads, acc in pairs:
            if predicate.grads is not None and grads not in predicate.grads:
                return False
            if predicate.accumulating is not None and acc != predicate.accumulating:
                return False
    if predicate.checks is not None and (scaler in state.checks) != predicate.checks:
        return False
    return predicate.updated is None or bool(state.updates(scaler)) == predicate.updated


def matching(states, kind: str, scaler: str, optimizer: Optional[str] = None) -> List[ProtocolState]:
    """The states in which the predicate of breach `kind` holds for (scaler, optimizer)."""
    predicate = P.PREDICATE_OF[kind]
    return [state for state in states if holds(state, predicate, scaler, optimizer)]


def violations_of(flow: "StepFlow", event, *kinds: str) -> List[Violation]:
    """The table's violations at `event` that the predicates of breach `kinds` are."""
    return run(flow).at(event, *(P.PREDICATE_OF[kind].violation for kind in kinds))


def proof_of(states, scaler: str, optimizer: Optional[str], *kinds: str) -> Optional[Proof]:
    """How sure "one of the predicates of breach `kinds` holds for (scaler, optimizer)" is over the protocol
    states that reach an event (`Typestate.before`): PROVED when it holds on every one of them, whichever
    way the branches (correlated or not) go; ASSUMED when on some; None when on none (or no state)."""
    held = [any(holds(state, P.PREDICATE_OF[kind], scaler, optimizer) for kind in kinds) for state in states]
    if not any(held):
        return None
    return PROVED if all(held) else ASSUMED
