"""The model of one file, which every rule reads: its scopes, training steps, scalers and sites.

`FileModel` is what `build_model` returns. Per `Scope` (the module body and every function) it holds
the events (`events`), autocast regions and assignments; `steps` are the iterations (`TrainingStep`);
`scalers` the GradScaler bindings (`ScalerBinding`); `call_sites` and `assignment_sites` every call and
assignment with where it sits (for the rules about torch ops); `deprecated_uses` the references to
`torch.cuda.amp` / `torch.cpu.amp` APIs. `is_scaler` and `is_optimizer` decide which names are a
GradScaler or an optimizer, from how the file builds them and, failing that, from their names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.events import SCALER_KINDS, AutocastRegion, Branch, Event, EventKind, Scope, enabled_region
from amp_lint.analysis.names import GRAD_SCALER, NameTable, declared_type, dotted_name
from amp_lint.analysis.project_hooks import project
from amp_lint.analysis.syntax import Loop, Statement, alternatives, argument, code_of, literal_string, own_nodes

_SCALER_NAME = re.compile(r"(^|_)(grad|loss|amp|gradient)?_?scaler$", re.IGNORECASE)
_OPTIMIZER_NAME = re.compile(
    r"^(opt|optim|optimizer|optimiser)s?([_\dA-Z].*)?$|_(opt|optim|optimizer|optimiser)(_?\d+|_?[a-zA-Z])?$|optimi[sz]er"
)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|scaler|^lr|warmup|option|optional", re.IGNORECASE)


@dataclass(eq=False)
class ScalerBinding:
    """How a scaler name came to be: built from a GradScaler call, a parameter, or only its name."""

    key: str  # "scaler", "self.scaler"
    call: Optional[cst.Call] = None  # the GradScaler(...) call, when the file builds it
    qualified_name: Optional[str] = None
    enabled: Optional[bool] = True  # False: literal enabled=False; None: an expression
    maybe_none: bool = False  # `GradScaler() if amp else None`
    chosen_when: Tuple[Tuple[cst.BaseExpression, bool], ...] = ()  # those conditional values' (test, outcome)
    statement: Optional[Statement] = None
    scope: Optional["Scope"] = None
    loops: Tuple[Loop, ...] = ()  # loops around the construction, in its scope
    branches: Tuple[Branch, ...] = ()  # enclosing ifs within its scope, outermost first (as an Event's)
    factory: Optional[cst.Call] = None  # a project function that returns a GradScaler on every path (`call` is None)

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
        arg = argument(self.call, 0, "device")
        if arg is None:
            return "cuda"
        return literal_string(arg.value)


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
    # Names bound by unpacking a value that is no tuple of the same length (`model, opt = ipex.optimize(...)`):
    # each holds one element of `value`, so none is among `assignment_sites` (whose value is the target's).
    unpacked_sites: List[AssignmentSite] = field(default_factory=list)
    # `p.grad *= f` / `p.grad /= f`: the gradient rescaled in place (`target`, `value`: the factor)
    grad_rescales: List[AssignmentSite] = field(default_factory=list)
    parents: Dict[int, cst.CSTNode] = field(default_factory=dict, repr=False)  # node id -> the node above it
    # `accelerator.backward(loss)` and other frameworks' backward wrappers (not in `events`: they scale and
    # step on the user's behalf, so the protocol rules ignore them; AMP001 does not).
    wrapper_backwards: List[Event] = field(default_factory=list)
    # `with accelerator.autocast():` blocks (`autocast.FRAMEWORK_AUTOCAST`): see `framework_region_of`.
    framework_regions: List[AutocastRegion] = field(default_factory=list)
    _framework_statements: Optional[Dict[int, AutocastRegion]] = field(default=None, repr=False)
    # The flow graphs of scopes and training steps (`scaler_flow.flow_of`), built once per model.
    flows: Dict[Tuple[str, int], object] = field(default_factory=dict, repr=False)
    _blocks: Optional[Dict[int, Sequence[cst.BaseStatement]]] = field(default=None, repr=False)
    _scopes_by_name: Optional[Dict[str, List["Scope"]]] = field(default=None, repr=False)
    _scope_by_node: Optional[Dict[int, "Scope"]] = field(default=None, repr=False)
    _assignments_index: Optional[Dict[Tuple[int, str], List[AssignmentSite]]] = field(default=None, repr=False)
    _calls_by_name: Optional[Dict[str, List[Event]]] = field(default=None, repr=False)

    def release(self) -> None:
        """Break the model's reference cycles once nothing will ask it more (each scope's events point
        back at it; a step's flow caches what rules built from it). Freeing the model is then
        refcounting's work, not the cyclic collector's: on a 462 kB file the collector took 0.13 s to
        find them, scanning the whole tree still alive beside them."""
        for scope in self.scopes:
            scope.events, scope.regions, scope.decorator_region, scope._region_index = [], [], None, None
        for flow in self.flows.values():
            memo = getattr(flow, "memo", None)
            if memo is not None:
                memo.clear()
        self.flows.clear()

    # --- scalers ---
    def assignments_in(self, scope: Scope, target: str) -> List[AssignmentSite]:
        """The assignment sites of `target` in `scope`, in source order (indexed once per model: rules ask
        this per training step, and a file of a thousand steps made a scan per question quadratic)."""
        index = self._assignments_index
        if index is None:
            index = self._assignments_index = {}
            for site in self.assignment_sites:
                index.setdefault((id(site.scope), site.target), []).append(site)
        return index.get((id(scope), target), [])

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
        return any(e.kind in SCALER_KINDS for e in self.events if e.scope in set(scope.chain()))

    def framework_region_of(self, statement: cst.CSTNode) -> Optional[AutocastRegion]:
        """The framework autocast block (`with accelerator.autocast():`) that runs `statement`, innermost
        first; not one around a function defined in it (that runs when called)."""
        if self._framework_statements is None:
            self._framework_statements = {}
            for region in self.framework_regions:  # in source order, outer blocks first: inner ones overwrite
                for node in own_nodes(region.node.body):
                    if isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement)):
                        self._framework_statements[id(node)] = region
        return self._framework_statements.get(id(statement))

    def block_of(self, statement: cst.CSTNode) -> Optional[Sequence[cst.BaseStatement]]:
        """The statements of the block (module or indented body) that holds `statement`, itself included."""
        parent = self.parents.get(id(statement))  # the walk's record: a block holds its statements in `body`
        if parent is not None:
            return parent.body if isinstance(parent, (cst.Module, cst.IndentedBlock)) else None
        if self._blocks is None:  # a node the walk did not reach: map every block once
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
        return is_optimizer(key, self)

    def is_scaler(self, key: str, scope: Scope) -> bool:
        """Bound to a GradScaler call, annotated as one, or named like one (and not built from something else)."""
        return is_scaler(key, scope, self)

    def functions_named(self, name: str) -> List[cst.FunctionDef]:
        return self.functions.get(name, [])

    def scope_of(self, node: cst.FunctionDef) -> Optional[Scope]:
        if self._scope_by_node is None:
            self._scope_by_node = {id(scope.node): scope for scope in self.scopes}
        return self._scope_by_node.get(id(node))

    def calls_named(self, name: str) -> List[Event]:
        """The call events whose callee's last name is `name` (`f(...)`, `self.f(...)`), in source order,
        indexed once per model (a rule asking this per scaler of a dense file scanned every event each time)."""
        if self._calls_by_name is None:
            self._calls_by_name = {}
            for event in self.events:
                if event.kind is EventKind.CALL:
                    self._calls_by_name.setdefault((event.target or "").split(".")[-1], []).append(event)
        return self._calls_by_name.get(name, [])

    def function_scopes_named(self, name: str) -> List[Scope]:
        """Function scopes by name, indexed once per model (a file can have tens of thousands)."""
        if self._scopes_by_name is None:
            self._scopes_by_name = {}
            for scope in self.scopes:
                if scope.is_function:
                    self._scopes_by_name.setdefault(scope.node.name.value, []).append(scope)
        return self._scopes_by_name.get(name, [])


# --- which names are scalers and optimizers -----------------------------------------------------------


def is_scaler(key: str, scope: Scope, model: FileModel) -> bool:
    bindings = model.scaler_bindings(key, scope)
    if bindings:
        return True
    if key == "self" and _in_scaler_subclass(scope, model):
        return True
    if _declared_a_protocol_of_its_own(key, scope, model):
        return False
    last = key.split(".")[-1]
    if not _SCALER_NAME.search(last):
        for outer in scope.chain():
            annotation = outer.params.get(key)
            if annotation is not None and "Scaler" in code_of(annotation):
                return True
        return False
    # Named like a scaler: still not one if the file builds it from something that is not torch's, or a base
    # class in another module of the project does (torch's benchmark runner, `DummyGradScaler`).
    if _built_by_someone_else(key, scope, model, imports_count=True):
        return False
    if key.startswith("self.") and key.count(".") == 1 and scope.class_name:
        answers = project()
        built = answers.built_in_a_base(model, scope, key[len("self."):])
        if built is not None and not answers.derives_from_torch_scaler(built):
            return False
    return True


def known_not_a_scaler(key: str, scope: Scope, model: FileModel) -> bool:
    """Named like a scaler, and proved something else: built from a class that is not torch's (in this file or
    in a base class's module), or declared a class with a protocol of its own. Its `.scale(loss)` is that
    class's business."""
    return bool(_SCALER_NAME.search(key.split(".")[-1])) and not is_scaler(key, scope, model)


