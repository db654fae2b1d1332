from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, keyword_arg
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import decorator_target, methods, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

# Decorators that can sit on forward/backward next to custom_fwd/custom_bwd without hiding them.
_HARMLESS = frozenset({"staticmethod", "classmethod", "once_differentiable", "torch.autograd.function.once_differentiable"})


class CustomFwdBwdUnpaired(Rule):
    """
    ## What it does
    Finds a class whose `forward` carries `custom_fwd` while its `backward` has no `custom_bwd`, or
    the reverse.

    ## Why is this bad?
    `custom_bwd` reads `ctx._fwd_used_autocast` and `ctx._dtype`, which only `custom_fwd` sets: alone
    it raises `AttributeError: 'XBackward' object has no attribute '_fwd_used_autocast'`. `custom_fwd`
    alone leaves backward running outside autocast, so float16 saved tensors meet float32 gradients:
    `RuntimeError: expected m1 and m2 to have the same dtype`.

    ## Example
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a.mm(b)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)
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

    ## Fix safety
    Safe. The missing decorator is added, spelled like the present one and with the same
    `device_type` (`cast_inputs` belongs to `custom_fwd` only). No fix when the present decorator
    lacks its required `device_type` (AMP062 first).

    ## References
    - [AMP examples: autocast and custom autograd functions](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions)
    - `torch/amp/autocast_mode.py`: `custom_fwd`, `custom_bwd`
    """

    code = "AMP061"
    name = "custom-fwd-bwd-unpaired"
    summary = "custom_fwd without custom_bwd (or the reverse)"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"custom_[fb]wd",)

    valid = [
        """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad, grad
""",
        # backward inherited from a base class: unknown.
        """
import torch
class Fwd(Base):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, a):
        return a
""",
        # A version-switching wrapper on backward may apply custom_bwd itself.
        """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, a):
        return a

    @staticmethod
    @my_custom_bwd
    def backward(ctx, g):
        return g
""",
    ]
    invalid = [
        Invalid(
            """
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        return a.mm(b)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad
""",
            fixed="""
import torch
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad, grad
""",
        ),
        Invalid(
            """
from torch.amp import custom_bwd
from torch.autograd import Function
from torch.autograd.function import once_differentiable
class Scale(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @once_differentiable
    @custom_bwd(device_type="cpu")
    def backward(ctx, g):
        return g * 2
""",
            fixed="""
from torch.amp import custom_bwd
from torch.autograd import Function
from torch.autograd.function import once_differentiable
from torch.amp import custom_fwd
class Scale(Function):
    @staticmethod
    @custom_fwd(device_type="cpu")
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @once_differentiable
    @custom_bwd(device_type="cpu")
    def backward(ctx, g):
        return g * 2
""",
        ),
        # The deprecated spelling takes no device.
        Invalid(
            """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g
""",
            fixed="""
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, g):
        return g
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for cls in model.classes.values():
            defined = methods(cls)
            forward, backward = defined.get("forward"), defined.get("backward")
            if forward is None or backward is None:
                continue
            fwd = _decorators(model, forward)
            bwd = _decorators(model, backward)
            has_fwd = [d for d, q in fwd if q in names.CUSTOM_FWD]
            has_bwd = [d for d, q in bwd if q in names.CUSTOM_BWD]
            if bool(has_fwd) == bool(has_bwd):
                continue
            present, lacking, lacking_decorators = (has_fwd[0], backward, bwd) if has_fwd else (has_bwd[0], forward, fwd)
            if any(q not in _HARMLESS and not _is_harmless_name(d) for d, q in lacking_decorators):
                continue
            wanted = "custom_bwd" if has_fwd else "custom_fwd"
            yield self.finding(
                lacking.name,
                f"`{cls.name.value}.{lacking.name.value}` lacks `@{wanted}` while "
                f"`{cls.name.value}.{'forward' if has_fwd else 'backward'}` has `@{short(present.decorator, 50)}`: "
                + (
                    "backward runs outside autocast (dtype mismatch)"
                    if has_fwd
                    else "custom_bwd raises AttributeError without custom_fwd"
                ),
                fix=_add_decorator_fix(model, lacking, present, wanted),
                context=cls.name.value,
            )


def _decorators(model: FileModel, function: cst.FunctionDef) -> List[Tuple[cst.Decorator, Optional[str]]]:
    scope = model.scope_of(function)
    table = scope.parent.names if scope is not None and scope.parent is not None else model.module_names
    out = []
    for decorator in function.decorators:
        target, _ = decorator_target(decorator)
        out.append((decorator, table.qualify(target)))
    return out


def _is_harmless_name(decorator: cst.Decorator) -> bool:
    target, _ = decorator_target(decorator)
    return isinstance(target, cst.Name) and target.value in _HARMLESS


def _add_decorator_fix(model: FileModel, function: cst.FunctionDef, present: cst.Decorator, wanted: str) -> Optional[Fix]:
    target, call = decorator_target(present)
    scope = model.scope_of(function)
    table = scope.parent.names if scope is not None and scope.parent is not None else model.module_names
    qualified = table.qualify(target) or ""
    partner = qualified.rsplit(".", 1)[0] + "." + wanted
    deprecated = qualified in names.DEPRECATED_AMP
    builder = FixBuilder(model.module)
    # The partner's spelling: the same attribute chain, a name the file already imports, or a new import.
    if isinstance(target, cst.Attribute):
        func: cst.BaseExpression = target.with_changes(attr=cst.Name(wanted))
    else:
        local = next((n for n, q in _imported(table).items() if q == partner), None)
        if local is None:
            if model.module_names.lookup(wanted) is not None or wanted in model.module_names.own:
                return None
            builder.need_import(partner.rsplit(".", 1)[0], wanted)
            local = wanted
        func = cst.Name(local)
    device = None
    if call is not None:
        device = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device_type"), None)
        if any(a.star for a in call.args):
            return None
    if device is None and not deprecated:
        return None  # torch.amp.custom_fwd needs device_type: AMP062 first
    expr: cst.BaseExpression = func
    if device is not None:
        expr = cst.Call(func=func, args=(keyword_arg("device_type", device.value),))
    new = cst.Decorator(decorator=expr)

    def add(updated: cst.CSTNode) -> cst.CSTNode:
        decorators = list(updated.decorators)
        position = 0
        for index, decorator in enumerate(decorators):
            t, _ = decorator_target(decorator)
            if code_of(t).split(".")[-1] in ("staticmethod", "classmethod"):
                position = index + 1
        first_leading = decorators[0].leading_lines if decorators and position == 0 else None
        decorators.insert(position, new)
        if first_leading is not None:
            decorators[0] = decorators[0].with_changes(leading_lines=first_leading)
            decorators[1] = decorators[1].with_changes(leading_lines=())
        return updated.with_changes(decorators=decorators)

    builder.replace(function, add)
    return builder.build(f"Add `@{code_of(expr)}`", Applicability.SAFE)


def _imported(table) -> dict:
    found = {}
    while table is not None:
        for local, qualified in table.imported.items():
            found.setdefault(local, qualified)
        table = table.parent
    return found
