"""The analysis model: one pass over a parsed file, read by every rule.

Per scope (the module body and every function) it records, in source order, the training-step events:
backward calls (scaled or not), `scaler.step/update/unscale_/scale`, `optimizer.step`, gradient clipping
and `zero_grad`, each with the autocast regions, loops and `if` branches it sits in. A `TrainingStep`
groups the events of one iteration: the innermost loop body around a backward call, or a whole
function body when the function is itself the step (a `train_step()` helper).

Rules never walk the tree themselves; they read this model.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.names import NameTable, dotted_name
from amp_lint.analysis.walk import Walker

Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
Loop = Union[cst.For, cst.While]

_SCALER_NAME = re.compile(r"(^|_)(grad|loss|amp|gradient)?_?scaler$", re.IGNORECASE)
_OPTIMIZER_NAME = re.compile(
    r"^(opt|optim|optimizer|optimiser)s?([_\dA-Z].*)?$|_(opt|optim|optimizer|optimiser)(_?\d+|_?[a-zA-Z])?$|optimi[sz]er"
)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|scaler|^lr|warmup|option|optional", re.IGNORECASE)
# Receivers whose `.backward(loss)` is a framework's own wrapper (Accelerate, Fabric, DeepSpeed, apex),
# not `Tensor.backward`: they scale, unscale and step on the user's behalf.
_WRAPPER_RECEIVER = re.compile(r"accelerator|fabric|engine|deepspeed|trainer|strategy|booster|^amp$|^self$")

CUDA_LIKE_DEVICES = frozenset({"cuda", "xpu", "mps", "mtia"})
BF16_DEFAULT_DEVICES = frozenset({"cpu", "hpu", "xla", "maia"})


class DType(enum.Enum):
    FP16 = "float16"
    BF16 = "bfloat16"
    OTHER = "other"  # float32 / float64: autocast does nothing useful (AMP054)
    UNKNOWN = "unknown"


class EventKind(enum.Enum):
    BACKWARD = "backward"  # x.backward(), torch.autograd.backward(x)
    AUTOGRAD_GRAD = "autograd.grad"  # torch.autograd.grad(x, ...)
    SCALER_SCALE = "scaler.scale"  # scaler.scale(x) that is not immediately backpropagated
    SCALER_STEP = "scaler.step"
    SCALER_UPDATE = "scaler.update"
    SCALER_UNSCALE = "scaler.unscale_"
    OPTIMIZER_STEP = "optimizer.step"
    CLIP = "clip"  # torch.nn.utils.clip_grad_norm_ and friends
    GRAD_READ = "grad read"  # `p.grad` of a parameter in `for p in model.parameters():` (event.call is the Attribute)
    ZERO_GRAD = "zero_grad"
    CALL = "call"  # a call of a function or method defined in this file, or one that looks like an unscale


def _literal_string(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _literal_bool(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def _argument(call: cst.Call, position: Optional[int], keyword: str) -> Optional[cst.Arg]:
    """The argument bound to a parameter, by keyword or by position (None when absent or unknown)."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is not None and position < len(positional):
        # A *args before the position makes the position unknowable.
        for arg in call.args[: call.args.index(positional[position])]:
            if arg.star:
                return None
        return positional[position]
    return None


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


# --- autocast ------------------------------------------------------------------------------------------


@dataclass(eq=False)
class AutocastSpec:
    """What an autocast expression asks for: its device, dtype and whether it is switched on."""

    qualified_name: str
    call: Optional[cst.Call]  # None for a bare `@torch.autocast` decorator
    device_node: Optional[cst.BaseExpression] = None
    dtype_node: Optional[cst.BaseExpression] = None
    enabled_node: Optional[cst.BaseExpression] = None
    device: Optional[str] = None  # literal device type ("cuda"), resolved by FileModel.finalize
    dtype: DType = DType.UNKNOWN
    enabled: Optional[bool] = True  # False: literal enabled=False; None: decided at run time

    @property
    def is_enabled(self) -> bool:
        """Enabled unless switched off by a literal False (an expression counts as enabled)."""
        return self.enabled is not False

    @property
    def is_deprecated_spelling(self) -> bool:
        return self.qualified_name in names.DEPRECATED_AMP


def autocast_spec(qualified_name: str, call: Optional[cst.Call], extra_args: Sequence[cst.Arg] = ()) -> AutocastSpec:
    """Read device/dtype/enabled from an autocast call (`extra_args`: arguments bound by functools.partial)."""
    spec = AutocastSpec(qualified_name=qualified_name, call=call)
    if call is None:
        return spec
    merged = cst.Call(func=call.func, args=tuple(extra_args) + tuple(call.args))
    implied = names.IMPLIED_DEVICE.get(qualified_name)
    if implied is None:  # torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)
        device = _argument(merged, 0, "device_type")
        dtype = _argument(merged, 1, "dtype")
        enabled = _argument(merged, 2, "enabled")
        spec.device_node = device.value if device else None
    else:  # torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)
        dtype = _argument(merged, 1, "dtype")
        enabled = _argument(merged, 0, "enabled")
    spec.dtype_node = dtype.value if dtype else None
    spec.enabled_node = enabled.value if enabled else None
    if enabled is not None:
        spec.enabled = _literal_bool(enabled.value)
    return spec


@dataclass(eq=False)
class AutocastRegion:
    """Code that runs under autocast: the body of a `with` item, or a decorated function."""

    node: Union[cst.With, cst.FunctionDef]
    spec: AutocastSpec
    item: Optional[cst.WithItem] = None  # the `with` item (None for a decorator)
    scope: Optional["Scope"] = None
    parent: Optional["AutocastRegion"] = None  # the lexically enclosing region, if any
    loops: Tuple[Loop, ...] = ()  # loops around the region within its scope, outermost first

    @property
    def is_decorator(self) -> bool:
        return isinstance(self.node, cst.FunctionDef)


@dataclass(eq=False)
class AutocastBinding:
    """`ctx = torch.autocast(...)` (an instance) or `amp_cm = autocast` / `partial(autocast, ...)` (a factory)."""

    qualified_name: str
    call: Optional[cst.Call]  # the autocast call for an instance; the partial(...) call for a partial
    is_factory: bool
    partial_args: Tuple[cst.Arg, ...] = ()


# --- scalers and optimizers ----------------------------------------------------------------------


@dataclass(eq=False)
class ScalerBinding:
    """How a scaler name came to be: built from a GradScaler call, a parameter, or only its name."""

    key: str  # "scaler", "self.scaler"
    call: Optional[cst.Call] = None  # the GradScaler(...) call, when the file builds it
    qualified_name: Optional[str] = None
    enabled: Optional[bool] = True  # False: literal enabled=False; None: an expression
    maybe_none: bool = False  # `GradScaler() if amp else None`
    statement: Optional[Statement] = None
    scope: Optional["Scope"] = None
    loops: Tuple[Loop, ...] = ()  # loops around the construction, in its scope

    @property
    def is_enabled(self) -> bool:
        return self.enabled is not False

    @property
    def device(self) -> Optional[str]:
        """The device literal the scaler is built for ("cuda" when omitted), None when not a literal."""
        if self.call is None or self.qualified_name is None:
            return None
        implied = names.IMPLIED_DEVICE.get(self.qualified_name)
        if implied:
            return implied
        arg = _argument(self.call, 0, "device")
        if arg is None:
            return "cuda"
        return _literal_string(arg.value)


# --- where an event sits ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Branch:
    """One enclosing `if` and which way it went."""

    node: cst.If
    taken: bool  # True: body; False: else branch

    @property
    def condition(self) -> Tuple[str, bool]:
        """(normalised test, whether it holds here): `if amp:` body and `if not amp:` else are the same path."""
        key, polarity = _normalised_test(self.node.test)
        return key, polarity == self.taken


_TEST_CACHE: Dict[int, Tuple[cst.BaseExpression, Tuple[str, bool]]] = {}


def _normalised_test(test: cst.BaseExpression) -> Tuple[str, bool]:
    cached = _TEST_CACHE.get(id(test))
    if cached is None or cached[0] is not test:
        cached = (test, _normalise_test(test))
        if len(_TEST_CACHE) > 10_000:
            _TEST_CACHE.clear()
        _TEST_CACHE[id(test)] = cached
    return cached[1]


