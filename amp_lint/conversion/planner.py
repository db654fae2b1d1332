"""The fp32 -> AMP conversion (rule AMP100): find plain fp32 training iterations and plan their rewrite.

The rewrite follows the reference's algorithm (rules.md section 6) and emits its canonical patterns
(section 5):

1. the forward slice (the contiguous statements before a backward that compute its loss from a model
   call) is wrapped in `with torch.amp.autocast(<device>, dtype=<dtype>):`;
2. float16 only: every backward is scaled (`scaler.scale(loss).backward()`), `scaler.unscale_(opt)`
   goes right before any gradient clipping or gradient read, every `opt.step()` becomes
   `scaler.step(opt)`, one `scaler.update()` follows the last step (inside the accumulation boundary
   when there is one), and one `scaler = torch.amp.GradScaler(<device>)` is created before the
   outermost loop of the function;
3. a step function (backward and step, no loop: `train_step(...)` called per batch) gets its scaler
   as a new keyword parameter, created once by each caller before the caller's outermost loop.

What the analysis model does not record (which statements assign or read which names, where each
statement sits in its block) is computed here from the CST, once per file.
"""

from __future__ import annotations

import functools

import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from amp_lint.diagnostics import Applicability
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.model import Event, EventKind, FileModel, Scope, TrainingStep, code_of
from amp_lint.analysis.names import dotted_name
from amp_lint.parse.prefilter import MANUAL_UPDATE_METHODS
from amp_lint.analysis.walk import children_in_source_order, visit_read_only
from amp_lint.fixes.types import Fix

FLOAT16 = "float16"
BFLOAT16 = "bfloat16"

Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
Block = Union[cst.IndentedBlock, cst.Module]

_BACKWARDS = (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD)
# Events that end a forward slice: nothing before them belongs to the next loss's forward pass.
_BOUNDARY_KINDS = frozenset(
    {
        EventKind.BACKWARD,
        EventKind.AUTOGRAD_GRAD,
        EventKind.OPTIMIZER_STEP,
        EventKind.CLIP,
        EventKind.SCALER_STEP,
        EventKind.SCALER_UPDATE,
        EventKind.SCALER_UNSCALE,
        EventKind.SCALER_SCALE,
    }
)

_SCALER_NAMES = ("scaler", "grad_scaler", "amp_scaler", "gradient_scaler", "loss_scaler")
_LOSS_NAMES = ("loss", "amp_loss", "train_loss", "step_loss")

# Names that look like networks or loss modules when the file does not say so otherwise.
_MODULE_LIKE = re.compile(
    r"model|net|encoder|decoder|generator|discriminator|critic|classifier|backbone|criterion|loss_?fn|^[GD]$",
    re.IGNORECASE,
)
_NOT_MODULE_LIKE = re.compile(r"optim|loader|data|sched|scaler|meter|logger|writer", re.IGNORECASE)
_DEVICE_NAME = re.compile(r"(^|_)dev(ice)?s?($|_)", re.IGNORECASE)
_DEVICE_TYPES = ("cuda", "cpu", "xpu", "mps", "mtia", "hpu", "xla", "maia", "npu", "meta")

_BUILTINS = frozenset(
    "print len range enumerate zip isinstance issubclass int float str bool list tuple dict set frozenset min max "
    "abs round sum sorted reversed next iter getattr setattr hasattr format repr type super map filter any all "
    "divmod pow open vars id hash callable".split()
)
# Methods that move, reshape, read or bookkeep tensors rather than compute a forward pass.
_PLAIN_METHODS = frozenset(
    "to cuda cpu float double half bfloat16 long int bool byte char short type contiguous detach detach_ item "
    "tolist numpy size dim numel view view_as reshape reshape_as permute transpose t squeeze unsqueeze flatten "
    "clone fill_ zero_ zero_grad requires_grad_ pin_memory chunk split get append extend update items keys "
    "values format join pop copy_ expand expand_as repeat new_zeros new_ones new_full new_empty new_tensor "
    "train eval add_scalar log info debug warning set_description set_postfix display write flush parameters "
    "named_parameters state_dict modules children".split()
)
_TORCH_FACTORIES = frozenset(
    "zeros ones full empty randn rand randint randperm arange linspace logspace eye tensor as_tensor from_numpy "
    "zeros_like ones_like full_like empty_like rand_like randn_like randint_like manual_seed device no_grad "
    "enable_grad set_grad_enabled inference_mode get_default_dtype normal bernoulli multinomial Generator "
    "save load".split()
)
_TORCH_NON_COMPUTE_MODULES = ("torch.cuda.", "torch.backends.", "torch.distributed.")
_LOGGING_ROOTS = frozenset({"logger", "logging", "log", "wandb", "writer", "tqdm", "pbar", "progress", "tb", "mlflow"})


# --- results ------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Outcome:
    """One fp32 training iteration: the finding's anchor, and either a fix or the reason there is none."""

    anchor: Event  # the first unscaled backward
    scope: Scope
    is_step_function: bool
    fix: Optional[Fix] = None
    reason: Optional[str] = None


class _Refusal(Exception):
    """The conversion cannot be done safely; the message says why (it becomes the finding's message)."""


# --- the syntax tree's shape --------------------------------------------------------------------------


