"""Small predicates over the model that several rules share (not a rule: the registry does not list it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amp_lint.analysis.conditions import is_varying, normalise
from amp_lint.analysis.paths import ASSUMED, PROVED, Proof
from amp_lint.analysis.scaler_flow import ScopeFlow, StepFlow, flow_of
from amp_lint.analysis.flow_queries import (
    branch_tests,
    call_levels,
    condition_of,
    gate,
    iteration_nodes,
    path_with,
    site_path,
    whole_scope_flow,
)
from amp_lint.analysis import names, values
from amp_lint.diagnostics import one_line
from amp_lint.analysis.autocast import AutocastRegion
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope, TrainingStep
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import alternatives, code_of

# torch ops that autocast runs in the lower precision (CUDA's float16 list): feeding them float32 tensors
# inside autocast does not make them run in float32.
LOWER_PRECISION_OPS = frozenset(
    {
        "torch.mm",
        "torch.matmul",
        "torch.bmm",
        "torch.addmm",
        "torch.addbmm",
        "torch.baddbmm",
        "torch.addmv",
        "torch.addr",
        "torch.mv",
        "torch.chain_matmul",
        "torch.linalg.multi_dot",
        "torch.conv1d",
        "torch.conv2d",
        "torch.conv3d",
        "torch.conv_transpose1d",
        "torch.conv_transpose2d",
        "torch.conv_transpose3d",
        "torch.prelu",
        "torch.nn.functional.linear",
        "torch.nn.functional.conv1d",
        "torch.nn.functional.conv2d",
        "torch.nn.functional.conv3d",
        "torch.nn.functional.conv_transpose1d",
        "torch.nn.functional.conv_transpose2d",
        "torch.nn.functional.conv_transpose3d",
        "torch.nn.functional.prelu",
    }
)
LOWER_PRECISION_METHODS = frozenset({"mm", "matmul", "bmm", "addmm", "baddbmm", "mv", "__matmul__"})


def short(node: cst.CSTNode, limit: int = 60) -> str:
    text = one_line(code_of(node))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def literal_string(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def literal_bool(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def literal_number(node: Optional[cst.BaseExpression]) -> Optional[float]:
    """`2.0`, `-1`, `2 ** 16`, `1e-3`: the value of a numeric literal expression, else None."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        inner = literal_number(node.expression)
        if inner is None:
            return None
        return -inner if isinstance(node.operator, cst.Minus) else inner
    if isinstance(node, cst.BinaryOperation):
        left, right = literal_number(node.left), literal_number(node.right)
        if left is None or right is None:
            return None
        try:
            if isinstance(node.operator, cst.Power):
                return float(left**right)
            if isinstance(node.operator, cst.Multiply):
                return left * right
            if isinstance(node.operator, cst.Divide) and right:
                return left / right
        except OverflowError:
            return None
    return None