def _normalise_test(test: cst.BaseExpression) -> Tuple[str, bool]:
    """(key, polarity): `not x` -> (x, False); `x is None` -> (x, False); `x is not None` -> (x, True)."""
    polarity = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        polarity = not polarity
        test = test.expression
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.comparator, cst.Name) and target.comparator.value == "None":
            if isinstance(target.operator, cst.IsNot):
                test = test.left
            elif isinstance(target.operator, cst.Is):
                test = test.left
                polarity = not polarity
    text = re.sub(r"\s+", "", code_of(test))
    return text, polarity


@dataclass(eq=False)
class Event:
    kind: EventKind
    call: cst.Call
    statement: Statement  # the innermost statement holding the call
    small_statement: Optional[cst.BaseSmallStatement]  # the small statement holding the call, if any
    scope: "Scope"
    loops: Tuple[Loop, ...]  # enclosing loops within the scope, outermost first
    branches: Tuple[Branch, ...]  # enclosing ifs within the scope, outermost first
    regions: Tuple[AutocastRegion, ...]  # enclosing autocast regions, outermost first
    receiver: Optional[str] = None  # dotted receiver of a method call ("scaler", "self.optimizer")
    target: Optional[str] = None  # loss of a backward; optimizer of a step/unscale_; callee of a CALL
    scaled_by: Optional[str] = None  # for BACKWARD / AUTOGRAD_GRAD: the scaler key when the loss is scaled
    scale_call: Optional[cst.Call] = None  # the scaler.scale(...) call feeding a backward
    loss: Optional[cst.BaseExpression] = None  # for BACKWARD / AUTOGRAD_GRAD: the expression backpropagated
    index: float = 0  # position in the iteration's order (source order; helpers' events sit at their call)
    # For an event of a helper function inlined into the iteration that calls it: the call it came through.
    via: Optional["Event"] = None
    # The flow-graph statement: `statement`, or the one-line suite (`if x: step()`) that holds the call.
    flow_statement: Optional[cst.CSTNode] = None

    @property
    def in_helper(self) -> bool:
        """True for an event seen through a call: fixes never edit a helper on one caller's behalf."""
        return self.via is not None

    def trail(self) -> List["Event"]:
        """The calls that led from the iteration to this event, outermost first."""
        calls = []
        event = self.via
        while event is not None:
            calls.append(event)
            event = event.via
        return list(reversed(calls))

    @property
    def loop(self) -> Optional[Loop]:
        return self.loops[-1] if self.loops else None

    @property
    def region(self) -> Optional[AutocastRegion]:
        """The innermost autocast region around the event (a disabled one counts: it switches autocast off)."""
        return self.regions[-1] if self.regions else None

    def in_enabled_autocast(self) -> Optional[AutocastRegion]:
        """The enclosing region that is in force, unless an inner `enabled=False` region switches it off."""
        return enabled_region(self.regions)

    def compatible(self, other: "Event") -> bool:
        """Can both events run in the same pass through the code (no `if`/`else` between them)?"""
        mine = {b.node: b.taken for b in self.branches}
        for branch in other.branches:
            if branch.node in mine and mine[branch.node] != branch.taken:
                return False
        if not self.branches or not other.branches:
            return True
        tests = dict(branch.condition for branch in self.branches)
        for branch in other.branches:
            key, holds = branch.condition
            if key in tests and tests[key] != holds:
                return False
        return True

    def describe(self) -> str:
        return code_of(self.call)


# --- scopes and training steps ------------------------------------------------------------------------


@dataclass(eq=False)
class Scope:
    """The module body, or one function (methods included)."""

    node: Union[cst.Module, cst.FunctionDef]
    name: str  # qualified: "Trainer.train_step"; "" for the module
    parent: Optional["Scope"]
    class_name: Optional[str] = None  # for methods, the enclosing class
    names: NameTable = field(default_factory=NameTable)
    params: Dict[str, Optional[cst.BaseExpression]] = field(default_factory=dict)  # name -> annotation
    events: List[Event] = field(default_factory=list)
    regions: List[AutocastRegion] = field(default_factory=list)
    assignments: Dict[str, List[Tuple[cst.BaseExpression, Statement]]] = field(default_factory=dict)
    decorator_region: Optional[AutocastRegion] = None

    @property
    def is_function(self) -> bool:
        return isinstance(self.node, cst.FunctionDef)

    def chain(self) -> Iterator["Scope"]:
        scope: Optional[Scope] = self
        while scope is not None:
            yield scope
            scope = scope.parent


@dataclass(eq=False)
class TrainingStep:
    """One iteration of training: the events of a loop body around a backward, or of a step function."""

    scope: Scope
    loop: Optional[Loop]  # None: the whole function body is the iteration
    events: List[Event]

    def of(self, *kinds: EventKind) -> List[Event]:
        return [e for e in self.events if e.kind in kinds]

    def scaler_events(self, scaler: str, *kinds: EventKind) -> List[Event]:
        return [e for e in self.events if e.kind in kinds and e.receiver == scaler]

    def anchor_statement(self, event: Event) -> Statement:
        """The statement to insert next to for `event`, at the iteration's own level.

        `for opt in optimizers: scaler.step(opt)` is a loop inside the iteration: code that must follow
        every step goes after that inner loop, not inside it.
        """
        depth = event.loops.index(self.loop) + 1 if self.loop in event.loops else 0
        deeper = event.loops[depth:]
        return deeper[0] if deeper else event.statement

    def before(self, event: Event, kinds: Sequence[EventKind], scaler: Optional[str] = None) -> List[Event]:
        """Events of these kinds earlier in the iteration, on a path compatible with `event`."""
        return [
            e
            for e in self.events
            if e.kind in kinds and e.index < event.index and (scaler is None or e.receiver == scaler) and e.compatible(event)
        ]

    def after(self, event: Event, kinds: Sequence[EventKind], scaler: Optional[str] = None) -> List[Event]:
        """Events of these kinds later in the iteration, on a path compatible with `event`."""
        return [
            e
            for e in self.events
            if e.kind in kinds and e.index > event.index and (scaler is None or e.receiver == scaler) and e.compatible(event)
        ]

    @property
    def is_accumulation(self) -> bool:
        """Backward on every micro-batch, but the step only under a condition the backward is not under."""
        backwards = self.of(EventKind.BACKWARD)
        steps = self.of(EventKind.SCALER_STEP, EventKind.OPTIMIZER_STEP)
        if not backwards or not steps:
            return False
        backward_branches = {b.node for b in backwards[0].branches}
        return all(any(b.node not in backward_branches for b in s.branches) for s in steps)


@dataclass(eq=False)
class DeprecatedUse:
    """A reference to a deprecated `torch.cuda.amp` / `torch.cpu.amp` API (AMP070-AMP073)."""

    node: cst.BaseExpression  # the Name or Attribute
    qualified_name: str
    call: Optional[cst.Call]  # the call when the reference is called
    decorator: Optional[cst.Decorator]  # the decorator when it is one
    scope: Scope


def enabled_region(regions: Sequence[AutocastRegion]) -> Optional[AutocastRegion]:
    """The region in force among nested `regions` (outermost first), as `Event.in_enabled_autocast`."""
    disabled_devices = set()
    for region in reversed(regions):
        if not region.spec.is_enabled:
            # autocast(enabled=False) only switches off its own device type (AMP053).
            disabled_devices.add(region.spec.device or "*")
            continue
        if "*" in disabled_devices or region.spec.device in disabled_devices:
            return None
        if region.spec.device is None and disabled_devices:
            return None
        return region
    return None


@dataclass(eq=False)
class CallSite:
    """Any call in the file, with the name it resolves to and where it sits (for rules about torch ops)."""

    call: cst.Call
    qualified_name: Optional[str]  # "torch.nn.functional.binary_cross_entropy"; None when not imported
    func: Optional[str]  # the dotted callee as written ("F.binary_cross_entropy", "x.half"), None if not dotted
    statement: Statement
    small_statement: Optional[cst.BaseSmallStatement]
    scope: Scope
    loops: Tuple[Loop, ...]
    branches: Tuple[Branch, ...]
    regions: Tuple[AutocastRegion, ...]
    index: int  # events with a larger index come after this call
    order: int = 0  # source order among call and assignment sites

    @property
    def method(self) -> Optional[str]:
        """`x.half()` -> "half"; None for a call of a plain name or an expression."""
        return self.call.func.attr.value if isinstance(self.call.func, cst.Attribute) else None

    @property
    def receiver(self) -> Optional[cst.BaseExpression]:
        return self.call.func.value if isinstance(self.call.func, cst.Attribute) else None

    def in_enabled_autocast(self) -> Optional[AutocastRegion]:
        return enabled_region(self.regions)