class _Tree:
    """Parents and source order of every node of the module (by id)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parent: Dict[int, cst.CSTNode] = {}
        self.order: Dict[int, int] = {}
        stack: List[cst.CSTNode] = [module]
        counter = 0
        while stack:
            node = stack.pop()
            self.order[id(node)] = counter
            counter += 1
            children = children_in_source_order(node)
            for child in children:
                self.parent[id(child)] = node
            stack.extend(reversed(children))

    def parent_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parent.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent.get(id(node))
        while current is not None:
            yield current
            current = self.parent.get(id(current))

    def position(self, node: cst.CSTNode) -> int:
        return self.order[id(node)]

    def is_inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return any(a is outer for a in self.ancestors(node))

    def block_of(self, statement: cst.CSTNode) -> Optional[Block]:
        """The block whose body lists the statement (None for a one-line suite or a nested expression)."""
        parent = self.parent_of(statement)
        if isinstance(parent, (cst.IndentedBlock, cst.Module)) and any(s is statement for s in parent.body):
            return parent
        return None

    def child_in(self, node: cst.CSTNode, block: Block) -> Optional[Statement]:
        """The statement of `block`'s body that is, or holds, `node`."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            parent = self.parent_of(current)
            if parent is block:
                return current if any(s is current for s in block.body) else None
            current = parent
        return None

    def enclosing_statement(self, node: cst.CSTNode) -> Optional[Statement]:
        """The innermost statement listed in a block that holds `node`."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            if isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and self.block_of(current):
                return current
            current = self.parent_of(current)
        return None

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor
        return None

    def loops_around(self, node: cst.CSTNode) -> List[Union[cst.For, cst.While]]:
        """Loops whose body holds `node`, inside its function, outermost first."""
        loops = []
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(ancestor, (cst.For, cst.While)) and child is ancestor.body:
                loops.append(ancestor)
            child = ancestor
        return list(reversed(loops))


# --- what a statement reads, assigns and calls ---------------------------------------------------------


class _Facts(cst.CSTVisitor):
    """Names a statement assigns and reads, and the calls it makes (nested functions and lambdas excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.assigned: Set[str] = set()
        self.reads: Set[str] = set()
        self.calls: List[cst.Call] = []
        self.attribute_reads: List[cst.Attribute] = []
        self._skip: Set[int] = set()

    def _target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._target(element.value)
        elif isinstance(target, cst.StarredElement):
            self._target(target.value)
        elif isinstance(target, cst.Subscript):
            key = dotted_name(target.value)
            if key is not None:
                self.assigned.add(key)
        else:
            key = dotted_name(target)
            if key is not None:
                self.assigned.add(key)
                self._mark_target(target)

    def _mark_target(self, target: cst.BaseExpression) -> None:
        self._skip.add(id(target))
        while isinstance(target, cst.Attribute):
            target = target.value
            self._skip.add(id(target))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node.name is not None:
            self.assigned.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.assigned.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._target(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        key = dotted_name(node.target)
        if key is not None:
            self.assigned.add(key)
            self.reads.add(key)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._target(node.asname.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        if id(node) in self._skip:
            return
        self.attribute_reads.append(node)
        key = dotted_name(node)
        if key is not None:
            self.reads.add(key)

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._skip:
            self.reads.add(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _facts(node: cst.CSTNode) -> _Facts:
    facts = _Facts()
    visit_read_only(node, facts)
    return facts


def _target_names(target: cst.BaseExpression) -> Set[str]:
    """Names an assignment target (`opt`, `(a, b)`, `x.y`) binds."""
    facts = _Facts()
    facts._target(target)
    return facts.assigned


def _plain_assignments(statement: cst.CSTNode) -> Set[str]:
    """Names a simple statement overwrites (`x = ...`): an earlier value of them no longer flows on."""
    killed: Set[str] = set()
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    elements = target.target.elements if isinstance(target.target, cst.Tuple) else [target.target]
                    for element in elements:
                        value = getattr(element, "value", element)
                        key = dotted_name(value)
                        if key is not None:
                            killed.add(key)
    return killed


# --- the file's context: names, modules, devices -------------------------------------------------------


class _FileContext:
    """What the conversion needs to know about the whole file, computed once."""

    def __init__(self, model: FileModel) -> None:
        self.model = model
        self.module = model.module

    # The properties below each walk the whole module: computed when first asked for, which for most
    # files (every training loop already AMP) is never.
    @functools.cached_property
    def tree(self) -> "_Tree":
        return _Tree(self.module)

    # names
    @functools.cached_property
    def identifiers(self) -> Set[str]:
        found: Set[str] = set()

        class Collect(cst.CSTVisitor):
            def visit_Name(self, node: cst.Name) -> None:
                found.add(node.value)

        visit_read_only(self.module, Collect())
        return found

    def fresh_name(self, candidates: Sequence[str], taken: Iterable[str] = ()) -> str:
        taken = set(taken)
        for name in candidates:
            if name not in self.identifiers and name not in taken:
                return name
        index = 1
        while f"{candidates[0]}_{index}" in self.identifiers or f"{candidates[0]}_{index}" in taken:
            index += 1
        return f"{candidates[0]}_{index}"

    def torch_name(self, scope: Scope) -> Optional[str]:
        """The name `torch` is bound to in this scope (`T` after `import torch as T`), if any."""
        table = scope.names
        while table is not None:
            for local, qualified in table.imported.items():
                if qualified == "torch" and scope.names.lookup(local) == "torch":
                    return local
            table = table.parent
        return None

    # modules (networks and loss functions)
    @functools.cached_property
    def module_like(self) -> Set[str]:
        names: Set[str] = set()
        local_modules = {
            name
            for name, cls in self.model.classes.items()
            if any("Module" in code_of(base.value) or "nn." in code_of(base.value) for base in cls.bases)
        }
        for scope in self.model.scopes:
            for key, values in scope.assignments.items():
                for value, _ in values:
                    call = _unwrap_method_chain(value)
                    if not isinstance(call, cst.Call):
                        continue
                    qualified = scope.names.qualify(call.func) or ""
                    last = qualified.split(".")[-1] if qualified else (dotted_name(call.func) or "")
                    if qualified.startswith("torch.nn.") and last[:1].isupper():
                        names.add(key)
                    elif dotted_name(call.func) in local_modules:
                        names.add(key)
        class Usage(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters", "forward"):
                    key = dotted_name(func.value)
                    if key is not None:
                        names.add(key)

        visit_read_only(self.module, Usage())
        return {n for n in names if n not in self.model.optimizer_keys}

    def is_module_like(self, key: Optional[str]) -> bool:
        if key is None:
            return False
        if key in self.module_like:
            return True
        last = key.split(".")[-1]
        return bool(_MODULE_LIKE.search(last)) and not _NOT_MODULE_LIKE.search(last)

    def call_tier(self, scope: Scope, call: cst.Call) -> int:
        """2: runs a network or a loss function; 1: some other computation; 0: bookkeeping, moves, factories."""
        func = call.func
        key = dotted_name(func)
        if key == "self":
            return 2
        qualified = scope.names.qualify(func) if key is not None else None
        if qualified is not None and qualified.startswith("torch.nn.functional."):
            return 2
        if key is not None and self.is_module_like(key):
            return 2
        if isinstance(func, cst.Attribute) and func.attr.value == "forward" and self.is_module_like(
            dotted_name(func.value)
        ):
            return 2
        for arg in call.args:
            if self.is_module_like(dotted_name(arg.value)):
                return 2
        if isinstance(func, cst.Name) and func.value in _BUILTINS and qualified is None:
            return 0
        if qualified is not None and qualified.startswith("torch."):
            last = qualified.split(".")[-1]
            if last in _TORCH_FACTORIES or qualified.startswith(_TORCH_NON_COMPUTE_MODULES):
                return 0
            return 1
        if key is not None and key.split(".")[0] in _LOGGING_ROOTS:
            return 0
        if isinstance(func, cst.Attribute) and func.attr.value in _PLAIN_METHODS:
            return 0
        return 1

    def statement_tier(self, scope: Scope, statement: cst.CSTNode) -> int:
        return max((self.call_tier(scope, call) for call in _facts(statement).calls), default=0)

    # where protocol calls sit
    @functools.cached_property
    def boundary_statements(self) -> Set[int]:
        marked: Set[int] = set()
        for event in self.model.events:
            if event.kind in _BOUNDARY_KINDS:
                marked.add(id(event.call))
                for ancestor in self.tree.ancestors(event.call):
                    marked.add(id(ancestor))
        return marked

    def is_boundary(self, statement: cst.CSTNode) -> bool:
        return id(statement) in self.boundary_statements

    # devices
    @functools.cached_property
    def literal_device(self) -> Optional[str]:
        """The device type the file's literals point at: the first non-CPU one, else "cpu", else None."""
        seen: List[str] = []
        model = self.model
        tree = self.tree

        def note(node: Optional[cst.BaseExpression]) -> None:
            if isinstance(node, cst.IfExp):
                note(node.body)
                note(node.orelse)
            elif isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
                kind = node.evaluated_value.split(":")[0]
                if kind in _DEVICE_TYPES:
                    seen.append(kind)

        scopes = {id(s.node): s for s in model.scopes}

        class Literals(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                function = tree.enclosing_function(node)
                scope = scopes.get(id(function)) if function is not None else model.scopes[0]
                qualified = scope.names.qualify(func) if scope is not None else None
                if qualified == "torch.device" and node.args:
                    note(node.args[0].value)
                elif isinstance(func, cst.Attribute) and func.attr.value == "cuda" and not qualified:
                    seen.append("cuda")
                elif isinstance(func, cst.Attribute) and func.attr.value == "to":
                    for arg in node.args:
                        if arg.keyword is None or arg.keyword.value == "device":
                            note(arg.value)
                for arg in node.args:
                    if arg.keyword is not None and arg.keyword.value == "device":
                        note(arg.value)

        visit_read_only(self.module, Literals())
        for kind in seen:
            if kind != "cpu":
                return kind
        if seen:
            return "cpu"
        for region in model.regions:
            if region.spec.device:
                return region.spec.device.split(":")[0]
        return None


def _unwrap_method_chain(value: cst.BaseExpression) -> cst.BaseExpression:
    """`Net().to(device).train()` -> `Net()`."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("to", "cuda", "cpu", "train", "eval", "float")
        and isinstance(value.func.value, cst.Call)
    ):
        value = value.func.value
    return value


# --- device expressions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Device:
    """How to spell the device type in one scope: a literal, or an expression over a variable."""

    code: str  # `"cuda"`, `device.type`, `device`, `torch.device(device).type`
    variable: Optional[str] = None  # the variable the expression reads (None for a literal)
    kind: str = "literal"  # literal | torch.device | string | unknown


def _classify_device_value(value: cst.BaseExpression, scope: Scope) -> Tuple[str, List[str]]:
    """("torch.device", []) / ("string", [literals]) / ("unknown", [])."""
    call = value
    if isinstance(call, cst.Call) and scope.names.qualify(call.func) == "torch.device":
        return "torch.device", []
    literals: List[str] = []

    def strings(node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
            literals.append(node.evaluated_value)
            return True
        if isinstance(node, cst.IfExp):
            return strings(node.body) and strings(node.orelse)
        return False

    if strings(value):
        return "string", literals
    return "unknown", []


class _DeviceResolver:
    def __init__(self, ctx: _FileContext, explicit: Optional[str], torch_name: Callable[[Scope], str]) -> None:
        self.ctx = ctx
        self.explicit = explicit.split(":")[0] if explicit else None
        self.torch_name = torch_name
        self.builder_string: Callable[[str], str] = lambda s: f'"{s}"'

    def literal(self) -> _Device:
        kind = self.explicit or self.ctx.literal_device or "cuda"
        return _Device(self.builder_string(kind))

    def for_variable(self, name: str, kind: str, literals: Sequence[str], scope: Scope) -> _Device:
        if kind == "torch.device":
            return _Device(f"{name}.type", name, "torch.device")
        if kind == "string" and literals and all(":" not in s and s in _DEVICE_TYPES for s in literals):
            return _Device(name, name, "string")
        return _Device(f"{self.torch_name(scope)}.device({name}).type", name, "unknown")

    def resolve(self, scope: Scope, before: Optional[int], transfers: Set[str]) -> _Device:
        """The device expression for code emitted in `scope` at source position `before`."""
        if self.explicit:
            return self.literal()
        found = self.variable(scope, before, transfers)
        return found if found is not None else self.literal()

    def variable(self, scope: Scope, before: Optional[int], transfers: Set[str]) -> Optional[_Device]:
        candidates: List[Tuple[int, str, _Device]] = []
        for outer in scope.chain():
            for name, values in outer.assignments.items():
                if "." in name or not values:
                    continue
                if outer.names.lookup(name) is not None:
                    continue
                kinds = [_classify_device_value(value, outer) for value, _ in values]
                if any(k != kinds[0][0] for k, _ in kinds) or kinds[0][0] == "unknown":
                    continue
                if kinds[0][0] == "string" and not _DEVICE_NAME.search(name):
                    continue
                if outer is scope and before is not None:
                    statement = values[0][1]
                    if statement is None or self.ctx.tree.position(statement) >= before:
                        continue
                if any(name in inner.params or (name in inner.assignments) for inner in _between(scope, outer)):
                    continue  # shadowed by an inner scope
                literals = [s for _, strings in kinds for s in strings]
                rank = (0 if name in transfers else 1) + (0 if _DEVICE_NAME.search(name) else 2)
                candidates.append((rank, name, self.for_variable(name, kinds[0][0], literals, outer)))
            if candidates:
                break
            if outer.is_function:
                param = self._device_parameter(outer, transfers)
                if param is not None:
                    return param
        if not candidates:
            return self._device_attribute(scope, transfers)
        candidates.sort(key=lambda c: c[0])
        return candidates[0][2]

    def _device_attribute(self, scope: Scope, transfers: Set[str]) -> Optional[_Device]:
        """`self.device`, set in the class and used for transfers in this method."""
        if scope.class_name is None:
            return None
        for key in sorted(transfers):
            if not key.startswith("self.") or key.count(".") != 1 or not _DEVICE_NAME.search(key[5:]):
                continue
            values = [
                (value, owner)
                for owner in self.ctx.model.scopes
                if owner.class_name == scope.class_name
                for value, _ in owner.assignments.get(key, [])
            ]
            if not values:
                continue
            kinds = [_classify_device_value(value, owner) for value, owner in values]
            if all(kind == "torch.device" for kind, _ in kinds):
                return _Device(f"{key}.type", key, "torch.device")
            return _Device(f"{self.torch_name(scope)}.device({key}).type", key, "unknown")
        return None

    def _device_parameter(self, scope: Scope, transfers: Set[str]) -> Optional[_Device]:
        """A `device` parameter: its type comes from what the call sites in this file pass."""
        for param, annotation in scope.params.items():
            if not _DEVICE_NAME.search(param):
                continue
            if param not in transfers and (annotation is None or "device" not in code_of(annotation)):
                continue
            if annotation is not None and "torch.device" in code_of(annotation):
                return _Device(f"{param}.type", param, "torch.device")
            kinds = self.argument_kinds(scope, param)
            if kinds and all(k == "torch.device" for k, _ in kinds):
                return _Device(f"{param}.type", param, "torch.device")
            if kinds and all(k == "string" for k, _ in kinds):
                literals = [s for _, strings in kinds for s in strings]
                return self.for_variable(param, "string", literals, scope)
            return _Device(f"{self.torch_name(scope)}.device({param}).type", param, "unknown")
        return None

    def argument_kinds(self, function_scope: Scope, param: str) -> List[Tuple[str, List[str]]]:
        """How each call site in the file passes `param`: the kind of the value, followed through one name."""
        function = function_scope.node
        assert isinstance(function, cst.FunctionDef)
        kinds: List[Tuple[str, List[str]]] = []
        for call, caller in _call_sites(self.ctx, function):
            arg = _argument_for(function, call, param)
            if arg is None:
                return []
            value = arg.value
            key = dotted_name(value)
            if isinstance(value, cst.Name) and caller is not None:
                values = _assignments_in_chain(caller, value.value)
                if values is None:
                    return []
                classified = [_classify_device_value(v, owner) for v, owner in values]
                if any(k != classified[0][0] for k, _ in classified):
                    return []
                kinds.append((classified[0][0], [s for _, strings in classified for s in strings]))
            elif key is None and caller is not None:
                kinds.append(_classify_device_value(value, caller))
            else:
                return []
        return kinds


def _between(scope: Scope, outer: Scope) -> List[Scope]:
    """Scopes from `scope` up to (not including) `outer`."""
    result = []
    for current in scope.chain():
        if current is outer:
            break
        result.append(current)
    return result


def _assignments_in_chain(scope: Scope, name: str) -> Optional[List[Tuple[cst.BaseExpression, Scope]]]:
    for outer in scope.chain():
        if name in outer.params:
            return None
        values = outer.assignments.get(name)
        if values:
            return [(value, outer) for value, _ in values]
    return None


# --- call sites of a step function --------------------------------------------------------------------


def _call_sites(ctx: _FileContext, function: cst.FunctionDef) -> List[Tuple[cst.Call, Optional[Scope]]]:
    """Every call of `function` in the file, or [] when one of its references is not a plain call."""
    sites, complete = _references(ctx, function)
    return sites if complete else []


def _references(ctx: _FileContext, function: cst.FunctionDef) -> Tuple[List[Tuple[cst.Call, Optional[Scope]]], bool]:
    """The calls of `function` in the file with their scopes, and whether they are all its references.

    A plain function is called by name; a method by `self.name(...)`. Any other reference (passed as a
    callback, `trainer.step(...)` from outside the class, a second definition) makes the list incomplete.
    """
    name = function.name.value
    model = ctx.model
    tree = ctx.tree
    is_method = any(isinstance(a, cst.ClassDef) for a in _until_function(tree, function))
    found: List[cst.CSTNode] = []

    class Refs(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name and node is not function.name:
                found.append(node)

    visit_read_only(ctx.module, Refs())
    sites: List[Tuple[cst.Call, Optional[Scope]]] = []
    complete = len(model.functions_named(name)) == 1
    for ref in found:
        parent = tree.parent_of(ref)
        if isinstance(parent, cst.Attribute) and parent.attr is ref:
            if not is_method:
                continue  # `model.train()` is another object's attribute, not this function
            expr: cst.CSTNode = parent
            if not (isinstance(parent.value, cst.Name) and parent.value.value == "self"):
                complete = False
                continue
        elif isinstance(parent, (cst.ImportAlias, cst.FunctionDef)):
            continue
        else:
            expr = ref
            if is_method:
                complete = False
                continue
        call = tree.parent_of(expr)
        if not (isinstance(call, cst.Call) and call.func is expr):
            complete = False
            continue
        caller_function = tree.enclosing_function(call)
        caller = model.scope_of(caller_function) if caller_function is not None else model.scopes[0]
        sites.append((call, caller))
    return sites, complete and bool(sites)


def _until_function(tree: _Tree, node: cst.CSTNode) -> List[cst.CSTNode]:
    result = []
    for ancestor in tree.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            break
        result.append(ancestor)
    return result


def _argument_for(function: cst.FunctionDef, call: cst.Call, param: str) -> Optional[cst.Arg]:
    positional_names = [p.name.value for p in list(function.params.posonly_params) + list(function.params.params)]
    if positional_names and positional_names[0] == "self" and isinstance(call.func, cst.Attribute):
        positional_names = positional_names[1:]
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == param:
            return arg
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in positional):
        return None
    if param in positional_names:
        index = positional_names.index(param)
        if index < len(positional):
            return positional[index]
    return None


# --- the iterations to convert ------------------------------------------------------------------------


@dataclass(eq=False)
class _Iteration:
    step: TrainingStep
    backwards: List[Event]  # unscaled, in source order
    optimizer_steps: List[Event]

    @property
    def scope(self) -> Scope:
        return self.step.scope

    @property
    def is_step_function(self) -> bool:
        return self.step.loop is None and self.scope.is_function


def _own(step: TrainingStep, *kinds: EventKind) -> List[Event]:
    """The step's events of these kinds written in its own scope (not those of helpers it calls)."""
    return [e for e in step.of(*kinds) if e.scope is step.scope and getattr(e, "via", None) is None]


def _iterations(model: FileModel) -> List[_Iteration]:
    found: List[_Iteration] = []
    seen: Set[int] = set()
    for step in model.steps:
        backwards = [e for e in _own(step, *_BACKWARDS) if e.scaled_by is None]
        if not backwards or id(backwards[0].call) in seen:
            continue
        if not _own(step, EventKind.OPTIMIZER_STEP) and step.loop is not None:
            step = _widen_to_stepping_loop(step, backwards[0]) or step
        for event in backwards:
            seen.add(id(event.call))
        found.append(_Iteration(step, backwards, _own(step, EventKind.OPTIMIZER_STEP)))
    return found


def _widen_to_stepping_loop(step: TrainingStep, backward: Event) -> Optional[TrainingStep]:
    """Backward in an inner loop (micro-batches), step in an outer one: the outer loop is the iteration."""
    scope = step.scope
    for loop in reversed(backward.loops[:-1]):
        events = [e for e in scope.events if loop in e.loops]
        if any(e.kind is EventKind.OPTIMIZER_STEP for e in events):
            return TrainingStep(scope, loop, events)
    return None


def _amp_in_reach(model: FileModel, scope: Scope) -> bool:
    if model.has_scaler_in_reach(scope):
        return True
    return any(outer.regions for outer in scope.chain())


# --- refusals -----------------------------------------------------------------------------------------


_FLOAT64 = "the script trains in float64 on purpose; AMP would drop that precision"


def _file_refusal(ctx: _FileContext, device_may_be_cuda: bool) -> Optional[str]:
    """Things anywhere in the file that make the conversion unsafe."""
    model = ctx.model
    scopes = {id(s.node): s for s in model.scopes}
    problems: List[str] = []
    tree = ctx.tree

    class Scan(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            function = tree.enclosing_function(node)
            scope = scopes.get(id(function)) if function is not None else model.scopes[0]
            if scope is None:
                return
            func = node.func
            qualified = scope.names.qualify(func)
            if isinstance(func, cst.Attribute) and qualified is None:
                method = func.attr.value
                if method == "half":
                    problems.append(
                        f"`{code_of(node)}` makes the weights float16: autocast needs float32 weights (AMP050); "
                        "remove the `.half()` and convert again"
                    )
                elif method == "double":
                    problems.append(f"`{code_of(node)}`: {_FLOAT64}")
                elif method in ("to", "type"):
                    for arg in node.args:
                        dtype = scope.names.qualify(arg.value)
                        if dtype in ("torch.float16", "torch.half"):
                            problems.append(
                                f"`{code_of(node)}` makes the weights float16: autocast needs float32 weights (AMP050)"
                            )
                        elif dtype in ("torch.float64", "torch.double"):
                            problems.append(f"`{code_of(node)}`: {_FLOAT64}")
            if qualified in ("torch.set_default_dtype", "torch.set_default_tensor_type"):
                text = code_of(node)
                if "64" in text or "double" in text.lower():
                    problems.append(f"`{text}`: {_FLOAT64}")
            if device_may_be_cuda and qualified in (
                "torch.nn.BCELoss",
                "torch.nn.modules.loss.BCELoss",
                "torch.nn.functional.binary_cross_entropy",
            ):
                problems.append(
                    f"`{code_of(node.func)}` raises an error under CUDA autocast; use `nn.BCEWithLogitsLoss` "
                    "(or `F.binary_cross_entropy_with_logits`) on the logits, without the sigmoid, then convert"
                )

        def visit_Attribute(self, node: cst.Attribute) -> None:
            function = tree.enclosing_function(node)
            scope = scopes.get(id(function)) if function is not None else model.scopes[0]
            if scope is not None and scope.names.qualify(node) in ("torch.float64", "torch.double"):
                problems.append(f"`{code_of(node)}`: {_FLOAT64}")

    visit_read_only(ctx.module, Scan())
    return problems[0] if problems else None


def _iteration_refusal(ctx: _FileContext, iteration: _Iteration) -> Optional[str]:
    model = ctx.model
    for event in _own(iteration.step, EventKind.AUTOGRAD_GRAD):
        create_graph = next((a.value for a in event.call.args if a.keyword and a.keyword.value == "create_graph"), None)
        if create_graph is not None and not (isinstance(create_graph, cst.Name) and create_graph.value == "False"):
            return (
                "`torch.autograd.grad(..., create_graph=True)` (a gradient penalty) needs the scaled-gradient "
                "pattern written by hand (scale the outputs, divide the gradients by the scale)"
            )
        return "`torch.autograd.grad(...)` gradients would be scaled; convert this step by hand"
    for step in iteration.optimizer_steps:
        if step.call.args:
            return f"`{code_of(step.call)}` passes a closure: GradScaler cannot step a closure optimizer (LBFGS)"
        if _is_lbfgs(model, step.target or ""):
            return f"`{step.target}` is LBFGS, a closure optimizer: GradScaler cannot step it"
    for event in _own(iteration.step, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE):
        if event:
            return "the loop already uses a GradScaler; fix it with the other AMP rules"
    return None


def _is_lbfgs(model: FileModel, key: str) -> bool:
    for scope in model.scopes:
        for value, _ in scope.assignments.get(key, []):
            call = _unwrap_method_chain(value)
            if isinstance(call, cst.Call):
                qualified = scope.names.qualify(call.func) or dotted_name(call.func) or ""
                if qualified.split(".")[-1] == "LBFGS":
                    return True
    return False


def _manual_update(ctx: _FileContext, iteration: _Iteration) -> Optional[str]:
    """`p.data -= lr * p.grad` (or `p.data.add_(p.grad, alpha=-lr)`): parameters updated without an optimizer."""
    root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
    found: List[str] = []

    def mentions_grad(node: cst.CSTNode) -> bool:
        return any(a.attr.value == "grad" for a in _facts(node).attribute_reads)

    class Scan(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is root

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if mentions_grad(node.value):
                found.append(code_of(node))

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in MANUAL_UPDATE_METHODS:
                if any(mentions_grad(arg.value) for arg in node.args):
                    found.append(code_of(node))

    visit_read_only(root, Scan())
    return found[0] if found else None


# --- the plan for one scope ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Slice:
    block: Block
    start: int  # index in block.body
    end: int  # inclusive
    hoisted: Optional[cst.BaseStatement] = None  # `loss = <inline loss expression>`, appended at the end
    hoist_before: Optional[Statement] = None  # hoist-only slice: inserted before this statement


class _Planner:
    """Builds the fix for every fp32 iteration of one scope (one scaler per scope)."""

    def __init__(
        self, ctx: _FileContext, dtype: str, explicit_device: Optional[str], iterations: List[_Iteration]
    ) -> None:
        self.ctx = ctx
        self.tree = ctx.tree
        self.model = ctx.model
        self.dtype = dtype
        self.iterations = iterations
        self.scope = iterations[0].scope
        self.builder = FixBuilder(ctx.module)
        self.needs_torch_import = False
        self.devices = _DeviceResolver(ctx, explicit_device, self._torch)
        self.devices.builder_string = self.builder.string
        self.new_names: Set[str] = set()
        # Statements to insert before a statement: (statement, [(priority, new statement)]).
        self.before: Dict[int, Tuple[cst.CSTNode, List[Tuple[int, cst.BaseStatement]]]] = {}
        self.wrapped_first: Dict[int, cst.CSTNode] = {}
        self.slices: List[_Slice] = []
        self.caller_devices: Dict[int, _Device] = {}  # by id of a step function's call site

    # spelling
    def _torch(self, scope: Scope) -> str:
        name = self.ctx.torch_name(scope)
        if name is None:
            self.needs_torch_import = True
            return "torch"
        return name

    def _insert_before(self, statement: cst.CSTNode, *new: cst.BaseStatement, priority: int = 1) -> None:
        """Queue statements to insert before `statement` (lower priority first: the scaler before a `with`)."""
        self.before.setdefault(id(statement), (statement, []))[1].extend((priority, n) for n in new)

    # the whole plan
    def build(self) -> Fix:
        fp16 = self.dtype == FLOAT16
        first = self.iterations[0]
        step_function = first.is_step_function
        scaler = self.ctx.fresh_name(_SCALER_NAMES) if fp16 else None
        transfers = self._transfer_names(self.scope)
        if step_function and fp16:
            callers = self._callers(first)
            device = self._step_function_device(first, callers, transfers)
        elif step_function:
            callers = []
            device = self.devices.resolve(self.scope, None, transfers)
        else:
            callers = []
            device = self.devices.resolve(self.scope, self._scaler_position(), transfers)
        torch_name = self._torch(self.scope)
        autocast = f"{torch_name}.amp.autocast({device.code}, dtype={torch_name}.{self.dtype})"
        for iteration in self.iterations:
            self._wrap_forward(iteration, autocast)
        if fp16:
            assert scaler is not None
            for iteration in self.iterations:
                self._scale(iteration, scaler)
            if step_function:
                self._pass_scaler(first, scaler, callers)
            else:
                anchor = self._scaler_anchor()
                statement = self.builder.statement(f"{scaler} = {torch_name}.amp.GradScaler({device.code})\n")
                self._insert_before(anchor, statement, priority=0)
        self._flush()
        if self.needs_torch_import:
            self.builder.need_import("torch")
        what = "autocast + GradScaler, float16" if fp16 else "autocast, bfloat16"
        key = ("AMP100", id(self.scope.node))
        return self.builder.build(f"Convert the training loop to AMP ({what})", Applicability.UNSAFE, key=key)

    # --- forward slices ---
    def _wrap_forward(self, iteration: _Iteration, autocast: str) -> None:
        covered: Set[int] = set()
        planned: List[_Slice] = []
        for backward in iteration.backwards:
            if id(backward.call) in covered:
                continue
            piece = self._slice_for(iteration, backward, covered)
            if piece is None:
                loss = code_of(backward.loss) if backward.loss is not None else "the loss"
                raise _Refusal(
                    f"no forward pass computing `{loss}` found before `{_short(backward)}` in the same block"
                )
            planned.append(piece)
        for piece in planned:
            self.slices.append(piece)
            self._emit_slice(piece, autocast)

    def _targets(self, backward: Event) -> Set[str]:
        if backward.loss is None:
            return set()
        reads = _facts(backward.loss).reads
        return {r for r in reads if r != "self"}

    def _slice_for(self, iteration: _Iteration, backward: Event, covered: Set[int]) -> Optional[_Slice]:
        loss = backward.loss
        if loss is None:
            return None
        statement = backward.statement
        if not isinstance(statement, cst.SimpleStatementLine) or self.tree.block_of(statement) is None:
            raise _Refusal(f"`{_short(backward)}` shares its line with other code; put it on a line of its own")
        hoist = self._needs_hoist(iteration.scope, loss)
        if hoist and _is_function_form(backward) and (not backward.call.args or backward.call.args[0].keyword):
            raise _Refusal(f"`{_short(backward)}`: pass the loss positionally to convert it")
        if hoist and len(statement.body) != 1:
            raise _Refusal(f"`{_short(backward)}` shares its line with other code; put it on a line of its own")
        targets = self._targets(backward)
        iteration_root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
        node: cst.CSTNode = statement
        while True:
            block = self.tree.block_of(node)
            if block is None:
                return None
            body = list(block.body)
            index = next(i for i, s in enumerate(body) if s is node)
            found = self._search(iteration, body, index, targets, hoist)
            if found is not None:
                start, end = found
                if hoist:
                    name = self.ctx.fresh_name(_LOSS_NAMES, self.new_names)
                    self.new_names.add(name)
                    hoisted = self.builder.statement(f"{name} = {code_of(_without_parens(loss))}\n")
                    self._rename_loss(backward, name)
                    if start is None:
                        return _Slice(block, index, index - 1, hoisted, hoist_before=node)  # type: ignore[arg-type]
                    return _Slice(block, start, index - 1, hoisted)
                assert start is not None
                end = self._cover_later_losses(iteration, backward, body, index, end, covered)
                return _Slice(block, start, end)
            if hoist or block is iteration_root or self.tree.parent_of(block) is iteration_root:
                return None
            # The loss is assigned before the enclosing `if`/`with`/`try`: look one block up.
            parent = self.tree.parent_of(block)
            while parent is not None and self.tree.block_of(parent) is None:
                if parent is iteration_root or isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                    return None
                parent = self.tree.parent_of(parent)
            if parent is None or parent is iteration_root:
                return None
            node = parent

    def _needs_hoist(self, scope: Scope, loss: cst.BaseExpression) -> bool:
        if dotted_name(loss) is not None:
            return False
        return any(self.ctx.call_tier(scope, call) == 2 for call in _facts(loss).calls)

    def _search(
        self, iteration: _Iteration, body: List[cst.CSTNode], index: int, targets: Set[str], hoist: bool
    ) -> Optional[Tuple[Optional[int], int]]:
        """(start, end) of the forward slice before body[index]; start None: no statement needed (hoist only)."""
        scope = iteration.scope
        boundary = -1
        end: Optional[int] = None
        for position in range(index - 1, -1, -1):
            statement = body[position]
            if self.ctx.is_boundary(statement):
                boundary = position
                break
            if end is None and not hoist and (_facts(statement).assigned & targets):
                end = position
        if hoist:
            end = index - 1
            needed = set(targets)
        else:
            if end is None:
                return None
            needed = set(targets)
        best_model: Optional[int] = None
        best_compute: Optional[int] = None
        for position in range(end, boundary, -1):
            statement = body[position]
            facts = _facts(statement)
            if not (facts.assigned & needed):
                continue
            needed -= _plain_assignments(statement)
            needed |= {r for r in facts.reads if r != "self"}
            tier = self.ctx.statement_tier(scope, statement)
            if tier == 2:
                best_model = position
            elif tier == 1:
                best_compute = position
        start = best_model if best_model is not None else best_compute
        if hoist:
            return (start, end)
        if start is None:
            # The loss is assigned from other values only (`loss = a + b`): wrap that statement if it computes.
            return (end, end) if self.ctx.statement_tier(scope, body[end]) else None
        return (start, end)

    def _cover_later_losses(
        self, iteration: _Iteration, backward: Event, body: List[cst.CSTNode], index: int, end: int, covered: Set[int]
    ) -> int:
        """`loss_a.backward(retain_graph=True); loss_b.backward()`: both losses go in the first backward's slice."""
        for later in iteration.backwards:
            if later is backward or later.index < backward.index or id(later.call) in covered:
                continue
            targets = self._targets(later)
            later_position = self.tree.position(later.call)
            assigned_after = any(
                _facts(s).assigned & targets for s in body[index + 1 :] if self.tree.position(s) < later_position
            )
            if assigned_after:
                continue
            for position in range(index - 1, end, -1):
                if _facts(body[position]).assigned & targets:
                    end = max(end, position)
                    break
            if any(_facts(body[p]).assigned & targets for p in range(0, end + 1)):
                covered.add(id(later.call))
        return end

    def _rename_loss(self, backward: Event, name: str) -> None:
        def change(call: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            if _is_function_form(backward):
                first = call.args[0]
                return call.with_changes(args=[first.with_changes(value=cst.Name(name)), *call.args[1:]])
            return call.with_changes(func=call.func.with_changes(value=cst.Name(name)))

        self.builder.replace(backward.call, change)

    def _emit_slice(self, piece: _Slice, autocast: str) -> None:
        item = cst.WithItem(item=self.builder.expression(autocast))
        if piece.hoist_before is not None:
            assert piece.hoisted is not None
            block = cst.IndentedBlock(body=[piece.hoisted])
            self._insert_before(piece.hoist_before, cst.With(items=[item], body=block))
            return
        members = list(piece.block.body[piece.start : piece.end + 1])
        captured: Dict[int, cst.CSTNode] = {}
        last = members[-1]
        hoisted = piece.hoisted

        for position, member in enumerate(members[:-1]):

            def capture(node: cst.CSTNode, position: int = position) -> cst.CSTNode:
                captured[position] = node
                return cst.RemoveFromParent()  # type: ignore[return-value]

            self.builder.replace(member, capture)

        count = len(members)

        def wrap(node: cst.CSTNode) -> cst.CSTNode:
            statements = [captured[p] for p in range(count - 1)] + [node]
            if hoisted is not None:
                statements.append(hoisted)
            first = statements[0]
            statements[0] = first.with_changes(leading_lines=())
            return cst.With(items=[item], body=cst.IndentedBlock(body=statements), leading_lines=first.leading_lines)

        self.builder.replace(last, wrap)
        self.wrapped_first[id(members[0])] = last

    # --- scaling (float16) ---
    def _scale(self, iteration: _Iteration, scaler: str) -> None:
        for backward in iteration.backwards:
            self._scale_backward(backward, scaler)
        for step in iteration.optimizer_steps:
            self.builder.replace(step.call, _step_through(scaler))
        self._unscale_before_gradient_reads(iteration, scaler)
        anchor = self._update_anchor(iteration)
        self.builder.insert_after(anchor, self.builder.statement(f"{scaler}.update()\n"))

    def _scale_backward(self, backward: Event, scaler: str) -> None:
        if backward.kind is not EventKind.BACKWARD:
            raise _Refusal(f"`{_short(backward)}` cannot be scaled automatically")
        call = backward.call

        def scale(expression: cst.BaseExpression) -> cst.Call:
            return cst.Call(
                func=cst.Attribute(value=cst.Name(scaler), attr=cst.Name("scale")),
                args=[cst.Arg(value=_without_parens(expression))],
            )

        if not _is_function_form(backward):

            def change(node: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                return node.with_changes(func=node.func.with_changes(value=scale(node.func.value)))

        else:  # torch.autograd.backward(loss, ...)
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if not positional or positional[0] is not call.args[0]:
                raise _Refusal(f"`{_short(backward)}` cannot be scaled automatically")

            def change(node: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(node, cst.Call)
                first = node.args[0]
                return node.with_changes(args=[first.with_changes(value=scale(first.value)), *node.args[1:]])

        self.builder.replace(call, change)

    def _gradient_consumers(self, iteration: _Iteration) -> List[cst.CSTNode]:
        """Clipping calls and statements that read `.grad`, inside the iteration (nodes, source order)."""
        consumers: List[cst.CSTNode] = [e.call for e in _own(iteration.step, EventKind.CLIP)]
        root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
        tree = self.tree

        class Reads(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is root

            def visit_Attribute(self, node: cst.Attribute) -> None:
                if node.attr.value == "grad" and not (dotted_name(node.value) or "").endswith("autograd"):
                    parent = tree.parent_of(node)
                    if isinstance(parent, cst.AssignTarget):
                        return
                    consumers.append(node)

        visit_read_only(root, Reads())
        return sorted(consumers, key=self.tree.position)

    def _unscale_before_gradient_reads(self, iteration: _Iteration, scaler: str) -> None:
        consumers = self._gradient_consumers(iteration)
        if not consumers:
            return
        backward_positions = [self.tree.position(b.call) for b in iteration.backwards]
        unscaled: Dict[str, int] = {}
        for step in iteration.optimizer_steps:
            step_position = self.tree.position(step.call)
            earlier = [p for p in backward_positions if p < step_position]
            if not earlier:
                continue
            between = [c for c in consumers if earlier[-1] < self.tree.position(c) < step_position]
            if not between:
                continue
            if step.target is None or step.target in unscaled:
                continue
            anchor = iteration.step.anchor_statement(step)
            block = self.tree.block_of(anchor)
            in_own_loop = isinstance(anchor, cst.For) and step.target in _target_names(anchor.target)
            if anchor is not step.statement and in_own_loop:
                raise _Refusal(
                    f"gradients are clipped or read before `{_short(step)}`, which steps inside its own loop"
                )
            if block is None:
                raise _Refusal(f"`{_short(step)}` is not on a line of its own")
            statement = self.tree.child_in(between[0], block)
            if statement is None or self.tree.position(statement) <= earlier[-1]:
                raise _Refusal(
                    f"gradients are read outside the block of `{_short(step)}` (before the accumulation boundary); "
                    "move the read next to the step"
                )
            unscaled[step.target] = self.tree.position(statement)
            self._insert_before(statement, self.builder.statement(f"{scaler}.unscale_({step.target})\n"))

    def _update_anchor(self, iteration: _Iteration) -> cst.CSTNode:
        steps = iteration.optimizer_steps
        last = max(steps, key=lambda e: self.tree.position(e.call))
        anchor: cst.CSTNode = iteration.step.anchor_statement(last)
        root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
        # Branches (inside the iteration) that every step sits in: the update goes in the innermost one.
        common: Optional[List[Tuple[cst.If, bool]]] = None
        for step in steps:
            own = [(b.node, b.taken) for b in step.branches if self.tree.is_inside(b.node, root)]
            if common is None:
                common = own
            else:
                length = 0
                while length < min(len(common), len(own)) and _same_branch(common[length], own[length]):
                    length += 1
                common = common[:length]
        container: Optional[Block]
        if common:
            node, taken = common[-1]
            if taken:
                container = node.body if isinstance(node.body, cst.IndentedBlock) else None
            else:
                orelse = node.orelse
                is_block = isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock)
                container = orelse.body if is_block else None
        elif iteration.step.loop is not None:
            body = iteration.step.loop.body
            container = body if isinstance(body, cst.IndentedBlock) else None
        else:
            scope_node = iteration.scope.node
            if isinstance(scope_node, cst.Module):
                container = scope_node
            else:
                container = scope_node.body if isinstance(scope_node.body, cst.IndentedBlock) else None
        if container is None:
            raise _Refusal("the optimizer steps sit in a one-line block; put them on lines of their own")
        lifted = self.tree.child_in(anchor, container)
        if lifted is None:
            raise _Refusal("could not find where `scaler.update()` belongs after the optimizer steps")
        return lifted

    # --- the scaler's construction ---
    def _outermost_loops(self) -> List[cst.CSTNode]:
        loops: List[cst.CSTNode] = []
        for iteration in self.iterations:
            backward = iteration.backwards[0]
            outer = backward.loops[0] if backward.loops else None
            if outer is None:
                continue
            if not any(outer is loop for loop in loops):
                loops.append(outer)
        return loops

    def _scaler_anchor(self) -> cst.CSTNode:
        loops = self._outermost_loops()
        if not loops:
            # Straight-line code at module level: the scaler goes before the first forward pass.
            first = min(self.slices, key=lambda s: self.tree.position(s.hoist_before or s.block.body[s.start]))
            return first.hoist_before or first.block.body[first.start]
        return self._before_all(loops)

    def _before_all(self, nodes: List[cst.CSTNode]) -> cst.CSTNode:
        """The statement, in the innermost block that holds all `nodes`, that holds the first of them."""
        first = min(nodes, key=self.tree.position)
        chains = []
        for node in nodes:
            chain = [a for a in self.tree.ancestors(node) if isinstance(a, (cst.IndentedBlock, cst.Module))]
            chains.append(chain)
        common = None
        for block in chains[0]:
            if all(any(block is b for b in chain) for chain in chains[1:]):
                common = block
                break
        if common is None:
            raise _Refusal("the training loops of this function have no common block for one GradScaler")
        statement = self.tree.child_in(first, common)
        if statement is None:
            raise _Refusal("could not place the GradScaler before the training loop")
        return statement

    def _scaler_position(self) -> Optional[int]:
        loops = self._outermost_loops()
        if loops:
            return self.tree.position(min(loops, key=self.tree.position))
        return None

    def _transfer_names(self, scope: Scope) -> Set[str]:
        """Names used as a device in this scope: `.to(NAME)`, `device=NAME`."""
        names: Set[str] = set()
        node = scope.node

        class Transfers(cst.CSTVisitor):
            def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
                return inner is node

            def visit_Call(self, call: cst.Call) -> None:
                func = call.func
                for arg in call.args:
                    key = dotted_name(arg.value)
                    if key is None:
                        continue
                    if arg.keyword is not None and arg.keyword.value == "device":
                        names.add(key)
                    elif isinstance(func, cst.Attribute) and func.attr.value == "to" and arg.keyword is None:
                        names.add(key)

        visit_read_only(node, Transfers())
        return names

    # --- step functions ---
    def _callers(self, iteration: _Iteration) -> List[Tuple[cst.Call, Scope]]:
        function = iteration.scope.node
        assert isinstance(function, cst.FunctionDef)
        sites, complete = _references(self.ctx, function)
        name = function.name.value
        if not complete:
            raise _Refusal(
                f"`{name}` runs one training step, but not all of its call sites are visible in this file "
                "(the GradScaler must be created once, outside the loop that calls it)"
            )
        callers = []
        for call, caller in sites:
            if caller is None or caller is iteration.scope:
                raise _Refusal(f"`{name}` calls itself")
            if not self.tree.loops_around(call):
                raise _Refusal(
                    f"`{name}` runs one training step but `{code_of(call.func)}(...)` is not called from a loop: "
                    "the GradScaler must be created once, outside the training loop"
                )
            if _amp_in_reach(self.model, caller):
                raise _Refusal(
                    f"`{name}` is called where AMP is already set up; fix that code with the other AMP rules"
                )
            callers.append((call, caller))
        return callers

    def _step_function_device(
        self, iteration: _Iteration, callers: List[Tuple[cst.Call, Scope]], transfers: Set[str]
    ) -> _Device:
        """The device inside the step function; each caller's scaler must agree with it."""
        if self.devices.explicit:
            device = self.devices.literal()
            for call, caller in callers:
                self.caller_devices[id(call)] = device
            return device
        device = self.devices.variable(iteration.scope, None, transfers)
        function = iteration.scope.node
        assert isinstance(function, cst.FunctionDef)
        if device is not None and device.variable is not None and device.variable in iteration.scope.params:
            for call, caller in callers:
                arg = _argument_for(function, call, device.variable)
                key = dotted_name(arg.value) if arg is not None else None
                if key is None:
                    device = None
                    break
                found = self.devices.variable(caller, self.tree.position(call), {key})
                if found is not None and found.variable == key:
                    self.caller_devices[id(call)] = found
                else:
                    self.caller_devices[id(call)] = _Device(
                        f"{self._torch(caller)}.device({key}).type", key, "unknown"
                    )
            if device is not None:
                return device
        elif device is not None:
            # A module-level variable: callers see the same one unless they shadow it.
            for call, caller in callers:
                seen = self.devices.variable(caller, self.tree.position(call), {device.variable or ""})
                if seen is None or seen.variable != device.variable:
                    device = None
                    break
                self.caller_devices[id(call)] = seen
            if device is not None:
                return device
        literal = self.devices.literal()
        for call, caller in callers:
            self.caller_devices[id(call)] = literal
        return literal

    def _pass_scaler(self, iteration: _Iteration, scaler: str, callers: List[Tuple[cst.Call, Scope]]) -> None:
        function = iteration.scope.node
        assert isinstance(function, cst.FunctionDef)
        self.builder.replace(function.params, lambda params: _add_parameter(params, scaler))
        by_scope: Dict[int, Tuple[Scope, List[cst.Call]]] = {}
        for call, caller in callers:
            self.builder.replace(call, lambda node: _add_keyword(node, scaler))
            by_scope.setdefault(id(caller.node), (caller, []))[1].append(call)
        for caller, calls in by_scope.values():
            loops = []
            for call in calls:
                outer = self.tree.loops_around(call)[0]
                if not any(outer is loop for loop in loops):
                    loops.append(outer)
            anchor = self._before_all(loops)
            device = self.caller_devices[id(calls[0])]
            if any(self.caller_devices[id(c)].code != device.code for c in calls[1:]):
                device = self.devices.literal()
            if device.variable is not None:
                if not self._bound_before(caller, device.variable, anchor):
                    raise _Refusal(
                        f"`{device.variable}` is not bound before the loop that calls `{function.name.value}`"
                    )
            torch_name = self._torch(caller)
            statement = self.builder.statement(f"{scaler} = {torch_name}.amp.GradScaler({device.code})\n")
            self._insert_before(anchor, statement, priority=0)

    def _bound_before(self, scope: Scope, name: str, anchor: cst.CSTNode) -> bool:
        if name.startswith("self.") or name in scope.params:
            return True
        values = scope.assignments.get(name)
        if not values:
            return any(name in outer.assignments or name in outer.params for outer in list(scope.chain())[1:])
        statement = values[0][1]
        return statement is not None and self.tree.position(statement) < self.tree.position(anchor)

    # --- output ---
    def _flush(self) -> None:
        """Statements to insert before a statement that a slice replaces go in front of the `with`."""
        for statement, queued in self.before.values():
            new = [n for _, n in sorted(queued, key=lambda item: item[0])]
            target = self.wrapped_first.get(id(statement))
            if target is None:
                self.builder.insert_before(statement, *new)
                continue
            prefix = list(new)

            def prepend(node: cst.CSTNode, prefix: List[cst.BaseStatement] = prefix) -> cst.CSTNode:
                if isinstance(node, cst.BaseStatement):
                    # The comments above the wrapped statements stay above the new first statement.
                    lines = tuple(node.leading_lines) + tuple(prefix[0].leading_lines)
                    first = prefix[0].with_changes(leading_lines=lines)
                    rest = [*prefix[1:], node.with_changes(leading_lines=())]
                    return cst.FlattenSentinel([first, *rest])  # type: ignore[return-value]
                return node

            self.builder.replace(target, prepend)


def _same_branch(a: Tuple[cst.If, bool], b: Tuple[cst.If, bool]) -> bool:
    return a[0] is b[0] and a[1] == b[1]


def _is_function_form(backward: Event) -> bool:
    """`torch.autograd.backward(loss)` rather than `loss.backward()`."""
    qualified = backward.scope.names.qualify(backward.call.func)
    return qualified is not None and qualified.startswith("torch.autograd")


def _short(event: Event) -> str:
    text = code_of(event.call)
    return text if len(text) <= 60 else text[:57] + "..."


def _without_parens(expression: cst.BaseExpression) -> cst.BaseExpression:
    if getattr(expression, "lpar", None) and getattr(expression, "rpar", None):
        return expression.with_changes(lpar=[], rpar=[])
    return expression


def _step_through(scaler: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def change(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        return cst.Call(
            func=cst.Attribute(value=cst.Name(scaler), attr=cst.Name("step")),
            args=[cst.Arg(value=node.func.value)],
            lpar=node.lpar,
            rpar=node.rpar,
        )

    return change


def _add_parameter(params: cst.CSTNode, name: str) -> cst.CSTNode:
    """Add `name` as the last parameter (keyword-only when defaults or `*args` come before it)."""
    assert isinstance(params, cst.Parameters)
    new = cst.Param(name=cst.Name(name))
    regular = list(params.params)
    keyword_only = list(params.kwonly_params)
    if not keyword_only and params.star_arg is cst.MaybeSentinel.DEFAULT and not any(p.default for p in regular):
        if params.star_kwarg is None:
            return params.with_changes(params=_append_with_comma(regular, new))
    if params.star_arg is cst.MaybeSentinel.DEFAULT:
        return params.with_changes(star_arg=cst.ParamStar(), kwonly_params=_append_with_comma(keyword_only, new))
    return params.with_changes(kwonly_params=_append_with_comma(keyword_only, new))


def _append_with_comma(items: List, new):
    """Append to a comma-separated list, keeping a trailing comma and a one-per-line layout."""
    if not items:
        return [new]
    last = items[-1]
    if isinstance(last.comma, cst.Comma):
        # `a,\n    b,\n)`: the new item takes the last one's trailing comma; the last one takes the previous layout.
        previous = items[-2].comma if len(items) > 1 and isinstance(items[-2].comma, cst.Comma) else None
        spacing = previous if previous is not None else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return items[:-1] + [last.with_changes(comma=spacing), new.with_changes(comma=last.comma)]
    return items + [new]


def _add_keyword(node: cst.CSTNode, name: str) -> cst.CSTNode:
    assert isinstance(node, cst.Call)
    new = cst.Arg(
        value=cst.Name(name),
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    return node.with_changes(args=_append_with_comma(list(node.args), new))


# --- entry point --------------------------------------------------------------------------------------


def plan_conversions(model: FileModel, dtype: str = FLOAT16, device: Optional[str] = None) -> List[Outcome]:
    """Every fp32 training iteration of the file, each with its fix or the reason it has none."""
    dtype = BFLOAT16 if dtype == BFLOAT16 else FLOAT16
    iterations = _iterations(model)
    if not iterations:
        return []
    ctx = _FileContext(model)
    outcomes: List[Outcome] = []
    stepping = [it for it in iterations if it.optimizer_steps]
    steps_elsewhere = [
        e
        for e in model.events
        if e.kind is EventKind.OPTIMIZER_STEP and not any(e in it.optimizer_steps for it in stepping)
    ]
    by_scope: Dict[int, List[_Iteration]] = {}
    for iteration in iterations:
        if _amp_in_reach(model, iteration.scope):
            continue
        anchor = iteration.backwards[0]
        if not iteration.optimizer_steps:
            manual = _manual_update(ctx, iteration)
            if manual is not None:
                outcomes.append(
                    Outcome(anchor, iteration.scope, iteration.is_step_function, reason=(
                        f"parameters are updated by hand (`{manual}`), not by a torch optimizer; "
                        "GradScaler can only step a `torch.optim` optimizer"
                    ))
                )
            elif steps_elsewhere:
                where = steps_elsewhere[0]
                closure = next((e for e in steps_elsewhere if e.call.args or _is_lbfgs(model, e.target or "")), None)
                if closure is not None:
                    reason = (
                        f"`{_short(closure)}` steps a closure optimizer (LBFGS, `step(closure)`): "
                        "GradScaler cannot step it"
                    )
                elif where.scope is iteration.scope:
                    reason = f"`{_short(where)}` runs outside the loop that runs `{_short(anchor)}`"
                else:
                    place = f"`{where.scope.name}`" if where.scope.name else "module level"
                    reason = (
                        f"`{_short(anchor)}` and `{_short(where)}` (in {place}) are not in one function; "
                        "AMP100 converts a training step only when both are visible together"
                    )
                outcomes.append(Outcome(anchor, iteration.scope, iteration.is_step_function, reason=reason))
            continue
        by_scope.setdefault(id(iteration.scope.node), []).append(iteration)

    file_reason = None
    if by_scope:
        if device:
            device_may_be_cuda = device.split(":")[0] != "cpu"
        else:
            device_may_be_cuda = ctx.literal_device != "cpu" or _has_dynamic_device(model)
        file_reason = _file_refusal(ctx, device_may_be_cuda)
    for group in by_scope.values():
        step_function = group[0].is_step_function
        reason = file_reason
        if reason is None:
            for iteration in group:
                reason = _iteration_refusal(ctx, iteration)
                if reason is not None:
                    break
        if reason is None and step_function and len(group) > 1:
            reason = "the function holds several training steps outside any loop"
        fix: Optional[Fix] = None
        if reason is None:
            try:
                fix = _Planner(ctx, dtype, device, group).build()
            except _Refusal as refusal:
                reason = str(refusal)
        for iteration in group:
            anchor = iteration.backwards[0]
            outcomes.append(Outcome(anchor, iteration.scope, iteration.is_step_function, fix=fix, reason=reason))
    return outcomes


def _has_dynamic_device(model: FileModel) -> bool:
    """A `torch.device(...)` whose argument is not a literal: the device is chosen at run time."""
    for scope in model.scopes:
        for values in scope.assignments.values():
            for value, _ in values:
                if isinstance(value, cst.Call) and scope.names.qualify(value.func) == "torch.device":
                    if not (value.args and isinstance(value.args[0].value, cst.SimpleString)):
                        return True
    return False