def _declared_a_protocol_of_its_own(key: str, scope: Scope, model: FileModel) -> bool:
    """A parameter declared a class of the project that overrides a protocol method (hivemind's `GradScaler`,
    whose `unscale_` does nothing outside a global step): its calls keep that class's meaning, not torch's."""
    for outer in scope.chain():
        if key not in outer.params:
            continue
        annotation = declared_type(outer.params[key], outer.names)  # `Optional[X]`, `X | None`: X
        if annotation is None or "Scaler" not in code_of(annotation):
            return False
        if isinstance(annotation, cst.Name) and annotation.value in model.classes:
            return bool(_overridden_protocol(model.classes[annotation.value]))
        qualified = outer.names.qualify(annotation)
        if qualified is None or qualified.startswith("torch."):
            return False
        return project().project_class_binds(model, qualified, _PROTOCOL_METHODS)
    return False


def _in_scaler_subclass(scope: Scope, model: FileModel) -> bool:
    """`self` in a method of a class whose base is torch's GradScaler (composer's `ClosureGradScaler`): the
    instance is a GradScaler, `self.unscale_(opt)` keeps torch's protocol (issue 26, principle 4)."""
    cls = model.classes.get(scope.class_name or "")
    if cls is None or not any(scope.names.qualify(base.value) in GRAD_SCALER for base in cls.bases):
        return False
    # A protocol method the subclass overrides and also calls on `self` keeps the subclass's meaning, not
    # torch's (an idempotent `unscale_`): then nothing is known about `self`.
    overridden = _overridden_protocol(cls)
    return not any(re.search(rf"\bself\.{re.escape(name)}\(", code_of(cls)) for name in overridden)


