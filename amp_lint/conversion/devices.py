"""Choosing the device expression: how to spell the device type where autocast and the GradScaler are emitted."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.names import dotted_name
from amp_lint.conversion.call_sites import argument_for, call_sites
from amp_lint.conversion.file_context import DEVICE_TYPES, FileContext
from amp_lint.conversion.refusals import Refusal

DEVICE_NAME = re.compile(r"(^|_)dev(ice)?s?($|_)", re.IGNORECASE)
# --- device expressions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceExpression:
    """How to spell the device type in one scope: a literal, or an expression over a variable."""

    code: str  # `"cuda"`, `device.type`, `device`, `torch.device(device).type`
    variable: Optional[str] = None  # the variable the expression reads (None for a literal)
    kind: str = "literal"  # literal | torch.device | string | unknown


ACCELERATOR = "torch.accelerator.current_accelerator"


def classify_device_value(value: cst.BaseExpression, scope: Scope) -> Tuple[str, List[str]]:
    """How a value names a device: ("torch.device", []) / ("string", [literals]) / ("unknown", []).

    `torch.accelerator.current_accelerator()` is a `torch.device`, or None on a machine without an
    accelerator: it counts as a `torch.device` only beside a fallback (`... if ... else torch.device("cpu")`,
    or another assignment of the same variable; see :func:`device_kind`), else it is "accelerator".
    """
    if isinstance(value, cst.Call):
        qualified = scope.names.qualify(value.func)
        if qualified == "torch.device":
            return "torch.device", []
        if qualified == ACCELERATOR:
            return "accelerator", []
    if isinstance(value, cst.IfExp):
        body, orelse = classify_device_value(value.body, scope), classify_device_value(value.orelse, scope)
        kinds = {body[0], orelse[0]}
        if kinds <= {"torch.device", "accelerator"} and "torch.device" in kinds:
            return "torch.device", []
        if kinds == {"string"}:
            return "string", body[1] + orelse[1]
        return "unknown", []
    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        return "string", [value.evaluated_value]
    return "unknown", []


def device_kind(kinds: Sequence[Tuple[str, List[str]]]) -> Tuple[str, List[str]]:
    """The kind of a variable from the kinds of all its assignments (an accelerator with a fallback is a device)."""
    names = {kind for kind, _ in kinds}
    literals = [s for _, strings in kinds for s in strings]
    if names <= {"torch.device", "accelerator"} and "torch.device" in names:
        return "torch.device", []
    if len(names) == 1:
        return next(iter(names)), literals
    return "unknown", []


class DeviceResolver:
    def __init__(self, ctx: FileContext, explicit: Optional[str], torch_name: Callable[[Scope], str]) -> None:
        self.ctx = ctx
        self.explicit = explicit.split(":")[0] if explicit else None
        self.torch_name = torch_name
        self.builder_string: Callable[[str], str] = lambda s: f'"{s}"'

    def literal(self) -> DeviceExpression:
        kind = self.explicit or self.ctx.literal_device or self.default_kind()
        return DeviceExpression(self.builder_string(kind))

    def default_kind(self) -> str:
        return default_device_kind(self.ctx)

    def conditional(self, scope: Scope) -> Optional[DeviceExpression]:
        """`if args.cuda: model.cuda()` (every accelerator literal under one test): `"cuda" if args.cuda else "cpu"`,
        when the test's name is visible in `scope`."""
        guard = self.ctx.device_survey.only_under()
        if guard is None:
            return None
        root = guard.split(".")[0]
        if root == "self" or not any(root in outer.params or root in outer.assignments for outer in scope.chain()):
            return None
        kind = next(k for k in self.ctx.device_survey.guards if k != "cpu")
        code = f"{self.builder_string(kind)} if {guard} else {self.builder_string('cpu')}"
        return DeviceExpression(code, root, "conditional")

    def dotted(self, scope: Scope, transfers: Set[str]) -> Optional[DeviceExpression]:
        """`model.to(args.device)`, `device=cfg.device`: `torch.device(args.device).type`, when `args` is visible."""
        for key in sorted(transfers):
            root, _, rest = key.partition(".")
            if not rest or root == "self" or not DEVICE_NAME.search(key.split(".")[-1]):
                continue
            if any(root in outer.params or root in outer.assignments for outer in scope.chain()):
                return DeviceExpression(f"{self.torch_name(scope)}.device({key}).type", root, "unknown")
        return None

    def for_variable(self, name: str, kind: str, literals: Sequence[str], scope: Scope) -> DeviceExpression:
        if kind == "torch.device":
            return DeviceExpression(f"{name}.type", name, "torch.device")
        if kind == "string" and literals and all(":" not in s and s in DEVICE_TYPES for s in literals):
            return DeviceExpression(name, name, "string")
        return DeviceExpression(f"{self.torch_name(scope)}.device({name}).type", name, "unknown")

    def resolve(self, scope: Scope, before: Optional[int], transfers: Set[str]) -> DeviceExpression:
        """The device expression for code emitted in `scope` at source position `before`."""
        if self.explicit:
            return self.literal()
        found = self.variable(scope, before, transfers)
        if found is None:
            found = self.dotted(scope, transfers)
        if found is None:
            found = self.conditional(scope)
        return found if found is not None else self.literal()

    def variable(self, scope: Scope, before: Optional[int], transfers: Set[str]) -> Optional[DeviceExpression]:
        candidates: List[Tuple[int, str, DeviceExpression]] = []
        for outer in scope.chain():
            for name, values in outer.assignments.items():
                if "." in name or not values:
                    continue
                if outer.names.lookup(name) is not None:
                    continue
                kind, literals = device_kind([classify_device_value(value, outer) for value, _ in values])
                if kind in ("unknown", "accelerator"):
                    continue
                if kind == "string" and not DEVICE_NAME.search(name):
                    continue
                if outer is scope and before is not None:
                    statement = values[0][1]
                    if statement is None or self.ctx.tree.position(statement) >= before:
                        continue
                if any(name in inner.params or (name in inner.assignments) for inner in scopes_between(scope, outer)):
                    continue  # shadowed by an inner scope
                rank = (0 if name in transfers else 1) + (0 if DEVICE_NAME.search(name) else 2)
                candidates.append((rank, name, self.for_variable(name, kind, literals, outer)))
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

    def _device_attribute(self, scope: Scope, transfers: Set[str]) -> Optional[DeviceExpression]:
        """`self.device`, set in the class and used for transfers in this method."""
        if scope.class_name is None:
            return None
        for key in sorted(transfers):
            if not key.startswith("self.") or key.count(".") != 1 or not DEVICE_NAME.search(key[5:]):
                continue
            values = [
                (value, owner)
                for owner in self.ctx.model.scopes
                if owner.class_name == scope.class_name
                for value, _ in owner.assignments.get(key, [])
            ]
            if not values:
                continue
            kind, _ = device_kind([classify_device_value(value, owner) for value, owner in values])
            if kind == "torch.device":
                return DeviceExpression(f"{key}.type", key, "torch.device")
            return DeviceExpression(f"{self.torch_name(scope)}.device({key}).type", key, "unknown")
        return None

    def _device_parameter(self, scope: Scope, transfers: Set[str]) -> Optional[DeviceExpression]:
        """A `device` parameter: its type comes from what the call sites in this file pass."""
        for param, annotation in scope.params.items():
            if not DEVICE_NAME.search(param):
                continue
            if param not in transfers and (annotation is None or "device" not in code_of(annotation)):
                continue
            if _defaults_to_none(scope, param):
                raise Refusal(
                    f"`{param}` defaults to None (the model stays where it is), so the device type cannot be derived "
                    "from it: set the `amp-device` option to convert"
                )
            if annotation is not None and "torch.device" in code_of(annotation):
                return DeviceExpression(f"{param}.type", param, "torch.device")
            kinds = self.argument_kinds(scope, param)
            if kinds and all(k == "torch.device" for k, _ in kinds):
                return DeviceExpression(f"{param}.type", param, "torch.device")
            if kinds and all(k == "string" for k, _ in kinds):
                literals = [s for _, strings in kinds for s in strings]
                return self.for_variable(param, "string", literals, scope)
            return DeviceExpression(f"{self.torch_name(scope)}.device({param}).type", param, "unknown")
        return None

    def argument_kinds(self, function_scope: Scope, param: str) -> List[Tuple[str, List[str]]]:
        """How each call site in the file passes `param`: the kind of the value, followed through one name."""
        function = function_scope.node
        assert isinstance(function, cst.FunctionDef)
        kinds: List[Tuple[str, List[str]]] = []
        for call, caller in call_sites(self.ctx, function):
            arg = argument_for(function, call, param)
            if arg is None:
                return []
            value = arg.value
            key = dotted_name(value)
            if isinstance(value, cst.Name) and caller is not None:
                values = assignments_in_chain(caller, value.value)
                if values is None:
                    return []
                kind, literals = device_kind([classify_device_value(v, owner) for v, owner in values])
                if kind in ("unknown", "accelerator"):
                    return []
                kinds.append((kind, literals))
            elif key is None and caller is not None:
                kinds.append(classify_device_value(value, caller))
            else:
                return []
        return kinds


