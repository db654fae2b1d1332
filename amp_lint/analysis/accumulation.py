"""Gradient accumulation: the boundary condition that the iteration's step waits for, and which events run
on every micro-batch (asked by AMP024, AMP030, AMP040-AMP042 and their fixes).

An iteration is a loop body or a per-call step function (issue 26, principle 2: a `train_step(self, i,
batch)` with `if (i + 1) % k == 0:` around its step accumulates as a loop body does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set

import libcst as cst

from amp_lint.analysis.conditions import is_varying, normalise
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.flow_queries import branch_tests, call_levels, condition_of, gate, iteration_nodes, path_with
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.paths import ASSUMED, PROVED, Proof
from amp_lint.analysis.scaler_flow import ScopeFlow, StepFlow, flow_of
from amp_lint.analysis.syntax import code_of
from amp_lint.diagnostics import one_line


def _short(node: cst.CSTNode, limit: int = 40) -> str:
    text = one_line(code_of(node))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- gradient accumulation ---------------------------------------------------------------------------
#
# An accumulation boundary is a condition on the path: the test (`(i + 1) % accum == 0`, or
# `if (i + 1) % accum != 0: continue`) that must go one way for the iteration's `scaler.step()` /
# `update()` (failing those, its `zero_grad()`) to run, and that the backward does not wait for. "Runs on
# every micro-batch" is "on a path from the iteration's start on which the boundary condition does not
# hold"; "at the boundary" is "on no such path". Both are asked of the step's own graph and of the graph
# of each helper that a call leads through (`scaler_flow.call_levels`).

_ACCUMULATION_TEST = re.compile(r"%|accum|accumulat|sync_grad|micro|boundary|update_step|should_step", re.IGNORECASE)


def is_accumulation_test(test: cst.BaseExpression) -> bool:
    """A test that reads like a gradient-accumulation boundary (a modulo, `accum`, `sync_gradients`, ...)."""
    return bool(_ACCUMULATION_TEST.search(normalise(test)[0]))


@dataclass(frozen=True)
class Gate:
    """An accumulation test that must go one way for an event to run."""

    flow: ScopeFlow  # the graph it is in: the step's (level 0) or a helper's
    level: int
    key: str  # the condition (`conditions.Atom.key`)
    value: bool  # the value it must have
    test_node: int  # the graph node of the `if` of that test nearest the event

    @property
    def statement(self) -> cst.If:
        return self.flow.graph.statements[self.test_node]  # type: ignore[return-value]

    @property
    def in_body(self) -> bool:
        """Is the `if`'s body the gated side (not `if not boundary: continue`)?"""
        return condition_of(self.flow, self.test_node)[1] == self.value

    def same_test(self, other: "Gate") -> bool:
        return self.flow is other.flow and self.key == other.key


def accumulation_gates(model: FileModel, flow: StepFlow, event) -> List[Gate]:
    """The accumulation tests that gate `event`, level by level, outermost first (innermost last)."""
    cache = flow.memo.setdefault("accumulation_gates", {})
    found = cache.get(id(event))
    if found is not None:
        return found
    found = []
    for level, (graph, src, dst) in enumerate(call_levels(model, flow, event)):
        low, high = iteration_nodes(flow) if level == 0 else (-1, None)
        tests = [n for n in branch_tests(graph, is_accumulation_test, low, high) if n > dst]
        keys: Dict[str, List[int]] = {}
        for node in tests:  # first on the path first
            keys.setdefault(condition_of(graph, node)[0], []).append(node)
        for key, nodes in keys.items():
            value = gate(graph, src, dst, key)
            if value is not None:
                found.append(Gate(graph, level, key, value, nodes[-1]))
    cache[id(event)] = found
    return found


def iteration_assigned_names(flow: StepFlow) -> Set[str]:
    """Names (plain and dotted) that the statements of one iteration bind, the loop's own target too."""
    cached = flow.memo.get("assigned_names")
    if cached is not None:
        return cached
    found: Set[str] = set()
    low, high = iteration_nodes(flow)
    targets: List[cst.BaseExpression] = []
    loop = flow.step.loop
    if isinstance(loop, cst.For):
        targets.append(loop.target)
    for node in range(low + 1, high + 1):
        statement = flow.flow.graph.statements[node]
        if isinstance(statement, cst.SimpleStatementLine):
            found |= assigned_names(statement)
        elif isinstance(statement, cst.For):
            targets.append(statement.target)
        elif isinstance(statement, cst.With):
            targets.extend(item.asname.name for item in statement.items if item.asname is not None)
    for target in targets:
        found |= target_names(target)
    flow.memo["assigned_names"] = found
    return found