_PROTOCOL_METHODS = frozenset({"scale", "unscale_", "step", "update"})


def _overridden_protocol(cls: cst.ClassDef) -> Set[str]:
    """The GradScaler protocol methods a class of the file defines itself."""
    return {s.name.value for s in cls.body.body if isinstance(s, cst.FunctionDef)} & _PROTOCOL_METHODS


def is_optimizer(key: str, model: FileModel, scope: Optional[Scope] = None) -> bool:
    if key in model.optimizer_keys:
        return True
    last = key.split(".")[-1]
    if not _OPTIMIZER_NAME.search(last) or _NOT_OPTIMIZER_NAME.search(last):
        return False
    # Third-party optimizers (apex, bitsandbytes) are optimizers; a class of this file named so may not be.
    return scope is None or not _built_by_someone_else(key, scope, model, imports_count=False)


def _class_family(name: str, model: FileModel) -> Set[str]:
    """`name` with the classes of this file it derives from and that derive from it, transitively."""
    bases = {
        cls: {dotted_name(b.value) for b in node.bases} & set(model.classes) for cls, node in model.classes.items()
    }
    family, changed = {name}, True
    while changed:
        grown = family | {b for cls in family for b in bases.get(cls, ())} | {cls for cls, found in bases.items() if found & family}
        changed, family = grown != family, grown
    return family


def _built_by_someone_else(key: str, scope: Scope, model: FileModel, imports_count: bool) -> bool:
    """Is `key` assigned from a class this file defines (or, with imports_count, from a non-torch import)?

    `scaler = StandardScaler()`, `ema_optimizer = WeightEMA(...)`, a user's own `class GradScaler`:
    named like the real thing, but not it.
    """
    assignments = []
    for outer in scope.chain():
        assignments.extend((value, outer) for value, _ in outer.assignments.get(key, []))
    if key.startswith("self.") and scope.class_name:
        # The same object's attribute: set in this class, or in a base or a subclass of it in this file
        # (fairseq's `_FP16OptimizerMixin` uses `self.scaler`, which `FP16Optimizer(_FP16OptimizerMixin)` builds).
        family = _class_family(scope.class_name, model)
        for other in model.scopes:
            if other.class_name in family:
                assignments.extend((value, other) for value, _ in other.assignments.get(key, []))
    for assigned, where in assignments:
        for value in alternatives(assigned):  # `None if cfg.bf16 else DynamicLossScaler(...)`: either side
            if not isinstance(value, cst.Call):
                continue
            qualified = where.names.qualify(value.func)
            if imports_count and qualified is not None and not qualified.startswith("torch."):
                return True
            if qualified is None and isinstance(value.func, cst.Name) and value.func.value in model.classes:
                return True
    return False