def argument(call: cst.Call, position: Optional[int], keyword: str) -> Optional[cst.Arg]:
    """The argument bound to a parameter, by keyword or by position; None when absent or unknowable."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is None:
        return None
    index = 0
    for arg in call.args:
        if arg.keyword is not None:
            continue
        if arg.star:
            return None
        if index == position:
            return arg
        index += 1
    return None


def has_star_args(call: cst.Call) -> bool:
    return any(arg.star for arg in call.args)


def forward_regions(step: TrainingStep, backward: Event) -> List[AutocastRegion]:
    """The autocast regions of the iteration that may run the forward pass feeding `backward`."""
    found: List[AutocastRegion] = list(backward.regions)
    for region in step.scope.regions:
        if region in found:
            continue
        if step.loop is not None and region.item is not None and step.loop not in region.loops:
            continue
        found.append(region)
    return [r for r in found if r.spec.is_enabled]






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


# Canonical order of the protocol statements inside the boundary block.
_RANK = {
    EventKind.SCALER_UNSCALE: 0,
    EventKind.CLIP: 1,
    EventKind.SCALER_STEP: 2,
    EventKind.OPTIMIZER_STEP: 2,
    EventKind.SCALER_UPDATE: 3,
    EventKind.ZERO_GRAD: 4,
}


def rank(kind: EventKind) -> int:
    return _RANK.get(kind, 5)


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


def mentions(node: cst.CSTNode, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", code_of(node)) is not None


def move_into_boundary(
    builder,
    loop_body: Sequence[cst.BaseStatement],
    boundary: cst.If,
    movers: Sequence[Tuple[cst.BaseStatement, EventKind]],
    boundary_events: Sequence[Event],
) -> bool:
    """Move whole statements (each with its rank) into the boundary `if`, in canonical order.

    Returns False (and edits nothing) when the move cannot be proven to keep the rest of the loop working:
    a moved statement assigns a name that code left outside the block reads.
    """
    if not isinstance(boundary.body, cst.IndentedBlock) or boundary not in loop_body:
        return False
    inside = list(boundary.body.body)
    moved_ids = {id(s) for s, _ in movers}
    assigned: Set[str] = set()
    for statement, _ in movers:
        assigned |= assigned_names(statement)
    if assigned:
        for statement in loop_body:
            if id(statement) in moved_ids:
                continue
            if statement is boundary:
                continue
            if any(mentions(statement, name) for name in assigned):
                return False
        for statement in inside:
            if any(mentions(statement, name) for name in assigned):
                return False
    ranks: Dict[int, int] = {}
    for event in boundary_events:
        for statement in inside:
            if statement is event.statement or contains(statement, event.statement):
                ranks[id(statement)] = min(ranks.get(id(statement), 9), rank(event.kind))
    for statement, kind in movers:
        builder.remove(statement)
        new = statement.with_changes(leading_lines=())
        anchor = next((s for s in inside if ranks.get(id(s), 9) > rank(kind) and id(s) in ranks), None)
        if anchor is None:
            builder.insert_after(inside[-1], new)
        else:
            builder.insert_before(anchor, new)
    return True


def contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    if outer is inner:
        return True
    stack = list(outer.children)
    while stack:
        node = stack.pop()
        if node is inner:
            return True
        if isinstance(node, cst.BaseStatement) or isinstance(node, cst.BaseSuite):
            stack.extend(node.children)
    return False


# --- values (amp_lint.analysis.values) ----------------------------------------------------------------


def value_of(model: FileModel, expression: Optional[cst.BaseExpression], scope: Optional[Scope]) -> values.Value:
    """What `expression`, written in `scope`, may be at run time."""
    parents = getattr(model, "parents", None)  # node id -> parent, when the model keeps one
    return values.of(model.module).resolve(expression, scope.node if scope is not None else None, parents)


def region_device_types(model: FileModel, region: AutocastRegion, with_cuda: bool = False) -> Optional[frozenset]:
    """The device types an autocast region may run on, None when one is unknown (`with_cuda`: on a host
    with CUDA, so `"cuda" if torch.cuda.is_available() else "cpu"` is "cuda")."""
    implied = names.IMPLIED_DEVICE.get(region.spec.qualified_name)
    if implied is not None:
        return frozenset({implied})
    if region.spec.device:
        return frozenset({region.spec.device.split(":")[0]})
    if region.spec.device_node is None:
        return None
    return value_of(model, region.spec.device_node, region.scope).device_types(with_cuda=with_cuda)


def region_device(model: FileModel, region: AutocastRegion) -> Optional[str]:
    """The one device type of an autocast region, None when not known."""
    types = region_device_types(model, region)
    return next(iter(types)) if types is not None and len(types) == 1 else None


def definitions(value: values.Value, label: str) -> Tuple[Tuple[str, cst.CSTNode], ...]:
    """`related` entries for the statements a value was read from."""
    return tuple((label, node) for node in value.definitions[:3])


def file_devices(model: FileModel) -> Set[str]:
    """Device types the file's autocast regions name as literals (deprecated spellings imply theirs)."""
    devices: Set[str] = set()
    for region in model.regions:
        if region.spec.device:
            devices.add(region.spec.device.split(":")[0])
    for use in model.deprecated_uses:
        devices.add(names.DEPRECATED_AMP[use.qualified_name][0])
    return devices


def class_bases(model: FileModel, cls: cst.ClassDef) -> List[Optional[str]]:
    """Qualified names of a class's bases (None for a base that is not an imported name)."""
    scope = _scope_around_class(model, cls)
    return [scope.names.qualify(base.value) for base in cls.bases]


def _scope_around_class(model: FileModel, cls: cst.ClassDef) -> Scope:
    for statement in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
        if isinstance(statement, cst.FunctionDef):
            scope = model.scope_of(statement)
            if scope is not None and scope.parent is not None:
                return scope.parent
    return model.scopes[0]


def methods(cls: cst.ClassDef) -> Dict[str, cst.FunctionDef]:
    found: Dict[str, cst.FunctionDef] = {}
    if isinstance(cls.body, cst.IndentedBlock):
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef):
                found[statement.name.value] = statement
    return found


def decorator_target(decorator: cst.Decorator) -> Tuple[cst.BaseExpression, Optional[cst.Call]]:
    expr = decorator.decorator
    if isinstance(expr, cst.Call):
        return expr.func, expr
    return expr, None