def same_pass(flow: StepFlow, first, second) -> Optional[Proof]:
    """Can both run in one pass (either order)?"""
    proof = flow.path(first, second)
    return proof if proof is not None else flow.path(second, first)


def first_on_path(flow: StepFlow, events: Sequence[Event]) -> Optional[Event]:
    """An event of `events` that none of the others precedes on a path (the first listed of those)."""
    for event in events:
        if not any(other is not event and flow.path(other, event) is not None for other in events):
            return event
    return events[0] if events else None



class Accumulation:
    """A gradient-accumulation iteration: a scaled backward on every micro-batch and a boundary condition."""

    def __init__(self, model: FileModel, step: TrainingStep, backward: Event, scaler: str, gate: Gate, own_keys) -> None:
        self.model = model
        self.step = step
        self.flow = flow_of(model, step)
        self.backward = backward
        self.scaler = scaler
        self.gate = gate
        self.boundary: cst.If = gate.statement  # the `if` of the boundary test (for messages and the fix)
        self._backward_keys = own_keys  # accumulation tests the backward waits for too: no boundary

    def gates(self, event) -> List[Gate]:
        return [g for g in accumulation_gates(self.model, self.flow, event) if g.key not in self._backward_keys]

    @property
    def test(self) -> str:
        """The boundary test, as the code writes it."""
        return _short(self.boundary.test, 40)

    def waits_for(self, failing: str = "fails") -> str:
        """`if (i + 1) % accum == 0`, or `if (i + 1) % accum != 0` + `failing` when the step runs where the
        test fails (`continue`)."""
        return f"`if {self.test}`" if self.gate.in_body else f"`if {self.test}` {failing}"

    def every_micro_batch(self, event) -> Optional[Proof]:
        """How sure it is that `event` runs on the micro-batches that only accumulate: on one pass with the
        backward, on a path where the boundary condition does not hold. None when it waits for the
        boundary, or for an accumulation test of its own (`if i % log_every == 0:`)."""
        for g in self.gates(event):
            if not g.same_test(self.gate) or g.value == self.gate.value:
                return None
        holding = ((self.gate.key, not self.gate.value),) if self.gate.level == 0 else ()
        proof = path_with(self.flow, self.backward, event, holding=holding)
        if proof is None:
            proof = path_with(self.flow, event, self.backward, holding=holding)
        if proof is PROVED and self._guard_varies(event):
            # `if do_step:` with `do_step = ...` set in the loop may be the boundary under another name: the
            # event's own test is unknown, not "may differ" (issue 14, point 2).
            proof = ASSUMED
        return proof

    def _guard_varies(self, event) -> bool:
        """Does a test of its own (one the backward does not wait for) that the event waits for read a name
        the iteration assigns?"""
        node, backward = self.flow.node(event), self.flow.node(self.backward)
        if node is None or backward is None:
            return False
        graph = self.flow.flow
        low, high = iteration_nodes(self.flow)

        def own_test(test: cst.BaseExpression) -> bool:
            return not is_accumulation_test(test) and not is_varying(normalise(test)[0])

        varying = iteration_assigned_names(self.flow)
        for test_node in branch_tests(graph, own_test, low, high):
            if test_node <= node:
                continue
            statement = graph.graph.statements[test_node]
            key = condition_of(graph, test_node)[0]
            if gate(graph, self.flow.start, node, key) is None or gate(graph, self.flow.start, backward, key) is not None:
                continue
            read = set()
            for name in re.findall(r"[A-Za-z_][\w.]*", code_of(statement.test)):  # type: ignore[union-attr]
                parts = name.split(".")
                read |= {".".join(parts[:n]) for n in range(1, len(parts) + 1)}  # `state.ready`: `state` too
            if read & varying:
                return True
        return False

    def unconditional(self, event) -> bool:
        """Runs on every micro-batch (`every_micro_batch`)."""
        return self.every_micro_batch(event) is not None

    def at_boundary(self, event) -> bool:
        """On one pass with the backward, and only where the boundary condition holds."""
        gates = self.gates(event)
        if not gates or not gates[-1].same_test(self.gate) or gates[-1].value != self.gate.value:
            return False
        return same_pass(self.flow, self.backward, event) is not None

    def protocol(self, *kinds: EventKind) -> List[Event]:
        """Events of the scaler (or, for CLIP / ZERO_GRAD, of any receiver) in the iteration."""
        return [
            e
            for e in self.step.events
            if e.kind in kinds and (e.kind in (EventKind.CLIP, EventKind.ZERO_GRAD) or e.receiver == self.scaler)
        ]