def default_device_kind(ctx: FileContext) -> str:
    """No device literal in the file: a script proved to build every network it trains and never to move anything
    trains on the CPU; otherwise (a model from a factory or a caller, or moved by an expression AMP100 cannot read)
    it is on a device the analysis cannot know, and CUDA, the documented default, is assumed."""
    if not ctx.device_survey.dynamic and ctx.trains_only_models_built_here:
        return "cpu"
    return "cuda"


def _defaults_to_none(scope: Scope, param: str) -> bool:
    function = scope.node
    if not isinstance(function, cst.FunctionDef):
        return False
    params = function.params
    for candidate in [*params.posonly_params, *params.params, *params.kwonly_params]:
        if candidate.name.value == param:
            default = candidate.default
            return isinstance(default, cst.Name) and default.value == "None"
    return False


def scopes_between(scope: Scope, outer: Scope) -> List[Scope]:
    """Scopes from `scope` up to (not including) `outer`."""
    result = []
    for current in scope.chain():
        if current is outer:
            break
        result.append(current)
    return result


def assignments_in_chain(scope: Scope, name: str) -> Optional[List[Tuple[cst.BaseExpression, Scope]]]:
    for outer in scope.chain():
        if name in outer.params:
            return None
        values = outer.assignments.get(name)
        if values:
            return [(value, outer) for value, _ in values]
    return None


def has_run_time_device(model: FileModel) -> bool:
    """The device is chosen at run time: `torch.accelerator.current_accelerator()`, `torch.device(args.device)`,
    `"cuda" if torch.cuda.is_available() else "cpu"`. Checks that depend on the device then assume it may be CUDA."""
    for scope in model.scopes:
        for values in scope.assignments.values():
            for value, _ in values:
                if _chosen_at_run_time(value, scope):
                    return True
    return False


def _chosen_at_run_time(value: cst.BaseExpression, scope: Scope) -> bool:
    if isinstance(value, cst.IfExp):
        kind, literals = classify_device_value(value, scope)
        return kind == "torch.device" or (kind == "string" and any(s.split(":")[0] in DEVICE_TYPES for s in literals))
    if not isinstance(value, cst.Call):
        return False
    qualified = scope.names.qualify(value.func)
    if qualified == ACCELERATOR:
        return True
    if qualified == "torch.device":
        return not (value.args and isinstance(value.args[0].value, cst.SimpleString))
    return False
