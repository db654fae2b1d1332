from __future__ import annotations

from typing import Iterator

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.rules._helpers import LOWER_PRECISION_METHODS, LOWER_PRECISION_OPS, class_bases, methods, short
from amp_lint.rules.base import Finding, Invalid, Rule

_FUNCTION = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})


class CustomFunctionWithoutCustomFwd(Rule):
    """
    ## What it does
    Finds a custom `torch.autograd.Function` whose `forward` has no `custom_fwd` decorator, runs
    matmul-like ops, and is applied (`MyFn.apply(...)`) inside an enabled autocast region.

    ## Why is this bad?
    `forward` runs under autocast, so it saves float16 tensors, but `backward` runs outside it: the
    float16 saved tensors meet float32 gradients and `backward` fails with `RuntimeError: expected m1
    and m2 to have the same dtype, but got: c10::Half != float`. Changes are required "if any function
    takes multiple floating-point Tensor inputs, wraps any autocastable op, or requires a particular
    dtype".

    ## Example
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a.mm(b)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)

    with torch.autocast("cuda"):
        out = MyMM.apply(x, w)
    ```

    ## Use instead
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a.mm(b)

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)
    ```
    For a function that needs float32, use `custom_fwd(device_type="cuda", cast_inputs=torch.float32)`.

    ## Fix safety
    No automatic fix: whether the function needs `cast_inputs` is a design decision. Off by default
    (heuristic), medium confidence.

    ## References
    - [AMP examples: autocast and custom autograd functions](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions)
    - `torch/amp/autocast_mode.py`: `custom_fwd`, `custom_bwd`
    """

    code = "AMP060"
    name = "custom-function-without-custom-fwd"
    summary = "Custom autograd.Function under autocast without custom_fwd/custom_bwd"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"Function", r"autocast", r"apply")

    valid = [
        """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, a, b):
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad, grad

with torch.autocast("cuda"):
    out = MyMM.apply(x, w)
""",
        # Not applied under autocast.
        """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a.mm(b)

out = MyMM.apply(x, w)
""",
        # Elementwise only.
        """
import torch
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(0, 1)

with torch.autocast("cuda"):
    out = Clamp.apply(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad.mm(b.t()), a.t().mm(grad)

with torch.autocast("cuda"):
    out = MyMM.apply(x, w)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for cls in model.classes.values():
            if not any(base in _FUNCTION for base in class_bases(model, cls)):
                continue
            defined = methods(cls)
            forward = defined.get("forward")
            if forward is None or _has_custom_fwd(model, forward):
                continue
            if not any(_runs_matmul(model, defined[m]) for m in ("forward", "backward") if m in defined):
                continue
            name = cls.name.value
            applied = {f"{name}.apply"} | {
                a.target for a in model.assignment_sites if "." not in a.target and _is_apply(a.value, name)
            }
            for site in model.call_sites:
                if site.func in applied and site.in_enabled_autocast() is not None:
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 40)}` runs the custom autograd.Function `{name}` under autocast, but its "
                        "forward has no @torch.amp.custom_fwd: backward runs outside autocast on float16 saved "
                        "tensors (dtype mismatch); add custom_fwd/custom_bwd",
                        confidence=Confidence.MEDIUM,
                        context=site.scope.name,
                    )
                    break


def _is_apply(value: cst.BaseExpression, name: str) -> bool:
    return (
        isinstance(value, cst.Attribute)
        and value.attr.value == "apply"
        and isinstance(value.value, cst.Name)
        and value.value.value == name
    )


def _has_custom_fwd(model: FileModel, function: cst.FunctionDef) -> bool:
    scope = model.scope_of(function)
    table = scope.parent.names if scope is not None and scope.parent is not None else model.module_names
    for decorator in function.decorators:
        expr = decorator.decorator
        target = expr.func if isinstance(expr, cst.Call) else expr
        qualified = table.qualify(target)
        if qualified in names.CUSTOM_FWD or qualified is None and "custom_fwd" in (getattr(target, "value", "") or ""):
            return True
        if isinstance(target, cst.Name) and "custom_fwd" in target.value:
            return True
    return False


def _runs_matmul(model: FileModel, function: cst.FunctionDef) -> bool:
    scope = model.scope_of(function)
    for site in model.call_sites:
        if site.scope is not scope:
            continue
        if site.qualified_name in LOWER_PRECISION_OPS:
            return True
        if site.qualified_name is None and site.method in LOWER_PRECISION_METHODS:
            return True
    return False