@dataclass(eq=False)
class AssignmentSite:
    """`target = value` (also annotated assignments), with where it sits."""

    target: str  # dotted: "loss", "self.model"
    value: cst.BaseExpression
    statement: Optional[Statement]
    scope: Scope
    loops: Tuple[Loop, ...]
    branches: Tuple[Branch, ...]
    regions: Tuple[AutocastRegion, ...]
    index: int  # events with a larger index come after this assignment
    order: int = 0  # source order among call and assignment sites

    def in_enabled_autocast(self) -> Optional[AutocastRegion]:
        return enabled_region(self.regions)


@dataclass(eq=False)
class FileModel:
    module: cst.Module
    scopes: List[Scope]
    events: List[Event]
    regions: List[AutocastRegion]
    scalers: Dict[str, List[ScalerBinding]]  # by key; self.* keys are prefixed with the class name
    optimizer_keys: set
    deprecated_uses: List[DeprecatedUse]
    functions: Dict[str, List[cst.FunctionDef]]  # by bare name
    classes: Dict[str, cst.ClassDef]
    imports: List[Tuple[Union[cst.Import, cst.ImportFrom], "Scope"]]
    module_names: NameTable
    # References to a name bound to the torch.cuda.amp / torch.cpu.amp module, other than deprecated uses.
    amp_module_refs: List[Tuple[cst.Name, "Scope"]] = field(default_factory=list)
    steps: List[TrainingStep] = field(default_factory=list)
    scaler_call_sites: List[Tuple[cst.Call, str, Scope, Tuple[Loop, ...], Statement]] = field(default_factory=list)
    autocast_calls: List[Tuple[cst.Call, str, Scope]] = field(default_factory=list)
    call_sites: List[CallSite] = field(default_factory=list)  # every call, in source order
    assignment_sites: List[AssignmentSite] = field(default_factory=list)  # in source order
    parents: Dict[int, cst.CSTNode] = field(default_factory=dict, repr=False)  # node id -> the node above it
    # `accelerator.backward(loss)` and other frameworks' backward wrappers (not in `events`: they scale and
    # step on the user's behalf, so the protocol rules ignore them; AMP001 does not).
    wrapper_backwards: List[Event] = field(default_factory=list)
    _blocks: Optional[Dict[int, Sequence[cst.BaseStatement]]] = field(default=None, repr=False)
    _scopes_by_name: Optional[Dict[str, List["Scope"]]] = field(default=None, repr=False)
    _scope_by_node: Optional[Dict[int, "Scope"]] = field(default=None, repr=False)

    # --- scalers ---
    def scaler_bindings(self, key: str, scope: Scope) -> List[ScalerBinding]:
        if key.startswith("self.") and scope.class_name:
            return self.scalers.get(f"{scope.class_name}.{key}", [])
        bindings: List[ScalerBinding] = []
        for outer in scope.chain():
            bindings = [b for b in self.scalers.get(key, []) if b.scope is outer]
            if bindings:
                return bindings
        return []

    def scaler_enabled(self, key: str, scope: Scope) -> bool:
        """False only when every construction of the scaler passes a literal enabled=False."""
        bindings = [b for b in self.scaler_bindings(key, scope) if b.call is not None]
        return not bindings or any(b.is_enabled for b in bindings)

    def has_scaler_in_reach(self, scope: Scope) -> bool:
        """Is any enabled (or run-time enabled) scaler bound in this function, its class or the module?"""
        for key, bindings in self.scalers.items():
            for binding in bindings:
                if not binding.is_enabled:
                    continue
                if binding.scope is not None and (binding.scope in set(scope.chain())):
                    return True
                if scope.class_name and key.startswith(scope.class_name + "."):
                    return True
        for outer in scope.chain():
            for param, annotation in outer.params.items():
                if _SCALER_NAME.search(param) or (annotation is not None and "Scaler" in code_of(annotation)):
                    return True
        return any(e.kind in _SCALER_KINDS for e in self.events if e.scope in set(scope.chain()))

    def block_of(self, statement: cst.CSTNode) -> Optional[Sequence[cst.BaseStatement]]:
        """The statements of the block (module or indented body) that holds `statement`, itself included."""
        if self._blocks is None:
            blocks: Dict[int, Sequence[cst.BaseStatement]] = {}
            stack: List[cst.CSTNode] = [self.module]
            while stack:
                node = stack.pop()
                if isinstance(node, (cst.Module, cst.IndentedBlock)):
                    for child in node.body:
                        blocks[id(child)] = node.body
                if isinstance(node, (cst.BaseExpression, cst.SimpleStatementLine)):
                    continue  # no statement blocks inside
                stack.extend(node.children)
            self._blocks = blocks
        return self._blocks.get(id(statement))

    def is_optimizer(self, key: str) -> bool:
        """Built from a torch.optim class, stepped through a scaler, or named like an optimizer."""
        return _ModelBuilder._is_optimizer(key, self)

    def is_scaler(self, key: str, scope: Scope) -> bool:
        """Bound to a GradScaler call, annotated as one, or named like one (and not built from something else)."""
        return _ModelBuilder._is_scaler(key, scope, self)

    def functions_named(self, name: str) -> List[cst.FunctionDef]:
        return self.functions.get(name, [])

    def scope_of(self, node: cst.FunctionDef) -> Optional[Scope]:
        if self._scope_by_node is None:
            self._scope_by_node = {id(scope.node): scope for scope in self.scopes}
        return self._scope_by_node.get(id(node))


_SCALER_KINDS = frozenset(
    {EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE, EventKind.SCALER_SCALE}
)


# --- the builder -------------------------------------------------------------------------------------


@dataclass(eq=False)
class _RawCall:
    """A method call collected during the walk, classified once every binding in the file is known."""

    call: cst.Call
    receiver: str
    method: str
    statement: Statement
    small_statement: Optional[cst.BaseSmallStatement]
    scope: Scope
    loops: Tuple[Loop, ...]
    branches: Tuple[Branch, ...]
    regions: Tuple[AutocastRegion, ...]
    index: int
    flow_statement: Optional[cst.CSTNode] = None


