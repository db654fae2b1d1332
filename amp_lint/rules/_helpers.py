"""Small predicates over the model that several rules share (not a rule: the registry does not list it)."""

from __future__ import annotations

import re
from typing import Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amp_lint.analysis.flow_queries import site_path, whole_scope_flow
from amp_lint.analysis import names, values
from amp_lint.analysis.accumulation import Accumulation, accumulation, assigned_names  # noqa: F401  (tests read it here)
from amp_lint.diagnostics import one_line
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.order import Breach
from amp_lint.analysis.protocol import predicates_of
from amp_lint.diagnostics import Applicability, Confidence
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.fixes.reindent import shifted
from amp_lint.rules.base import Finding, Fix, Rule

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


def regions_feeding(backwards, per_call: bool = False) -> List[AutocastRegion]:
    """The distinct autocast regions feeding a scaler's backwards ((step, backward) pairs); empty when one
    backward has none (`per_call`: one backward call, whatever iteration it is reached in, once any of them
    feeds it). Linear in the backwards and regions: a loop of N autocast blocks, each with its own scaled
    backward, lists each region once, not N times (issue 45, item 7)."""
    # Per backward (or backward call): its own regions, and the iterations whose regions feed it, in order.
    # An iteration's regions are listed once, however many of its backwards they feed: N backwards of one
    # loop of N blocks cost N, in time and in memory.
    feeding: Dict[int, List[object]] = {}
    of_step: Dict[int, List[AutocastRegion]] = {}  # the iteration's own regions, once per iteration
    for step, backward in backwards:
        if id(step) not in of_step:
            of_step[id(step)] = forward_regions(step, None)
        own = [r for r in backward.regions if r.spec.is_enabled]
        if not own and not of_step[id(step)] and not per_call:
            return []
        here = feeding.setdefault(id(backward.call) if per_call else id(backward), [])
        here.extend(own)
        if of_step[id(step)]:
            here.append(step)
    if not feeding or not all(feeding.values()):
        return []
    unique: Dict[int, AutocastRegion] = {}
    merged: Set[int] = set()  # iterations whose regions are all in `unique` already
    for found in feeding.values():
        for item in found:
            if isinstance(item, AutocastRegion):
                unique.setdefault(id(item), item)
            elif id(item) not in merged:
                merged.add(id(item))
                for region in of_step[id(item)]:
                    unique.setdefault(id(region), region)
    return list(unique.values())


def forward_regions(step: TrainingStep, backward: Optional[Event]) -> List[AutocastRegion]:
    """The autocast regions of the iteration that may run the forward pass feeding `backward` (None: the
    iteration's own regions, without those around a backward)."""
    found: List[AutocastRegion] = list(backward.regions) if backward is not None else []
    seen = {id(region) for region in found}
    for region in step.scope.regions_in_iteration(step.loop):
        if id(region) not in seen:
            seen.add(id(region))
            found.append(region)
    return [r for r in found if r.spec.is_enabled]






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
    indent = boundary.body.indent if boundary.body.indent is not None else builder.module.default_indent
    for statement, kind in movers:
        builder.remove(statement)
        new = shifted(statement.with_changes(leading_lines=()), indent)  # one block deeper, every line of it
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
    # The block that holds the boundary `if`: the loop's body, or a branch of it (`if accum > 1:`, issue 44).
    block = model.block_of(acc.boundary)
    body = list(block) if block is not None else []
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


# --- order rules (issue 26): a predicate of the protocol table, a message, a fix ------------------------


class _Call:
    """A call a message names: `{x}` its code, `{x:short}` / `{x:short40}` shortened to 60 / 40 characters."""

    def __init__(self, node: cst.CSTNode) -> None:
        self.node = node

    def __format__(self, spec: str) -> str:
        return short(self.node, int(spec[5:] or 60)) if spec.startswith("short") else code_of(self.node)


def _call(event) -> Optional[_Call]:
    return _Call(event.call) if event is not None else None


class OrderRule(Rule):
    """An order rule: the protocol predicates it reports (`protocol.PREDICATES` entries of its code, set
    here), one message per predicate (`messages`, keyed by the predicate's kind), and the analysis query
    that answers with them (`query`, an `order_*` function yielding `order.Breach`es). `check` is the same
    for every order rule; a rule adds only what its message names beyond the breach (`words`), its fix,
    and the path shown after the message (`related`).

    A message is a format string over: `event`, `cause`, `other`, `last` (the breach's calls: `{event}`,
    `{event:short}`, `{event:short40}`), `node` (the syntax the breach is about), `scaler`, `optimizer`
    (the event's target), `detail`, and whatever `words` adds.
    """

    query: ClassVar[Callable[[FileModel], Iterator[Breach]]]
    messages: ClassVar[Dict[str, str]] = {}
    at_node: ClassVar[bool] = False  # the finding points at `breach.node` (an argument), not the event's call

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            cls.predicates = predicates_of(cls.code)
        if "query" in cls.__dict__:
            cls.query = staticmethod(cls.__dict__["query"])  # a plain analysis function, not a method

    def check(self, model: FileModel) -> Iterator[Finding]:
        memo: dict = {}  # per file: what a rule's fixes share across its findings
        for breach in self.query(model):
            event = breach.event
            words = dict(
                event=_call(event), cause=_call(breach.cause), other=_call(breach.other), last=_call(breach.last),
                node=_Call(breach.node) if breach.node is not None else None,
                scaler=breach.scaler, optimizer=getattr(event, "target", None), detail=breach.detail,
            )
            words.update(self.words(model, breach))
            yield self.finding(
                breach.node if self.at_node else event.call,
                self.messages[breach.kind].format_map(words),
                fix=self.fix(model, breach, memo),
                confidence=self.confidence_of(breach),
                context=breach.context,
                related=self.related(model, breach),
                assumption=breach.assumption,
            )

    def words(self, model: FileModel, breach: Breach) -> Dict[str, object]:
        return {}

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        return None

    def confidence_of(self, breach: Breach) -> Confidence:
        return Confidence.HIGH

    def related(self, model: FileModel, breach: Breach) -> Tuple[Tuple[str, cst.CSTNode], ...]:
        return ()


def remove_call_fix(model: FileModel, event: Event, message: str) -> Optional[Fix]:
    """Remove the statement that is the event's call alone (`x.update()` on its own line, or in a `;` list)."""
    if not isinstance(event.small_statement, cst.Expr) or event.small_statement.value is not event.call:
        return None
    builder = FixBuilder(model.module)
    builder.remove(removal_target(event.statement, event.small_statement))
    return builder.build(message, Applicability.SAFE)
