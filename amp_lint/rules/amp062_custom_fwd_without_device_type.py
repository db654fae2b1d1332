from __future__ import annotations

from typing import Dict, Iterator, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, keyword_arg, with_call_args
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.rules._helpers import file_devices, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_NEEDS_DEVICE = frozenset(
    {
        "torch.amp.custom_fwd",
        "torch.amp.custom_bwd",
        "torch.amp.autocast_mode.custom_fwd",
        "torch.amp.autocast_mode.custom_bwd",
    }
)


class CustomFwdWithoutDeviceType(Rule):
    """
    ## What it does
    Finds `torch.amp.custom_fwd` / `torch.amp.custom_bwd` used without their required keyword
    `device_type`: a bare `@torch.amp.custom_fwd`, or `@torch.amp.custom_fwd(cast_inputs=...)`.

    ## Why is this bad?
    Unlike the deprecated `torch.cuda.amp.custom_fwd`, the device-generic decorators require
    `device_type`: the class definition fails at import time with `TypeError: custom_fwd() missing 1
    required keyword-only argument: 'device_type'`. It usually comes from copying the bare
    `@custom_fwd` of the AMP examples after switching the import to `torch.amp`.

    ## Example
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd
        def forward(ctx, a, b): ...
    ```

    ## Use instead
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, a, b): ...
    ```

    ## Fix safety
    Unsafe: `device_type` is added only when the file's autocast regions (or deprecated
    `torch.cuda.amp` uses) name exactly one device type, and that choice is the linter's guess.
    Otherwise reported only.

    ## References
    - `torch/amp/autocast_mode.py`: `custom_fwd(fwd=None, *, device_type, cast_inputs=None)`, `custom_bwd`
    - [AMP examples: autocast and custom autograd functions](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions)
    """

    code = "AMP062"
    name = "custom-fwd-without-device-type"
    summary = "torch.amp.custom_fwd / custom_bwd without device_type"
    severity = Severity.ERROR
    fix_applicability = Applicability.UNSAFE
    needs = (r"custom_[fb]wd",)

    valid = [
        """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x):
        return x
""",
        # The deprecated spelling needs no device_type (AMP073 reports it).
        """
from torch.cuda.amp import custom_fwd
class F(Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x
""",
        # A version switch between spellings: which import runs is unknown.
        """
try:
    from torch.cuda.amp import custom_fwd
except ImportError:
    from torch.amp import custom_fwd
class F(Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x
""",
        # A version switch that binds the device with partial.
        """
import functools
import torch
custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
class F(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x
""",
    ]
    invalid = [
        Invalid(
            """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.amp.custom_bwd
    def backward(ctx, g):
        return g

def run(x):
    with torch.autocast("cuda"):
        return F.apply(x)
""",
            fixed="""
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        return g

def run(x):
    with torch.autocast("cuda"):
        return F.apply(x)
""",
            count=2,
        ),
        Invalid(
            """
from torch.amp import custom_fwd
class F(Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        devices = file_devices(model)
        ambiguous = _names_imported_twice(model)
        for functions in model.functions.values():
            for function in functions:
                scope = model.scope_of(function)
                table = scope.parent.names if scope is not None and scope.parent is not None else model.module_names
                for decorator in function.decorators:
                    expr = decorator.decorator
                    head = dotted_name(expr.func if isinstance(expr, cst.Call) else expr)
                    if head is not None and head.split(".")[0] in ambiguous:
                        continue  # `try: from torch.cuda.amp import ... except ImportError: from torch.amp import ...`
                    if isinstance(expr, cst.Call):
                        qualified = table.qualify(expr.func)
                        if qualified not in _NEEDS_DEVICE or _has_device(expr):
                            continue
                    else:
                        qualified = table.qualify(expr)
                        if qualified not in _NEEDS_DEVICE:
                            continue
                    yield self._finding(model, decorator, expr, qualified, devices, scope)
        for site in model.call_sites:
            if site.qualified_name in _NEEDS_DEVICE and not _has_device(site.call) and not _is_decorator(model, site.call):
                yield self.finding(
                    site.call,
                    f"`{short(site.call)}` lacks the required keyword device_type: TypeError",
                    context=site.scope.name,
                )

    def _finding(self, model, decorator, expr, qualified, devices, scope) -> Finding:
        return self.finding(
            decorator,
            f"`@{short(expr)}` lacks the required keyword device_type: TypeError when the class is defined",
            fix=_device_fix(model, decorator, devices),
            context=scope.parent.name if scope is not None and scope.parent is not None else "",
        )


def _names_imported_twice(model: FileModel) -> Set[str]:
    """Local names bound by more than one import (a version switch): which one runs is unknown."""
    seen: Dict[str, int] = {}
    for statement, _ in model.imports:
        if isinstance(statement.names, cst.ImportStar):
            continue
        for alias in statement.names:
            local = alias.asname.name if alias.asname is not None else alias.name
            key = dotted_name(local) if isinstance(local, (cst.Name, cst.Attribute)) else None
            if key is not None:
                head = key.split(".")[0]
                seen[head] = seen.get(head, 0) + 1
    return {name for name, count in seen.items() if count > 1 and name != "torch"}


def _has_device(call: cst.Call) -> bool:
    return any((a.keyword is not None and a.keyword.value == "device_type") or a.star == "**" for a in call.args)


def _is_decorator(model: FileModel, call: cst.Call) -> bool:
    for functions in model.functions.values():
        for function in functions:
            if any(d.decorator is call for d in function.decorators):
                return True
    return False


def _device_fix(model: FileModel, decorator: cst.Decorator, devices) -> Optional[Fix]:
    if len(devices) != 1:
        return None
    builder = FixBuilder(model.module)
    literal = builder.string(next(iter(devices)))
    device = keyword_arg("device_type", cst.SimpleString(literal))

    def add(updated: cst.CSTNode) -> cst.CSTNode:
        expr = updated.decorator
        if isinstance(expr, cst.Call):
            return updated.with_changes(decorator=with_call_args(expr, [*expr.args, device]))
        return updated.with_changes(decorator=cst.Call(func=expr, args=(device,)))

    builder.replace(decorator, add)
    return builder.build(f"Add device_type={literal}", Applicability.UNSAFE)
