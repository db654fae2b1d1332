"""The autocast hooks of the model's tree walk, and each autocast spec's arguments read as literals after it.

`AutocastRecorder` is mixed into `builder.ModelBuilder` and reads its stacks (scope, loops, autocast
regions). It makes an `AutocastRegion` for each `with` item and decorator that enters autocast: a call
of `torch.autocast` and friends, a name bound to an autocast instance or factory
(`assignments.AssignmentRecorder` records those bindings), or a function of this file or of another
module of the project that returns one. `with accelerator.autocast():` is a framework's region, kept
apart (`FileModel.framework_regions`). Once the walk has seen every assignment, `resolve_spec` turns a
spec's device, dtype and `enabled` arguments into literals where the file's constants say what they are.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.autocast import (
    BF16_DEFAULT_DEVICES,
    CUDA_LIKE_DEVICES,
    FRAMEWORK_AUTOCAST,
    AutocastBinding,
    AutocastSpec,
    DType,
    autocast_spec,
    is_framework_autocast,
    not_a_library_function,
    wrapper_spec,
)
from amp_lint.analysis.events import AutocastRegion, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.project_hooks import project
from amp_lint.analysis.syntax import literal_bool, literal_string


class AutocastRecorder:
    """The autocast hooks of `ModelBuilder` (its state is set up in `ModelBuilder.__init__`)."""

    def _decorator_region(self, node: cst.FunctionDef) -> Optional[AutocastRegion]:
        for decorator in node.decorators:
            expr = decorator.decorator
            call = expr if isinstance(expr, cst.Call) else None
            qualified = self.qualify(call.func if call else expr)
            if qualified in names.AUTOCAST:
                return AutocastRegion(node=node, spec=autocast_spec(qualified, call))
        return None


    def visit_With(self, node: cst.With) -> None:
        self._enter_compound(node)
        regions = []
        for item in node.items:
            spec = self._autocast_of_with_item(item.item)
            if spec is not None:
                region = AutocastRegion(node=node, spec=spec, item=item, scope=self.scope, loops=tuple(self.loop_stack[-1]))
                regions.append(region)
            elif is_framework_autocast(item.item) and not_a_library_function(self.scope.names.qualify(item.item.func)):
                spec = AutocastSpec(qualified_name=FRAMEWORK_AUTOCAST, call=item.item, enabled=None)
                self.framework_regions.append(AutocastRegion(node=node, spec=spec, item=item, scope=self.scope))
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
            return self._autocast_wrapper(expr.func)
        binding = self._autocast_binding(expr)
        if binding is not None and not binding.is_factory:
            return autocast_spec(binding.qualified_name, binding.call)
        return None

    def _autocast_wrapper(self, func: cst.BaseExpression) -> Optional[AutocastSpec]:
        """`with autocast(self.amp):` where `autocast` is a top-level function of this file returning one."""
        if isinstance(func, cst.Name) and self.qualify(func) is not None:
            found = project().autocast_factory(func.value)  # a function of another module of the project
            if found is None:
                return None
            spec = AutocastSpec(qualified_name=found[0], call=None, device=found[1])
            spec.enabled = found[2]
            return spec
        if not isinstance(func, cst.Name) or not names.binds_at_module_level(self.scope.names, func.value):
            return None
        defined = [s for s in self.module.body if isinstance(s, cst.FunctionDef) and s.name.value == func.value]
        return wrapper_spec(defined[0], self.module_scope.names.qualify) if len(defined) == 1 else None

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



# --- after the walk: the spec's arguments as literals -------------------------------------------------


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
    text = literal_string(expr)
    if text is not None:
        return text
    # device.type where device = torch.device("cuda")
    if isinstance(expr, cst.Attribute) and expr.attr.value == "type":
        inner = _resolve_constant(expr.value, scope, module_scope)
        if isinstance(inner, cst.Call) and scope.names.qualify(inner.func) == "torch.device" and inner.args:
            literal = literal_string(inner.args[0].value)
            if literal is not None:
                return literal.split(":")[0]
    return None


def resolve_spec(spec: AutocastSpec, scope: Scope, module_scope: Scope) -> None:
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
        spec.enabled = literal_bool(_resolve_constant(spec.enabled_node, scope, module_scope))