def scaler_may_be_custom(model: FileModel, key: str, scope: Scope) -> bool:
    """Some assignment of the scaler builds it from a class that is not torch's (a project's subclass)."""
    for site in model.assignment_sites:
        if site.target != key:
            continue
        if key.startswith("self."):
            if site.scope.class_name != scope.class_name:
                continue
        elif site.scope not in list(scope.chain()):
            continue
        for candidate in alternatives(site.value):
            if isinstance(candidate, cst.Call):
                qualified = site.scope.names.qualify(candidate.func)
                if qualified not in names.GRAD_SCALER and "Scaler" in (dotted_name(candidate.func) or ""):
                    return True
    return False


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
        return short(self.boundary.test, 40)

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
    # The scaled backwards run together: none is the alternative of another (`if gan: ... else: ...`).
    if any(same_pass(flow, a, b) is None for i, a in enumerate(backwards) for b in backwards[i + 1 :]):
        return None
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
    candidates = [(e, gates(e)) for e in protocol]
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


def move_into_boundary_fix(
    model: FileModel, acc: Accumulation, movers: Sequence[Event], message: str, key: object
):
    """Move the statements of `movers` (in the loop body, before the boundary `if`) into that `if`."""
    from amp_lint.diagnostics import Applicability
    from amp_lint.fixes.builder import FixBuilder

    loop = acc.step.loop if acc.step.loop is not None else acc.step.scope.node  # a per-call step: its body
    if not isinstance(loop, (cst.For, cst.While, cst.FunctionDef)):
        return None
    if not isinstance(loop.body, cst.IndentedBlock) or any(m.in_helper for m in movers):
        return None
    if acc.gate.level != 0 or not acc.gate.in_body:
        return None  # the boundary is in a helper, or the step runs where the test fails (`continue`)
    body = list(loop.body.body)
    if acc.boundary not in body:
        return None
    mover_ids = {id(m.call) for m in movers}
    statements: Dict[int, Tuple[cst.BaseStatement, EventKind]] = {}
    for mover in movers:
        statement = mover.statement
        if statement not in body or not isinstance(statement, cst.SimpleStatementLine):
            return None
        for small in statement.body:
            value = getattr(small, "value", None)
            if not isinstance(small, (cst.Expr, cst.Assign)) or id(value) not in mover_ids:
                return None
        previous = statements.get(id(statement))
        kind = mover.kind if previous is None or rank(mover.kind) < rank(previous[1]) else previous[1]
        statements[id(statement)] = (statement, kind)
    if not statements:
        return None
    positions = sorted(body.index(s) for s, _ in statements.values())
    boundary_at = body.index(acc.boundary)
    backward_anchor = acc.step.anchor_statement(acc.backward)
    if positions[-1] > boundary_at or (backward_anchor in body and body.index(backward_anchor) >= positions[0]):
        return None
    # Statements the move jumps over must not take part in the training step.
    event_statements = {id(acc.step.anchor_statement(e)) for e in acc.step.events if not e.in_helper}
    for position in range(positions[0], boundary_at):
        statement = body[position]
        if id(statement) not in {id(s) for s, _ in statements.values()} and id(statement) in event_statements:
            return None
    builder = FixBuilder(model.module)
    ordered = sorted(statements.values(), key=lambda item: body.index(item[0]))
    boundary_events = [e for e in acc.step.events if acc.at_boundary(e) and not e.in_helper]
    if not move_into_boundary(builder, body, acc.boundary, ordered, boundary_events):
        return None
    return builder.build(message, Applicability.SAFE, key=key)


def sites_in_one_pass(model: FileModel, a, b) -> bool:
    """Can two sites of one function (events, call or assignment sites) run in one pass through it, in
    either order? A path question on the function's flow graph (correlated conditions included), not a
    comparison of the `if`s around them."""
    flow = whole_scope_flow(model, a.scope)
    return site_path(flow, a, b) is not None or site_path(flow, b, a) is not None


def same_binding(model: FileModel, key: str, first: Scope, second: Scope) -> bool:
    """Does `key` in scope `first` name the same variable as in scope `second` (same function, enclosing
    scope, or `self.x` of the same class)?"""
    if key.startswith("self."):
        return first.class_name is not None and first.class_name == second.class_name
    head = key.split(".")[0]
    for scope in (first, second):
        other = second if scope is first else first
        if scope in list(other.chain()):
            # `scope` encloses `other`: the name must not be rebound in between.
            for inner in other.chain():
                if inner is scope:
                    return True
                if head in inner.params or head in inner.assignments:
                    return False
    return False
