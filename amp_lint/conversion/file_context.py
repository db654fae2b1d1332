"""What the conversion knows about the whole file: names, networks and loss modules, devices in literals."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Set

import libcst as cst

from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.names import dotted_name, is_optimizer_class
from amp_lint.analysis.walk import visit_read_only
from amp_lint.conversion.syntax import SyntaxTree, statement_facts, unwrap_method_chain

if TYPE_CHECKING:
    from amp_lint.conversion.helper_effects import HelperEffects

BACKWARD_KINDS = (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD)
# Events that end a forward slice: nothing before them belongs to the next loss's forward pass.
BOUNDARY_KINDS = frozenset(
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


# Names that look like networks or loss modules when the file does not say so otherwise.
MODULE_LIKE = re.compile(
    r"model|net|encoder|decoder|generator|discriminator|critic|classifier|backbone|criterion|loss_?fn|^[GD]$",
    re.IGNORECASE,
)
NOT_MODULE_LIKE = re.compile(r"optim|loader|data|sched|scaler|meter|logger|writer", re.IGNORECASE)
DEVICE_TYPES = ("cuda", "cpu", "xpu", "mps", "mtia", "hpu", "xla", "maia", "npu", "meta")

BUILTINS = frozenset(
    "print len range enumerate zip isinstance issubclass int float str bool list tuple dict set frozenset min max "
    "abs round sum sorted reversed next iter getattr setattr hasattr format repr type super map filter any all "
    "divmod pow open vars id hash callable".split()
)
# Methods that move, reshape, read or bookkeep tensors rather than compute a forward pass.
PLAIN_METHODS = frozenset(
    "to cuda cpu float double half bfloat16 long int bool byte char short type contiguous detach detach_ item "
    "tolist numpy size dim numel view view_as reshape reshape_as permute transpose t squeeze unsqueeze flatten "
    "clone fill_ zero_ zero_grad requires_grad_ pin_memory chunk split get append extend update items keys "
    "values format join pop copy_ expand expand_as repeat new_zeros new_ones new_full new_empty new_tensor "
    "train eval add_scalar log info debug warning set_description set_postfix display write flush parameters "
    "named_parameters state_dict modules children".split()
)
TORCH_FACTORIES = frozenset(
    "zeros ones full empty randn rand randint randperm arange linspace logspace eye tensor as_tensor from_numpy "
    "zeros_like ones_like full_like empty_like rand_like randn_like randint_like manual_seed device no_grad "
    "enable_grad set_grad_enabled inference_mode get_default_dtype normal bernoulli multinomial Generator "
    "save load".split()
)
# Tensor methods that combine values already computed (no network runs in them).
TENSOR_OPS = frozenset(
    "sum mean prod std var norm max min abs neg exp log log1p sqrt pow mul add sub div clamp clip square sign "
    "cumsum sigmoid tanh relu softmax log_softmax gather index_select masked_fill where mm matmul bmm dot "
    "stack cat".split()
)
TORCH_NON_COMPUTE_MODULES = ("torch.cuda.", "torch.backends.", "torch.distributed.")
LOGGING_ROOTS = frozenset({"logger", "logging", "log", "wandb", "writer", "tqdm", "pbar", "progress", "tb", "mlflow"})

# --- the file's context: names, modules, devices -------------------------------------------------------


class FileContext:
    """What the conversion needs to know about the whole file, computed once."""

    def __init__(self, model: FileModel) -> None:
        self.model = model
        self.module = model.module

    # The properties below each walk the whole module: computed when first asked for, which for most
    # files (every training loop already AMP) is never.
    @functools.cached_property
    def tree(self) -> "SyntaxTree":
        return SyntaxTree(self.module)

    def where(self, node: cst.CSTNode) -> str:
        """"line N" for a node of the module (refusal messages name the line that makes them), or ""."""
        if not hasattr(self, "_locator"):
            from amp_lint.parse.positions import NodeLocator

            self._locator = NodeLocator(self.module)
        found = self._locator.range_of(id(node))
        return f"line {found.start.line}" if found is not None else ""

    @functools.cached_property
    def helper_effects(self) -> "HelperEffects":
        from amp_lint.conversion.helper_effects import HelperEffects

        return HelperEffects(self.model)  # with the project of the file being checked, when there is one

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
    def local_module_classes(self) -> Set[str]:
        """The file's own `nn.Module` classes."""
        return {
            name
            for name, cls in self.model.classes.items()
            if any("Module" in code_of(base.value) or "nn." in code_of(base.value) for base in cls.bases)
        }

    @functools.cached_property
    def module_like(self) -> Set[str]:
        names: Set[str] = set()
        local_modules = self.local_module_classes
        for scope in self.model.scopes:
            for key, values in scope.assignments.items():
                for value, _ in values:
                    call = unwrap_method_chain(value)
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
        return bool(MODULE_LIKE.search(last)) and not NOT_MODULE_LIKE.search(last)

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
        if (isinstance(func, cst.Attribute) and func.attr.value not in PLAIN_METHODS
                and dotted_name(func.value) in self.module_like):
            return 2  # a network's own method: `actor.get_action(obs)`, `model.encode(x)`, `net.forward(x)`
        if isinstance(func, cst.Attribute) and func.attr.value == "forward" and self.is_module_like(
            dotted_name(func.value)
        ):
            return 2  # fmt: skip
        for arg in call.args:
            if self.is_module_like(dotted_name(arg.value)):
                return 2
        if isinstance(func, cst.Name) and func.value in BUILTINS and qualified is None:
            return 0
        if qualified is not None and qualified.startswith("torch."):
            last = qualified.split(".")[-1]
            if last in TORCH_FACTORIES or qualified.startswith(TORCH_NON_COMPUTE_MODULES):
                return 0
            return 1
        if key is not None and key.split(".")[0] in LOGGING_ROOTS:
            return 0
        if isinstance(func, cst.Attribute) and func.attr.value in PLAIN_METHODS:
            return 0
        return 1

    def only_tensor_arithmetic(self, scope: Scope, statements: Sequence[cst.CSTNode]) -> bool:
        """Every call is a torch function or a tensor method (`torch.cat(log_probs).sum()`): no model runs here."""
        for statement in statements:
            for call in statement_facts(statement).calls:
                if self.call_tier(scope, call) == 0:
                    continue
                func = call.func
                qualified = scope.names.qualify(func) if dotted_name(func) is not None else None
                if qualified is not None and qualified.startswith("torch.") and not qualified.startswith("torch.nn."):
                    continue
                if isinstance(func, cst.Attribute) and func.attr.value in TENSOR_OPS:
                    continue
                return False
        return True

    def statement_tier(self, scope: Scope, statement: cst.CSTNode) -> int:
        return max((self.call_tier(scope, call) for call in statement_facts(statement).calls), default=0)

    # where protocol calls sit
    @functools.cached_property
    def boundary_statements(self) -> Set[int]:
        marked: Set[int] = set()
        for event in self.model.events:
            if event.kind in BOUNDARY_KINDS:
                marked.add(id(event.call))
                for ancestor in self.tree.ancestors(event.call):
                    marked.add(id(ancestor))
        return marked

    def is_boundary(self, statement: cst.CSTNode) -> bool:
        return id(statement) in self.boundary_statements

    # devices
    @functools.cached_property
    def device_survey(self) -> "DeviceSurvey":
        """Every device the file's literals name, and under which condition (`if args.cuda: model.cuda()`)."""
        survey = DeviceSurvey()
        model = self.model
        tree = self.tree
        scopes = {id(s.node): s for s in model.scopes}

        def condition_of(node: cst.CSTNode) -> Optional[str]:
            """The test (a plain name or attribute) of the innermost `if` / conditional expression around `node`,
            when `node` sits in its true branch; "" when nothing guards it; None for any other guard."""
            child = node
            for ancestor in tree.ancestors(node):
                if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                    return ""
                if isinstance(ancestor, cst.IfExp) and child is ancestor.body:
                    return dotted_name(ancestor.test)
                if isinstance(ancestor, cst.If) and child is ancestor.body:
                    return dotted_name(ancestor.test)
                child = ancestor
            return ""

        def note(node: Optional[cst.BaseExpression], where: cst.CSTNode) -> None:
            if isinstance(node, cst.IfExp):
                # `"cuda" if use_cuda else "cpu"`: the choice itself, not a guard
                note(node.body, where)
                note(node.orelse, where)
            elif isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
                kind = node.evaluated_value.split(":")[0]
                if kind in DEVICE_TYPES:
                    survey.add(kind, condition_of(where) if kind != "cpu" else "")
            elif node is not None:
                survey.dynamic = True

        class Literals(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                function = tree.enclosing_function(node)
                scope = scopes.get(id(function)) if function is not None else model.scopes[0]
                qualified = scope.names.qualify(func) if scope is not None else None
                if qualified == "torch.device" and node.args:
                    note(node.args[0].value, node)
                elif isinstance(func, cst.Attribute) and func.attr.value == "cuda" and not qualified:
                    survey.add("cuda", condition_of(node))
                elif isinstance(func, cst.Attribute) and func.attr.value == "to":
                    for arg in node.args:
                        if arg.keyword is None or arg.keyword.value == "device":
                            if not (isinstance(arg.value, (cst.Attribute, cst.Name)) and scope is not None
                                    and scope.names.qualify(arg.value) is not None):  # `.to(torch.float32)`
                                note(arg.value, node)
                for arg in node.args:
                    if arg.keyword is not None and arg.keyword.value == "device":
                        note(arg.value, node)
        # fmt: skip

        visit_read_only(self.module, Literals())
        for region in model.regions:
            if region.spec.device:
                survey.add(region.spec.device.split(":")[0], "")
        return survey

    @functools.cached_property
    def literal_device(self) -> Optional[str]:
        """The device type the file's literals point at: the first non-CPU one, else "cpu", else None."""
        return self.device_survey.literal()

    @functools.cached_property
    def constructs_models(self) -> bool:
        """Does the file build a network itself (`nn.Linear(...)`, an instance of its own `nn.Module` class)?"""
        local_modules = self.local_module_classes
        for scope in self.model.scopes:
            for values in scope.assignments.values():
                for value, _ in values:
                    call = unwrap_method_chain(value)
                    if not isinstance(call, cst.Call):
                        continue
                    qualified = scope.names.qualify(call.func) or ""
                    last = qualified.split(".")[-1]
                    if qualified.startswith("torch.nn.") and last[:1].isupper():
                        return True
                    if dotted_name(call.func) in local_modules:
                        return True
        return False

    @functools.cached_property
    def trains_only_models_built_here(self) -> bool:
        """Is every model the file's optimizers train proved built in this file (`nn.Linear(...)`, its own `nn.Module`
        class)? A model from a call the analysis cannot see into (`build_model(cfg)`), a parameter, or an optimizer
        from elsewhere leaves the device unknown: the factory may well have moved it (issue 44)."""
        optimizers = [
            (value, scope)
            for scope in self.model.scopes
            for values in scope.assignments.values()
            for value, _ in values
            if isinstance(value, cst.Call) and is_optimizer_class(scope.names.qualify(value.func) or "")
        ]
        if not optimizers:
            return False
        for call, scope in optimizers:
            sources = _parameter_sources(call, scope)
            if not sources or not all(self._built_here(key, scope) for key in sources):
                return False
        return True

    def _built_here(self, key: str, scope: Scope) -> bool:
        """Is every value `key` is assigned a network constructed in this file?"""
        if key.startswith("self."):
            key = ".".join(key.split(".")[:2])
            values = [
                (value, owner)
                for owner in self.model.scopes
                if owner.class_name == scope.class_name
                for value, _ in owner.assignments.get(key, [])
            ]
        else:
            key = key.split(".")[0]
            values = []
            for outer in scope.chain():
                if key in outer.params:
                    return False
                if outer.assignments.get(key):
                    values = [(value, outer) for value, _ in outer.assignments[key]]
                    break
        return bool(values) and all(self._constructs_network(value, owner) for value, owner in values)

    def _constructs_network(self, value: cst.BaseExpression, scope: Scope) -> bool:
        call = unwrap_method_chain(value)
        if not isinstance(call, cst.Call):
            return False
        qualified = scope.names.qualify(call.func) or ""
        if qualified.startswith("torch.nn.") and qualified.split(".")[-1][:1].isupper():
            return True
        return dotted_name(call.func) in self.local_module_classes


def _parameter_sources(optimizer: cst.Call, scope: Scope) -> Set[str]:
    """The objects whose `.parameters()` an optimizer is built from (`model`, `self.net.head`), followed through one
    variable (`params = [p for p in model.parameters() if ...]`); empty when the parameters come from elsewhere."""
    if not optimizer.args:
        return set()
    first = next((arg for arg in optimizer.args if arg.keyword is not None and arg.keyword.value == "params"), None)
    value = (first or optimizer.args[0]).value
    found = _parameters_calls(value)
    if not found and isinstance(value, cst.Name):
        for outer in scope.chain():
            if value.value in outer.params:
                return set()
            for assigned, _ in outer.assignments.get(value.value, []):
                found |= _parameters_calls(assigned)
            if outer.assignments.get(value.value):
                break
    return found


def _parameters_calls(value: cst.BaseExpression) -> Set[str]:
    found: Set[str] = set()

    class Parameters(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
                key = dotted_name(func.value)
                if key is not None:
                    found.add(key)

    value.visit(Parameters())
    return found


class DeviceSurvey:
    """The device types a file names in its literals, each with the condition guarding it."""

    def __init__(self) -> None:
        self.kinds: List[str] = []  # in source order
        self.guards: Dict[str, Set[Optional[str]]] = {}  # kind -> guards ("": none; None: an unreadable guard)
        self.dynamic = False  # a device given by a variable or expression (`.to(device)`, `device=args.device`)

    def add(self, kind: str, guard: Optional[str]) -> None:
        self.kinds.append(kind)
        self.guards.setdefault(kind, set()).add(guard)

    def literal(self) -> Optional[str]:
        for kind in self.kinds:
            if kind != "cpu":
                return kind
        return "cpu" if self.kinds else None

    def only_under(self) -> Optional[str]:
        """The one condition every accelerator literal sits under (`if args.cuda: model.cuda()`), or None when some
        accelerator literal is unconditional, guarded otherwise, or there are several accelerators."""
        accelerators = [k for k in self.guards if k != "cpu"]
        if len(accelerators) != 1:
            return None
        guards = self.guards[accelerators[0]]
        if len(guards) != 1:
            return None
        guard = next(iter(guards))
        return guard or None
