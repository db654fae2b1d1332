from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Invalid, Rule

# Tensor methods whose result is a tensor, never a callable.
_TENSOR_METHODS = frozenset(
    {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "view", "reshape", "permute", "contiguous",
     "detach", "clone", "unsqueeze", "squeeze", "flatten", "transpose", "sum", "mean"}
)
# Modules whose functions return tensors (torch.randn, F.linear, torch.fft.fft, ...), and the top-level
# torch callables that do not (a decorator, a context manager, a compiled callable).
_TENSOR_MODULES = frozenset({"torch", "torch.nn.functional", "torch.fft", "torch.linalg", "torch.special"})
_NOT_TENSORS = frozenset(
    {"compile", "no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "autocast", "vmap", "device",
     "Generator", "Size", "dtype", "Stream", "Event", "cond", "while_loop", "get_autocast_dtype"}
)


class AutocastAppliedToTensor(Rule):
    """
    ## What it does
    Finds an autocast object called on a tensor, `torch.autocast("cuda")(x)`, instead of being entered
    with `with` or used to decorate a function.

    ## Why is this bad?
    Calling an autocast instance means "decorate this function". On torch 2.13 a tensor argument raises
    `TypeError: autocast()(func) requires a callable, but got Tensor. Did you mean to use autocast as a
    context manager?` (checked on the CPU build). Releases before that check wrapped the tensor in a
    function and returned the wrapper: nothing ran under autocast, and the "result" was not a tensor.

    ## Example
    ```python
    out = torch.autocast("cuda")(model(x))
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        out = model(x)
    ```

    ## Fix safety
    No fix: what was meant to run under autocast is the author's call. Reported only when the argument
    is certainly not callable: an arithmetic expression, a subscript, a literal, a tensor method call
    (`x.to(...)`, `x.float()`), a function of `torch`, `torch.nn.functional`, `torch.fft`, `torch.linalg`
    or `torch.special` that returns a tensor, a call of a model, or a name bound to one of these in the
    same function.

    ## References
    - `torch/amp/autocast_mode.py` (torch 2.13): `autocast.__call__` raises `TypeError` for a
      non-callable, else returns `autocast_decorator(self, func)`
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast): "can also be used
      as a decorator"
    """

    code = "AMP056"
    name = "autocast-applied-to-tensor"
    summary = "An autocast object called on a tensor (TypeError in torch 2.13; a no-op wrapper before)"
    severity = Severity.ERROR
    needs = (r"\bautocast\b",)
    ast_needs = (r"autocast_applied",)  # an autocast call called, or a name bound to one (parse.prefilter)

    valid = [
        """
import torch
forward = torch.autocast("cuda")(model.forward)
step = torch.autocast("cuda", dtype=torch.bfloat16)(train_step)
""",
        """
import torch
@torch.autocast("cuda")
def forward(x):
    return model(x)
""",
        # Unknown: a parameter may be a function.
        """
import torch
def wrap(fn):
    return torch.autocast("cuda")(fn)
""",
        """
import torch
wrapped = torch.autocast("cuda")(lambda t: model(t))
graphed = torch.autocast("cuda")(torch.cuda.make_graphed_callables(step, (x,)))
compiled = torch.autocast("cuda")(torch.compile(model))
""",
    ]
    invalid = [
        Invalid(
            """
import torch
out = torch.autocast("cuda")(model(x))
"""
        ),
        Invalid(
            """
import torch
def step(x, y):
    x = x.to("cuda", non_blocking=True)
    return torch.autocast("cuda", dtype=torch.float16)(x)
"""
        ),
        Invalid(
            """
from torch.cuda.amp import autocast
ctx = autocast()
y = ctx(x * 2)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        autocast_calls = {id(call) for call, _, _ in model.autocast_calls}
        bound = {id(a.value): a for a in model.assignment_sites if id(a.value) in autocast_calls}
        for site in model.call_sites:
            func = site.call.func
            applied = None
            if isinstance(func, cst.Call) and id(func) in autocast_calls:
                applied = func
            elif isinstance(func, cst.Name):
                applied = _bound_autocast(model, site, func.value, bound)
            if applied is None or len(site.call.args) != 1 or site.call.args[0].keyword is not None or site.call.args[0].star:
                continue
            arg = site.call.args[0].value
            if not _certainly_tensor(model, site.scope, arg):
                continue
            yield self.finding(
                site.call,
                f"`{short(site.call)}` calls an autocast object on a tensor: TypeError in torch 2.13 (autocast()(func) "
                "requires a callable), a wrapper that runs nothing under autocast before; use `with` around the code",
                context=site.scope.name,
            )


def _bound_autocast(model: FileModel, site: CallSite, name: str, bound) -> Optional[cst.Call]:
    """`ctx = torch.autocast(...)` in the same scope, assigned once: the autocast call."""
    assignments = site.scope.assignments.get(name, [])
    if len(assignments) != 1:
        return None
    value = assignments[0][0]
    return value if id(value) in bound else None


def _certainly_tensor(model: FileModel, scope: Scope, expr: cst.BaseExpression, depth: int = 0) -> bool:
    if isinstance(expr, (cst.BinaryOperation, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString, cst.List, cst.Tuple)):
        return True
    if isinstance(expr, cst.Call):
        func = expr.func
        qualified = scope.names.qualify(func)
        if qualified is not None:
            module, _, function = qualified.rpartition(".")
            return module in _TENSOR_MODULES and function[:1].islower() and function not in _NOT_TENSORS
        if isinstance(func, cst.Attribute) and func.attr.value in _TENSOR_METHODS:
            return True
        name = dotted_name(func)
        return name is not None and name.split(".")[-1] in ("model", "net", "module", "encoder", "decoder")
    if isinstance(expr, cst.Name) and depth < 3:
        # Every assignment of the name in this function makes a tensor (a bare parameter is unknown).
        assignments = scope.assignments.get(expr.value, [])
        return bool(assignments) and all(_certainly_tensor(model, scope, value, depth + 1) for value, _ in assignments)
    return False