class _ModelBuilder(Walker):
    def __init__(self, module: cst.Module) -> None:
        super().__init__()
        self.module = module
        self.module_scope = Scope(node=module, name="", parent=None)
        self.scopes: List[Scope] = [self.module_scope]
        self.scope_stack: List[Scope] = [self.module_scope]
        self.class_stack: List[str] = []
        self.statement_stack: List[Statement] = []
        self.flow_stack: List[cst.CSTNode] = []  # statements and one-line suites: the flow graph's nodes
        self.small_statement: Optional[cst.BaseSmallStatement] = None
        self.loop_stack: List[List[Loop]] = [[]]  # per scope
        self.branch_stack: List[List[Branch]] = [[]]
        self.region_stack: List[List[AutocastRegion]] = [[]]
        self.events: List[Event] = []
        self.wrapper_backwards: List[Event] = []
        self.raw_calls: List[_RawCall] = []
        self.regions: List[AutocastRegion] = []
        self.autocast_bindings: Dict[Tuple[int, str], AutocastBinding] = {}
        self.scalers: Dict[str, List[ScalerBinding]] = {}
        self.optimizer_keys: set = set()
        self.deprecated_uses: List[DeprecatedUse] = []
        self.functions: Dict[str, List[cst.FunctionDef]] = {}
        self.classes: Dict[str, cst.ClassDef] = {}
        self.imports: List[Tuple[Union[cst.Import, cst.ImportFrom], Scope]] = []
        self.amp_module_refs: List[Tuple[cst.Name, Scope]] = []
        self.deprecated_value_refs: List[Tuple[cst.Name, Scope]] = []
        self.counter = 0
        self.consumed_scale_calls: set = set()
        self.scale_calls: List[Tuple[cst.Call, str, _RawCall]] = []
        self.with_regions: Dict[cst.With, List[AutocastRegion]] = {}
        self.scaler_call_sites: list = []
        self.autocast_calls: list = []
        self.call_sites: List[CallSite] = []
        self.assignment_sites: List[AssignmentSite] = []
        self.decorator_nodes: Dict[cst.CSTNode, cst.Decorator] = {}
        self.skip_reference: set = set()
        # Expressions whose value is a callable that will be called later (assigned, or given to partial).
        self.factory_positions: set = set()
        self.block_depths: List[int] = []
        self.parameter_names: List[frozenset] = []  # per enclosing for-loop: names bound to parameters
        self._prepare_module_names()

    # --- names ---
    def _prepare_module_names(self) -> None:
        """Module-level imports and definitions, known before any function body is read."""
        table = self.module_scope.names
        definitions = set()
        for statement in self._top_level_statements(self.module.body):
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Import):
                        table.bind_import(small)
                    elif isinstance(small, cst.ImportFrom):
                        table.bind_import_from(small)
        for statement in self.module.body:  # unconditional definitions hide an import of the same name
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                definitions.add(statement.name.value)
        for name in definitions:
            table.imported.pop(name, None)
            table.bind_local(name)

    def _top_level_statements(self, body: Sequence[cst.CSTNode]) -> Iterator[cst.CSTNode]:
        for statement in body:
            yield statement
            if isinstance(statement, cst.Try):
                yield from self._top_level_statements(statement.body.body)
                for handler in statement.handlers:
                    yield from self._top_level_statements(handler.body.body)
                if statement.orelse:
                    yield from self._top_level_statements(statement.orelse.body.body)
            elif isinstance(statement, cst.If):
                yield from self._top_level_statements(statement.body.body)
                orelse = statement.orelse
                while orelse is not None:
                    yield from self._top_level_statements(orelse.body.body)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None

    @property
    def scope(self) -> Scope:
        return self.scope_stack[-1]

    def qualify(self, node: cst.BaseExpression) -> Optional[str]:
        return self.scope.names.qualify(node)

    # --- scopes ---
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.setdefault(node.name.value, node)
        self.scope.names.bind_local(node.name.value)
        self.class_stack.append(node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        parent = self.scope
        self.functions.setdefault(node.name.value, []).append(node)
        if parent.is_function or not self.class_stack:
            parent.names.bind_local(node.name.value)
        class_name = self.class_stack[-1] if self.class_stack else None
        prefix = class_name if class_name else (parent.name if parent.name else "")
        scope = Scope(
            node=node,
            name=f"{prefix}.{node.name.value}" if prefix else node.name.value,
            parent=parent,
            class_name=class_name if not parent.is_function else parent.class_name,
            names=NameTable(parent.names),
        )
        for param in self._parameters(node.params):
            scope.params[param.name.value] = param.annotation.annotation if param.annotation is not None else None
            scope.names.bind_local(param.name.value)
        # Decorators run in the enclosing scope.
        for decorator in node.decorators:
            self.decorator_nodes[decorator.decorator] = decorator
        region = self._decorator_region(node)
        self.scopes.append(scope)
        self.scope_stack.append(scope)
        self.loop_stack.append([])
        self.branch_stack.append([])
        self.region_stack.append([])
        if region is not None:
            region.scope = scope
            scope.decorator_region = region
            scope.regions.append(region)
            self.regions.append(region)
            self.region_stack[-1].append(region)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope_stack.pop()
        self.loop_stack.pop()
        self.branch_stack.pop()
        self.region_stack.pop()

    @staticmethod
    def _parameters(params: cst.Parameters) -> Iterator[cst.Param]:
        yield from params.posonly_params
        yield from params.params
        yield from params.kwonly_params
        if isinstance(params.star_arg, cst.Param):
            yield params.star_arg
        if params.star_kwarg is not None:
            yield params.star_kwarg

    def _decorator_region(self, node: cst.FunctionDef) -> Optional[AutocastRegion]:
        for decorator in node.decorators:
            expr = decorator.decorator
            call = expr if isinstance(expr, cst.Call) else None
            qualified = self.qualify(call.func if call else expr)
            if qualified in names.AUTOCAST:
                return AutocastRegion(node=node, spec=autocast_spec(qualified, call))
        return None

    # --- statements, blocks, branches, loops ---
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statement_stack.append(node)
        self.flow_stack.append(node)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self.statement_stack.pop()
        self.flow_stack.pop()

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self.flow_stack.append(node)

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite) -> None:
        self.flow_stack.pop()

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.flow_stack.append(node)

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self.flow_stack.pop()

    def _enter_compound(self, node: Statement) -> None:
        self.statement_stack.append(node)
        self.flow_stack.append(node)

    def _leave_compound(self) -> None:
        self.statement_stack.pop()
        self.flow_stack.pop()

    def visit_Expr(self, node: cst.Expr) -> None:
        self.small_statement = node

    def visit_Assign(self, node: cst.Assign) -> None:
        self.small_statement = node
        self._note_factory_positions(node.value)
        for target in node.targets:
            self._record_assignment(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.small_statement = node
        if node.value is not None:
            self._record_assignment(node.target, node.value)
        key = dotted_name(node.target)
        if key is not None and "Scaler" in code_of(node.annotation.annotation):
            self._add_scaler(key, ScalerBinding(key=key, enabled=None), from_annotation=True)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.small_statement = node
        # `p.grad /= n` rescales linearly: whatever the scale, it does not read the values (issue 14, fairseq).
        if isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign)) and _is_grad(node.target):
            self.skip_reference.add(node.target)

    def visit_Return(self, node: cst.Return) -> None:
        self.small_statement = node
        if node.value is not None:
            self._note_factory_positions(node.value)

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.append((node, self.scope))
        if self.scope.is_function:
            self.scope.names.bind_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.append((node, self.scope))
        if self.scope.is_function:
            self.scope.names.bind_import_from(node)

    def visit_If(self, node: cst.If) -> None:
        self._enter_compound(node)

    def leave_If(self, original_node: cst.If) -> None:
        self._leave_compound()
        if original_node.orelse is None and _ends_in_jump(original_node.body):
            # `if critic_phase: ...; continue` - the rest of the block is the else branch of that `if`.
            self.branch_stack[-1].append(Branch(node=original_node, taken=False))

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.block_depths.append(len(self.branch_stack[-1]))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        depth = self.block_depths.pop()
        del self.branch_stack[-1][depth:]

    def _push_branch(self, node: cst.If, taken: bool) -> None:
        self.branch_stack[-1].append(Branch(node=node, taken=taken))

    def visit_If_body(self, node: cst.If) -> None:
        self._push_branch(node, True)

    def leave_If_body(self, node: cst.If) -> None:
        self.branch_stack[-1].pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self._push_branch(node, False)

    def leave_If_orelse(self, node: cst.If) -> None:
        self.branch_stack[-1].pop()

    def visit_For(self, node: cst.For) -> None:
        self._enter_compound(node)

    def leave_For(self, original_node: cst.For) -> None:
        self._leave_compound()

    def visit_For_body(self, node: cst.For) -> None:
        self.loop_stack[-1].append(node)
        self.parameter_names.append(_parameter_loop_names(node))

    def leave_For_body(self, node: cst.For) -> None:
        self.loop_stack[-1].pop()
        self.parameter_names.pop()

    def visit_Comparison(self, node: cst.Comparison) -> None:
        # `p.grad is not None` asks whether there is a gradient; it does not read its value.
        if any(isinstance(c.comparator, cst.Name) and c.comparator.value == "None" for c in node.comparisons):
            self.skip_reference.add(node.left)

    def visit_While(self, node: cst.While) -> None:
        self._enter_compound(node)

    def leave_While(self, original_node: cst.While) -> None:
        self._leave_compound()

    def visit_While_body(self, node: cst.While) -> None:
        self.loop_stack[-1].append(node)

    def leave_While_body(self, node: cst.While) -> None:
        self.loop_stack[-1].pop()

    def visit_Try(self, node: cst.Try) -> None:
        self._enter_compound(node)

    def leave_Try(self, original_node: cst.Try) -> None:
        self._leave_compound()

    def visit_With(self, node: cst.With) -> None:
        self._enter_compound(node)
        regions = []
        for item in node.items:
            spec = self._autocast_of_with_item(item.item)
            if spec is not None:
                region = AutocastRegion(node=node, spec=spec, item=item, scope=self.scope, loops=tuple(self.loop_stack[-1]))
                regions.append(region)
        self.with_regions[node] = regions

    def visit_With_body(self, node: cst.With) -> None:
        for region in self.with_regions.get(node, []):
            stack = self.region_stack[-1]
            region.parent = stack[-1] if stack else None
            stack.append(region)
            self.scope.regions.append(region)
            self.regions.append(region)

    def leave_With_body(self, node: cst.With) -> None:
        for _ in self.with_regions.get(node, []):
            self.region_stack[-1].pop()

    def leave_With(self, original_node: cst.With) -> None:
        self._leave_compound()

    def _autocast_of_with_item(self, expr: cst.BaseExpression) -> Optional[AutocastSpec]:
        if isinstance(expr, cst.Call):
            qualified = self.qualify(expr.func)
            if qualified in names.AUTOCAST:
                return autocast_spec(qualified, expr)
            binding = self._autocast_binding(expr.func)
            if binding is not None and binding.is_factory:
                return autocast_spec(binding.qualified_name, expr, binding.partial_args)
            return None
        binding = self._autocast_binding(expr)
        if binding is not None and not binding.is_factory:
            return autocast_spec(binding.qualified_name, binding.call)
        return None

    def _autocast_binding(self, expr: cst.BaseExpression) -> Optional[AutocastBinding]:
        key = dotted_name(expr)
        if key is None:
            return None
        for scope in self.scope.chain():
            binding = self.autocast_bindings.get((id(scope), key))
            if binding is not None:
                return binding
        if key.startswith("self.") and self.scope.class_name:
            return self.autocast_bindings.get((0, f"{self.scope.class_name}.{key}"))
        return None

    # --- assignments: scalers, optimizers, autocast contexts, scaled losses, constants ---
    def _binding_key(self, key: str) -> Tuple[int, str]:
        if key.startswith("self.") and self.scope.class_name:
            return (0, f"{self.scope.class_name}.{key}")
        return (id(self.scope), key)

    def _record_assignment(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        key = dotted_name(target)
        if key is None:
            return
        statement = self.statement_stack[-1] if self.statement_stack else None
        self.scope.assignments.setdefault(key, []).append((value, statement))
        self.assignment_sites.append(
            AssignmentSite(
                key,
                value,
                statement,
                self.scope,
                tuple(self.loop_stack[-1]),
                tuple(self.branch_stack[-1]),
                tuple(self.region_stack[-1]),
                self.counter,
                len(self.call_sites) + len(self.assignment_sites),
            )
        )
        if "." not in key:
            self.scope.names.bind_local(key)
        for candidate in self._alternatives(value):
            if isinstance(candidate, cst.Call):
                qualified = self.qualify(candidate.func)
                if qualified in names.GRAD_SCALER:
                    enabled_arg = _argument(candidate, 4 if qualified in names.IMPLIED_DEVICE else 5, "enabled")
                    enabled = True if enabled_arg is None else _literal_bool(enabled_arg.value)
                    self._add_scaler(
                        key,
                        ScalerBinding(
                            key=key,
                            call=candidate,
                            qualified_name=qualified,
                            enabled=enabled,
                            maybe_none=candidate is not value,
                            statement=statement,
                            scope=self.scope,
                            loops=tuple(self.loop_stack[-1]),
                        ),
                    )
                elif qualified is not None and names.is_optimizer_class(qualified):
                    self.optimizer_keys.add(key)
                elif qualified in names.AUTOCAST:
                    self.autocast_bindings[self._binding_key(key)] = AutocastBinding(qualified, candidate, False)
                elif qualified in ("functools.partial",) and candidate.args:
                    inner = self.qualify(candidate.args[0].value)
                    if inner in names.AUTOCAST:
                        self.autocast_bindings[self._binding_key(key)] = AutocastBinding(
                            inner, candidate, True, tuple(candidate.args[1:])
                        )
            else:
                qualified = self.qualify(candidate)
                if qualified in names.AUTOCAST:
                    self.autocast_bindings[self._binding_key(key)] = AutocastBinding(qualified, None, True)

    @staticmethod
    def _alternatives(value: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
        """`a if c else b` may be either side; `(x)` is x.

        A loop, not recursion: nested generators would cost the square of a long `a or b or ...` chain.
        """
        pending = [value]
        while pending:
            node = pending.pop()
            if isinstance(node, cst.IfExp):
                pending += (node.orelse, node.body)
            elif isinstance(node, cst.BooleanOperation):
                pending += (node.right, node.left)
            else:
                yield node

    def _note_factory_positions(self, value: cst.BaseExpression) -> None:
        """`amp_cm = torch.cuda.amp.autocast if amp else nullcontext`: a reference that will be called."""
        for candidate in self._alternatives(value):
            if isinstance(candidate, (cst.Name, cst.Attribute)):
                self.factory_positions.add(candidate)

    def _add_scaler(self, key: str, binding: ScalerBinding, from_annotation: bool = False) -> None:
        binding.scope = binding.scope or self.scope
        stored = f"{self.scope.class_name}.{key}" if key.startswith("self.") and self.scope.class_name else key
        self.scalers.setdefault(stored, []).append(binding)

    # --- calls ---
    def _context(self):
        statement = self.statement_stack[-1] if self.statement_stack else self.module
        return (
            statement,
            self.small_statement if self.statement_stack and isinstance(statement, cst.SimpleStatementLine) else None,
            self.scope,
            tuple(self.loop_stack[-1]),
            tuple(self.branch_stack[-1]),
            tuple(self.region_stack[-1]),
        )

    def _add_event(self, kind: EventKind, call: cst.Call, **fields) -> Event:
        statement, small, scope, loops, branches, regions = self._context()
        self.counter += 1
        event = Event(
            kind=kind,
            call=call,
            statement=statement,
            small_statement=small,
            scope=scope,
            loops=loops,
            branches=branches,
            regions=regions,
            index=self.counter,
            flow_statement=self.flow_stack[-1] if self.flow_stack else None,
            **fields,
        )
        scope.events.append(event)
        self.events.append(event)
        return event

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value in ("isinstance", "issubclass"):
            for arg in node.args[1:]:  # a type check constructs nothing deprecated
                for candidate in self._alternatives(arg.value):
                    elements = candidate.elements if isinstance(candidate, cst.Tuple) else [candidate]
                    for element in elements:
                        self.skip_reference.add(getattr(element, "value", element))
        qualified = self.qualify(func)
        self._skip_scale_independent_grad_use(node, func, qualified)
        statement, small, scope, loops, branches, regions = self._context()
        self.call_sites.append(
            CallSite(
                node,
                qualified,
                dotted_name(func),
                statement,
                small,
                scope,
                loops,
                branches,
                regions,
                self.counter,
                len(self.call_sites) + len(self.assignment_sites),
            )
        )
        if qualified == "functools.partial" and node.args:
            self.factory_positions.add(node.args[0].value)
        if qualified is not None:
            if qualified in names.DEPRECATED_AMP:
                self._add_deprecated(func, qualified, node)
            if qualified in names.AUTOCAST:
                self.autocast_calls.append((node, qualified, self.scope))
            elif qualified in names.GRAD_SCALER:
                statement, _, scope, loops, _, _ = self._context()
                self.scaler_call_sites.append((node, qualified, scope, loops, statement))
            elif qualified in names.CLIP_GRAD:
                self._add_event(EventKind.CLIP, node, target=qualified)
                return
            elif qualified in names.AUTOGRAD_BACKWARD or qualified in names.AUTOGRAD_GRAD:
                kind = EventKind.BACKWARD if qualified in names.AUTOGRAD_BACKWARD else EventKind.AUTOGRAD_GRAD
                loss = _argument(node, 0, "tensors" if kind is EventKind.BACKWARD else "outputs")
                self._add_backward(kind, node, loss.value if loss else None)
                return
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "backward" and not (isinstance(func.value, cst.Name) and func.value.value == "self"):
                self._maybe_backward(node, func.value)
                return
            receiver = dotted_name(func.value)
            if receiver is not None and method in ("step", "update", "unscale_", "scale", "zero_grad"):
                statement, small, scope, loops, branches, regions = self._context()
                self.counter += 1
                self.raw_calls.append(
                    _RawCall(
                        node,
                        receiver,
                        method,
                        statement,
                        small,
                        scope,
                        loops,
                        branches,
                        regions,
                        self.counter,
                        self.flow_stack[-1] if self.flow_stack else None,
                    )
                )
                return
            if "unscale" in method:
                self._add_event(EventKind.CALL, node, target=dotted_name(func) or method)
                return
            if receiver == "self":
                self._add_event(EventKind.CALL, node, target=f"self.{method}")
            elif receiver is not None and _followed(f"{receiver}.{method}"):
                # `helpers.clip(model)`, `self.callback.on_after_backward()`: a function of another module
                # that a project index can summarise (only with one: `scaler_flow.FOLLOWED_CALLS`).
                self._add_event(EventKind.CALL, node, target=f"{receiver}.{method}")
        elif isinstance(func, cst.Name):
            self._add_event(EventKind.CALL, node, target=func.value)

    def _skip_scale_independent_grad_use(self, call: cst.Call, func: cst.BaseExpression, qualified: Optional[str]) -> None:
        """`p.grad.isnan()`, `torch.isfinite(p.grad)`, `p.grad.div_(n)`: true whatever the scale (torch's
        own distributed_test.py checks `p.grad.isnan().any()` right after a scaled backward)."""
        if isinstance(func, cst.Attribute) and func.attr.value in _SCALE_INDEPENDENT_METHODS:
            inner = func.value
            if isinstance(inner, cst.Attribute) and inner.attr.value == "data":
                inner = inner.value
            if _is_grad(inner):
                self.skip_reference.add(inner)
        if qualified in _SCALE_INDEPENDENT_FUNCTIONS and call.args and _is_grad(call.args[0].value):
            self.skip_reference.add(call.args[0].value)

    def _maybe_backward(self, call: cst.Call, receiver: cst.BaseExpression) -> None:
        """`loss.backward()` is a backward site; `accelerator.backward(loss)` is a framework's wrapper."""
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
            if receiver.func.attr.value == "scale" and receiver.args:
                scaler = dotted_name(receiver.func.value)
                if scaler is not None:
                    self.consumed_scale_calls.add(receiver)
                    self._add_backward(EventKind.BACKWARD, call, receiver.args[0].value, scaler, receiver)
                    return
        key = dotted_name(receiver)
        positional = [a for a in call.args if a.keyword is None]
        if key is not None:
            last = key.split(".")[-1]
            if _WRAPPER_RECEIVER.search(last) and "loss" not in last.lower():
                if positional and last != "self":
                    self._add_wrapper_backward(call, positional[0].value)
                return
            if positional and "loss" not in last.lower():
                # Tensor.backward's first parameter is `gradient`; `x.backward(loss)` is someone's wrapper.
                return
        elif positional:
            return
        self._add_backward(EventKind.BACKWARD, call, receiver)

    def _add_wrapper_backward(self, call: cst.Call, loss: cst.BaseExpression) -> None:
        """`accelerator.backward(loss)`: the framework scales and steps, but it is still a backward pass."""
        statement, small, scope, loops, branches, regions = self._context()
        self.counter += 1
        self.wrapper_backwards.append(
            Event(
                kind=EventKind.BACKWARD,
                call=call,
                statement=statement,
                small_statement=small,
                scope=scope,
                loops=loops,
                branches=branches,
                regions=regions,
                index=self.counter,
                loss=loss,
                target=code_of(loss),
                flow_statement=self.flow_stack[-1] if self.flow_stack else None,
            )
        )

    def _add_backward(
        self,
        kind: EventKind,
        call: cst.Call,
        loss: Optional[cst.BaseExpression],
        scaler: Optional[str] = None,
        scale_call: Optional[cst.Call] = None,
    ) -> None:
        # `loss.mean().backward()` and `cast(Tensor, scaler.scale(loss)).backward()` backpropagate the
        # same (scaled or not) tensor as `loss` / `scaler.scale(loss)` (issue 14: alf, ignite).
        core = self._tensor_source(loss) if loss is not None else None
        if scaler is None and isinstance(core, cst.Call) and isinstance(core.func, cst.Attribute):
            if core.func.attr.value == "scale" and core.args:
                scaler = dotted_name(core.func.value)
                scale_call = core
                self.consumed_scale_calls.add(core)
        target = code_of(loss) if loss is not None else None
        if scaler is None and scale_call is None and core is not None:
            key = dotted_name(core)
            if key is not None:
                # `scaled = scaler.scale(loss)` earlier in the scope: the backward runs on the scaled loss.
                for value, _ in self.scope.assignments.get(key, []):
                    for candidate in self._alternatives(value):
                        if (
                            isinstance(candidate, cst.Call)
                            and isinstance(candidate.func, cst.Attribute)
                            and candidate.func.attr.value == "scale"
                        ):
                            scaler = dotted_name(candidate.func.value)
                            scale_call = candidate
                            self.consumed_scale_calls.add(candidate)
        self._add_event(kind, call, target=target, scaled_by=scaler, scale_call=scale_call, loss=loss)

    def _tensor_source(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        """The tensor an expression passes on unchanged in scale: `x.mean()`, `x.sum()`, `cast(T, x)`, `(x)`."""
        for _ in range(8):
            if isinstance(expr, cst.Call):
                func = expr.func
                if isinstance(func, cst.Attribute) and func.attr.value in _SCALE_PRESERVING_METHODS:
                    expr = func.value
                    continue
                if len(expr.args) == 2 and (
                    self.qualify(func) == "typing.cast" or (isinstance(func, cst.Name) and func.value == "cast")
                ):
                    expr = expr.args[1].value
                    continue
            break
        return expr

    def _add_deprecated(self, func: cst.BaseExpression, qualified: str, call: Optional[cst.Call]) -> None:
        self.skip_reference.add(func)
        decorator = self.decorator_nodes.get(call) if call is not None else None
        self.deprecated_uses.append(DeprecatedUse(func, qualified, call, decorator, self.scope))

    def visit_Decorator(self, node: cst.Decorator) -> None:
        expr = node.decorator
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = self.qualify(expr)
            if qualified in names.DEPRECATED_AMP:
                self.skip_reference.add(expr)
                self.deprecated_uses.append(DeprecatedUse(expr, qualified, None, node, self.scope))
        elif isinstance(expr, cst.Call):
            self.decorator_nodes[expr] = node

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        if node.attr.value == "grad" and isinstance(node.value, cst.Name) and node not in self.skip_reference:
            if any(node.value.value in names_ for names_ in self.parameter_names):
                self._add_event(EventKind.GRAD_READ, node, target=node.value.value)
        # A deprecated API used without being called (`partial(torch.cuda.amp.autocast, ...)`).
        if node in self.skip_reference:
            return False
        qualified = self.qualify(node)
        if qualified in names.DEPRECATED_AMP:
            # Only what runs the deprecated code: calls (recorded in visit_Call), decorators, and factories.
            # A type used as a dict key, in isinstance or in an annotation warns about nothing.
            if node in self.factory_positions:
                self.deprecated_uses.append(DeprecatedUse(node, qualified, None, None, self.scope))
            return False
        return None

    def visit_Name(self, node: cst.Name) -> None:
        if node in self.skip_reference:
            return
        resolved = self.scope.names.lookup(node.value)
        if resolved is None:
            return
        if resolved in names.DEPRECATED_AMP:
            if node in self.factory_positions:
                self.deprecated_uses.append(DeprecatedUse(node, resolved, None, None, self.scope))
            else:
                # Still a use of the import (a fix rewriting the import must not break it).
                self.deprecated_value_refs.append((node, self.scope))
        elif resolved in names.DEPRECATED_AMP_MODULES:
            self.amp_module_refs.append((node, self.scope))

    def visit_Annotation(self, node: cst.Annotation) -> bool:
        return False  # `-> torch.cuda.amp.GradScaler` names a type; nothing deprecated runs

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False  # names in import statements are bindings, not uses

    def visit_Param(self, node: cst.Param) -> None:
        self.skip_reference.add(node.name)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.skip_reference.add(node.keyword)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self.skip_reference.add(node.target)

    def visit_FunctionDef_name(self, node: cst.FunctionDef) -> None:
        self.skip_reference.add(node.name)

    def visit_ClassDef_name(self, node: cst.ClassDef) -> None:
        self.skip_reference.add(node.name)

    def visit_Attribute_attr(self, node: cst.Attribute) -> None:
        self.skip_reference.add(node.attr)

    # --- after the walk ---
    def finish(self) -> FileModel:
        model = FileModel(
            module=self.module,
            scopes=self.scopes,
            events=self.events,
            regions=self.regions,
            scalers=self.scalers,
            optimizer_keys=self.optimizer_keys,
            deprecated_uses=self.deprecated_uses,
            functions=self.functions,
            classes=self.classes,
            imports=self.imports,
            module_names=self.module_scope.names,
            amp_module_refs=self.amp_module_refs + self.deprecated_value_refs,
            scaler_call_sites=self.scaler_call_sites,
            autocast_calls=self.autocast_calls,
            call_sites=self.call_sites,
            assignment_sites=self.assignment_sites,
            parents=self.parents,
            wrapper_backwards=self.wrapper_backwards,
        )
        self._propagate_through_calls(model)
        self._classify_raw_calls(model)
        for region in self.regions:
            _resolve_spec(region.spec, region.scope or self.module_scope, self.module_scope)
        for scope in self.scopes:
            scope.events.sort(key=lambda e: e.index)
        model.events.sort(key=lambda e: e.index)
        model.steps = _training_steps(model)
        return model

    def _propagate_through_calls(self, model: FileModel) -> None:
        """A scaler or optimizer passed to a function of this file is one inside it too, whatever its name."""
        for event in [e for e in self.events if e.kind is EventKind.CALL]:
            callee = _callee_scope(model, event)
            if callee is None:
                continue
            for param, argument in _argument_names(callee, event.call).items():
                if self._is_scaler(argument, event.scope, model) and not model.scaler_bindings(param, callee):
                    origin = model.scaler_bindings(argument, event.scope)
                    enabled = None if not origin else (True if any(b.is_enabled for b in origin) else False)
                    model.scalers.setdefault(param, []).append(ScalerBinding(key=param, enabled=enabled, scope=callee))
                elif self._is_optimizer(argument, model):
                    model.optimizer_keys.add(param)

    def _classify_raw_calls(self, model: FileModel) -> None:
        optimizer_args = set()
        for raw in self.raw_calls:
            if raw.method in ("step", "unscale_") and self._is_scaler(raw.receiver, raw.scope, model) and raw.call.args:
                key = dotted_name(raw.call.args[0].value)
                if key:
                    optimizer_args.add(key)
        model.optimizer_keys |= optimizer_args
        for raw in self.raw_calls:
            fields = dict(
                statement=raw.statement,
                small_statement=raw.small_statement,
                scope=raw.scope,
                loops=raw.loops,
                branches=raw.branches,
                regions=raw.regions,
                index=raw.index,
                receiver=raw.receiver,
                flow_statement=raw.flow_statement,
            )
            if self._is_scaler(raw.receiver, raw.scope, model):
                if raw.method == "step":
                    target = dotted_name(raw.call.args[0].value) if raw.call.args else None
                    event = Event(kind=EventKind.SCALER_STEP, call=raw.call, target=target, **fields)
                elif raw.method == "update":
                    event = Event(kind=EventKind.SCALER_UPDATE, call=raw.call, **fields)
                elif raw.method == "unscale_":
                    target = dotted_name(raw.call.args[0].value) if raw.call.args else None
                    event = Event(kind=EventKind.SCALER_UNSCALE, call=raw.call, target=target, **fields)
                elif raw.method == "scale":
                    if raw.call in self.consumed_scale_calls:
                        continue
                    event = Event(kind=EventKind.SCALER_SCALE, call=raw.call, **fields)
                else:
                    continue
            elif raw.method == "step" and self._is_optimizer(raw.receiver, model, raw.scope):
                event = Event(kind=EventKind.OPTIMIZER_STEP, call=raw.call, target=raw.receiver, **fields)
            elif raw.method == "zero_grad":
                event = Event(kind=EventKind.ZERO_GRAD, call=raw.call, target=raw.receiver, **fields)
            else:
                continue
            raw.scope.events.append(event)
            model.events.append(event)

    @staticmethod
    def _is_scaler(key: str, scope: Scope, model: FileModel) -> bool:
        bindings = model.scaler_bindings(key, scope)
        if bindings:
            return True
        last = key.split(".")[-1]
        if not _SCALER_NAME.search(last):
            for outer in scope.chain():
                annotation = outer.params.get(key)
                if annotation is not None and "Scaler" in code_of(annotation):
                    return True
            return False
        # Named like a scaler: still not one if the file builds it from something that is not torch's.
        return not _built_by_someone_else(key, scope, model, imports_count=True)

    @staticmethod
    def _is_optimizer(key: str, model: FileModel, scope: Optional[Scope] = None) -> bool:
        if key in model.optimizer_keys:
            return True
        last = key.split(".")[-1]
        if not _OPTIMIZER_NAME.search(last) or _NOT_OPTIMIZER_NAME.search(last):
            return False
        # Third-party optimizers (apex, bitsandbytes) are optimizers; a class of this file named so may not be.
        return scope is None or not _built_by_someone_else(key, scope, model, imports_count=False)


def _built_by_someone_else(key: str, scope: Scope, model: FileModel, imports_count: bool) -> bool:
    """Is `key` assigned from a class this file defines (or, with imports_count, from a non-torch import)?

    `scaler = StandardScaler()`, `ema_optimizer = WeightEMA(...)`, a user's own `class GradScaler`:
    named like the real thing, but not it.
    """
    assignments = []
    for outer in scope.chain():
        assignments.extend((value, outer) for value, _ in outer.assignments.get(key, []))
    if key.startswith("self.") and scope.class_name:
        for other in model.scopes:
            if other.class_name == scope.class_name:
                assignments.extend((value, other) for value, _ in other.assignments.get(key, []))
    for value, where in assignments:
        if not isinstance(value, cst.Call):
            continue
        qualified = where.names.qualify(value.func)
        if imports_count and qualified is not None and not qualified.startswith("torch."):
            return True
        if qualified is None and isinstance(value.func, cst.Name) and value.func.value in model.classes:
            return True
    return False


def _resolve_constant(expr: Optional[cst.BaseExpression], scope: Scope, module_scope: Scope) -> Optional[cst.BaseExpression]:
    """Follow a name to its single assignment in the scope chain (`amp_dtype = torch.float16`)."""
    seen = 0
    while isinstance(expr, cst.Name) and seen < 5:
        seen += 1
        for outer in scope.chain():
            values = outer.assignments.get(expr.value)
            if values:
                if len(values) != 1:
                    return None
                expr = values[0][0]
                break
        else:
            return expr
    return expr


def _device_literal(expr: Optional[cst.BaseExpression], scope: Scope, module_scope: Scope) -> Optional[str]:
    expr = _resolve_constant(expr, scope, module_scope)
    text = _literal_string(expr)
    if text is not None:
        return text
    # device.type where device = torch.device("cuda")
    if isinstance(expr, cst.Attribute) and expr.attr.value == "type":
        inner = _resolve_constant(expr.value, scope, module_scope)
        if isinstance(inner, cst.Call) and scope.names.qualify(inner.func) == "torch.device" and inner.args:
            literal = _literal_string(inner.args[0].value)
            if literal is not None:
                return literal.split(":")[0]
    return None


def _resolve_spec(spec: AutocastSpec, scope: Scope, module_scope: Scope) -> None:
    implied = names.IMPLIED_DEVICE.get(spec.qualified_name)
    spec.device = implied or _device_literal(spec.device_node, scope, module_scope)
    dtype_expr = _resolve_constant(spec.dtype_node, scope, module_scope) if spec.dtype_node is not None else None
    if spec.dtype_node is None:
        device = (spec.device or "").split(":")[0]
        if device in CUDA_LIKE_DEVICES:
            spec.dtype = DType.FP16
        elif device in BF16_DEFAULT_DEVICES:
            spec.dtype = DType.BF16
        else:
            spec.dtype = DType.UNKNOWN
    else:
        qualified = scope.names.qualify(dtype_expr) if dtype_expr is not None else None
        if qualified in names.FLOAT16:
            spec.dtype = DType.FP16
        elif qualified in names.BFLOAT16:
            spec.dtype = DType.BF16
        elif qualified in names.OTHER_FLOAT:
            spec.dtype = DType.OTHER
        else:
            spec.dtype = DType.UNKNOWN
    if spec.enabled_node is not None:
        spec.enabled = _literal_bool(_resolve_constant(spec.enabled_node, scope, module_scope))


def _training_steps(model: FileModel) -> List[TrainingStep]:
    """Group each scope's events, helpers' events included where they are called, into iterations."""
    steps: List[TrainingStep] = []
    for scope in model.scopes:
        if not scope.events:
            continue
        events = _with_helpers_inlined(model, scope, scope.events, depth=0, active={scope})
        anchors = [e for e in events if e.kind in (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD)]
        if not anchors:
            # A function that steps but does not backpropagate (an `optimizer_step()` helper): one iteration.
            if any(e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.OPTIMIZER_STEP) for e in events):
                steps.append(TrainingStep(scope, None, events))
            continue
        loops: List[Optional[Loop]] = []
        steppers = [e for e in events if e.kind in (EventKind.SCALER_STEP, EventKind.OPTIMIZER_STEP)]
        for anchor in anchors:
            loop = anchor.loop
            # A micro-step loop (`for m in range(k): scaler.scale(loss).backward()`) inside the loop that
            # steps is part of that loop's iteration (miles-credit PR #141).
            if loop is not None and steppers and not any(loop in e.loops for e in steppers):
                outer = [l for l in anchor.loops[:-1] if any(l in e.loops for e in steppers)]
                if outer:
                    loop = outer[-1]
            if loop not in loops:
                loops.append(loop)
        # A loop nested in another anchor loop belongs to the outer iteration only if it holds no backward itself.
        for loop in loops:
            if loop is None:
                members = [e for e in events if not _inside_any(e, [l for l in loops if l is not None])]
                if not scope.is_function:
                    members = [e for e in members if not e.loops]
                steps.append(TrainingStep(scope, None, members))
            else:
                inner_loops = [l for l in loops if l is not None and l is not loop]
                members = [
                    e
                    for e in events
                    if loop in e.loops and not any(l in e.loops[e.loops.index(loop) + 1 :] for l in inner_loops)
                ]
                steps.append(TrainingStep(scope, loop, members))
    return steps


_MAX_INLINE_DEPTH = 3


def _followed(target: str) -> bool:
    """Is a dotted call (`mod.func`, `self.attr.method`) one that a summary provider can follow?"""
    if not _FOLLOWED:
        from amp_lint.analysis.scaler_flow import FOLLOWED_CALLS

        _FOLLOWED.append(FOLLOWED_CALLS)
    return any(follows(target) for follows in _FOLLOWED[0]) if _FOLLOWED[0] else False


_FOLLOWED: list = []  # [scaler_flow.FOLLOWED_CALLS], looked up once


def _with_helpers_inlined(model: FileModel, scope: Scope, events: List[Event], depth: int, active: set) -> List[Event]:
    """Put the events of helper functions and methods (of this file) where the iteration calls them.

    Each callee's effect is its `Summary` (`amp_lint.analysis.scaler_flow`): its events, helpers of its
    own included, applied at the call with its parameters renamed to the caller's arguments.
    `self.backward(loss)` then `self.optimizer_step()` become one iteration with the helpers' backward,
    step and update in it. A helper that runs a loop of its own is a training loop, not a step part, and
    is not inlined; recursion is cut off.
    """
    from amp_lint.analysis.scaler_flow import SUMMARIES, Summary

    out: List[Event] = []
    for event in events:
        out.append(event)
        if event.kind is not EventKind.CALL or depth >= _MAX_INLINE_DEPTH:
            continue
        callee = _callee_scope(model, event)
        summary: Optional[Summary] = None
        if callee is not None:
            if callee in active or any(e.loops for e in callee.events):
                continue
            inner = _with_helpers_inlined(model, callee, callee.events, depth + 1, active | {callee})
            params = list(callee.params)
            if callee.class_name and params and params[0] in ("self", "cls"):
                params = params[1:]
            summary = Summary(scope=callee, events=tuple(inner), params=tuple(params))
        else:
            for provider in SUMMARIES:  # functions of other files, from a project index
                summary = provider(model, event)
                if summary is not None:
                    break
        if summary is not None:
            out.extend(summary.applied_at(event, depth, _rebased))
    return out


def _rebased(via: Event, outer: Event) -> Event:
    """Chain an inner call path under the outer call."""
    if via.via is None:
        return dataclasses.replace(via, via=outer)
    return dataclasses.replace(via, via=_rebased(via.via, outer))


def _scopes_named(model: FileModel, name: str) -> List[Scope]:
    """Function scopes by name, indexed once per model (a file can have tens of thousands)."""
    if model._scopes_by_name is None:
        model._scopes_by_name = {}
        for scope in model.scopes:
            if scope.is_function:
                model._scopes_by_name.setdefault(scope.node.name.value, []).append(scope)
    return model._scopes_by_name.get(name, [])


def _callee_scope(model: FileModel, call: Event) -> Optional[Scope]:
    """The function or method of this file that a CALL event calls, when that is unambiguous."""
    target = call.target or ""
    if target.startswith("self."):
        name = target[len("self.") :]
        candidates = [
            s
            for s in _scopes_named(model, name)
            if s.is_function
            and s.node.name.value == name
            and call.scope.class_name is not None
            and s.class_name == call.scope.class_name
            and s.parent is not None
            and not s.parent.is_function
        ]
    elif target and "." not in target:
        visible = set(call.scope.chain())
        candidates = [
            s
            for s in _scopes_named(model, target)
            if s.is_function
            and s.node.name.value == target
            and s.parent in visible
            and (s.parent.is_function or s.class_name is None)
        ]
    else:
        return None
    return candidates[0] if len(candidates) == 1 else None


def _argument_names(callee: Scope, call: cst.Call) -> Dict[str, str]:
    """Callee parameter -> the caller's dotted argument, for plain names and attributes."""
    params = list(callee.params)
    if callee.class_name and params and params[0] in ("self", "cls"):
        params = params[1:]
    mapping: Dict[str, str] = {}
    position = 0
    for arg in call.args:
        if arg.star:
            break
        value = dotted_name(arg.value)
        if arg.keyword is not None:
            if value is not None and arg.keyword.value in callee.params:
                mapping[arg.keyword.value] = value
            continue
        if position < len(params) and value is not None:
            mapping[params[position]] = value
        position += 1
    return mapping


def _renamed(key: Optional[str], names: Dict[str, str]) -> Optional[str]:
    if key is None or not names:
        return key
    head, dot, rest = key.partition(".")
    if head in names:
        return names[head] + dot + rest
    return key


def _parameter_loop_names(loop: cst.For) -> frozenset:
    """`for p in model.parameters():` -> {"p"}; `for name, p in model.named_parameters():` -> {"p"}."""
    iterator = loop.iter
    if not (isinstance(iterator, cst.Call) and isinstance(iterator.func, cst.Attribute)):
        return frozenset()
    if iterator.func.attr.value not in ("parameters", "named_parameters"):
        return frozenset()
    target = loop.target
    if isinstance(target, cst.Tuple) and target.elements:
        target = target.elements[-1].value
    return frozenset({target.value}) if isinstance(target, cst.Name) else frozenset()


# Methods whose result is a tensor scaled exactly as their receiver (a mean of a scaled loss is scaled).
_SCALE_PRESERVING_METHODS = frozenset(
    {"mean", "sum", "float", "half", "double", "to", "squeeze", "view", "reshape", "contiguous", "clone", "type_as"}
)

# Questions about gradients whose answer does not depend on the loss scale, and linear rescales.
_SCALE_INDEPENDENT_METHODS = frozenset({"isnan", "isinf", "isfinite", "isneginf", "isposinf", "div_", "mul_", "zero_"})
_SCALE_INDEPENDENT_FUNCTIONS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "torch.isneginf", "torch.isposinf"})


def _is_grad(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == "grad"


def _ends_in_jump(body: cst.BaseSuite) -> bool:
    """Does the block end with `continue`, `break`, `return` or `raise`?"""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return isinstance(last.body[-1], (cst.Continue, cst.Break, cst.Return, cst.Raise))
    return False


def _inside_any(event: Event, loops: List[Loop]) -> bool:
    return any(loop in event.loops for loop in loops)


def build_model(module: cst.Module) -> FileModel:
    builder = _ModelBuilder(module)
    builder.walk(module)
    return builder.finish()