def accumulation(model: FileModel, step: TrainingStep) -> Optional[Accumulation]:
    """The step's gradient accumulation, if it is one (computed once per step: several rules ask)."""
    if step.loop is None and not step.scope.is_function:
        return None  # a per-call step function is one iteration too (issue 26, principle 2)
    flow = flow_of(model, step)
    if "accumulation" not in flow.memo:
        flow.memo["accumulation"] = _accumulation(model, step, flow)
    return flow.memo["accumulation"]


def _accumulation(model: FileModel, step: TrainingStep, flow: StepFlow) -> Optional[Accumulation]:
    backwards = [e for e in step.of(EventKind.BACKWARD) if e.scaled_by is not None]
    if not backwards or any(b.in_helper for b in backwards):
        return None
    scaler = backwards[0].scaled_by
    assert scaler is not None
    if any(b.scaled_by != scaler for b in backwards):
        return None
    if not model.scaler_enabled(scaler, step.scope):
        return None
    # Scaled backwards that are alternatives (`if accum > 1: ... else: ...`, `if gan: ... else: ...`) are
    # separate passes, each with its own boundary or none: the first pass that accumulates is the iteration's
    # accumulation, whatever branch holds it (issue 44); events of the other passes never share its pass.
    passes: List[List[Event]] = []
    for candidate in backwards:
        together = next((p for p in passes if all(same_pass(flow, candidate, b) is not None for b in p)), None)
        if together is None:
            passes.append([candidate])
        else:
            together.append(candidate)
    for together in passes:
        found = _accumulation_of_pass(model, step, flow, together, scaler)
        if found is not None:
            return found
    return None


def _accumulation_of_pass(
    model: FileModel, step: TrainingStep, flow: StepFlow, backwards: List[Event], scaler: str
) -> Optional[Accumulation]:
    """The accumulation of scaled backwards that run together, if their steps wait for a boundary."""
    backward = first_on_path(flow, backwards)
    assert backward is not None
    own_keys = frozenset(g.key for b in backwards for g in accumulation_gates(model, flow, b))

    def gates(event) -> List[Gate]:
        return [g for g in accumulation_gates(model, flow, event) if g.key not in own_keys]

    protocol = [
        e
        for e in step.events
        if e.receiver == scaler
        and e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE)
        and same_pass(flow, backward, e) is not None
    ]
    zeros = [e for e in step.events if e.kind is EventKind.ZERO_GRAD and same_pass(flow, backward, e) is not None]
    # `update(new_scale)` sets the scale (icefall's `if cur_grad_scale < 1.0: scaler.update(cur_grad_scale * 2.0)`
    # every hundred batches): not the update the iteration's step waits for, so it marks no boundary.
    candidates = [(e, gates(e)) for e in protocol if not (e.kind is EventKind.SCALER_UPDATE and e.call.args)]
    candidates = [(e, g) for e, g in candidates if g]
    if not candidates:
        # Only zero_grad marks the boundary: no accumulation when the gradients are also cleared every pass.
        candidates = [(z, gates(z)) for z in zeros]
        if any(not g for _, g in candidates):
            return None
    innermost = {(id(g[-1].flow), g[-1].key, g[-1].value): g[-1] for _, g in candidates}
    if len(innermost) != 1:
        return None
    boundary = next(iter(innermost.values()))
    for event in protocol + zeros:
        if any(g.same_test(boundary) and g.value != boundary.value for g in gates(event)):
            return None  # `if step % N == 0: update(new_scale) else: update()`: both ways, not a boundary
    return Accumulation(model, step, backward, scaler, boundary, own_keys)


def assigned_names(statement: cst.CSTNode) -> Set[str]:
    """Plain names a simple statement line assigns."""
    found: Set[str] = set()
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            targets: List[cst.BaseExpression] = []
            if isinstance(small, cst.Assign):
                targets = [t.target for t in small.targets]
            elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                targets = [small.target]
            for target in targets:
                found |= target_names(target)
    return found


def target_names(target: cst.BaseExpression) -> Set[str]:
    """The dotted names an assignment target binds: `a`, `self.n`, `a, (b, c)`, `*rest`."""
    if isinstance(target, (cst.Tuple, cst.List)):
        found: Set[str] = set()
        for element in target.elements:
            found |= target_names(element.value)
        return found
    key = dotted_name(target)
    return {key} if key is not None else set()
