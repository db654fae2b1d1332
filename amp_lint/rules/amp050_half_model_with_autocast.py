from __future__ import annotations

from typing import Iterator, Optional, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.model import CallSite, FileModel
from amp_lint.rules._helpers import same_binding, short, sites_compatible
from amp_lint.rules.base import Finding, Invalid, Rule


class HalfModelWithAutocast(Rule):
    """
    ## What it does
    Finds a model converted to half precision (`model.half()`, `model.bfloat16()`,
    `model.to(torch.float16)`) that is also called inside an enabled autocast region.

    ## Why is this bad?
    "You should not call `half()` or `bfloat16()` on your model(s) or inputs when using autocasting."
    Autocast expects float32 parameters (the master weights): with float16 parameters small updates
    round away (96.5 % of the weights unchanged after one SGD step at lr=1e-4 in a CPU reproduction),
    and GradScaler raises `ValueError: Attempting to unscale FP16 gradients.`

    ## Example
    ```python
    model = Net().cuda().half()
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    ```

    ## Use instead
    ```python
    model = Net().cuda()
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    ```

    ## Fix safety
    No automatic fix. Intentional pure-bfloat16 training without autocast is not reported. Off by
    default (heuristic): the model is recognised by being called inside the autocast region.

    ## References
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) docstring
    - `torch/amp/grad_scaler.py`: `GradScaler._unscale_grads_` (`allow_fp16=False`)
    """

    code = "AMP050"
    name = "half-model-with-autocast"
    summary = "Model converted with .half()/.bfloat16() and also run under autocast"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"\bautocast\b", r"half|bfloat16|float16|\bto\b")

    valid = [
        """
import torch
model = Net().cuda()
with torch.autocast("cuda"):
    out = model(x)
""",
        # Pure half precision, no autocast.
        """
model = Net().cuda().half()
out = model(x.half())
""",
        # One or the other, chosen at run time.
        """
import torch
if args.pure_fp16:
    model.half()
    out = model(x)
else:
    with torch.autocast("cuda"):
        out = model(x)
""",
        # A tensor cast, not a module.
        """
import torch
x = x.half()
with torch.autocast("cuda"):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
model = Net().cuda().half()
with torch.autocast("cuda"):
    loss = loss_fn(model(x), y)
"""
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, net):
        self.model = net.to(torch.bfloat16)

    def step(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.model(x)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        casts = list(_half_casts(model))
        if not casts:
            return
        for key, cast_site, how in casts:
            for site in model.call_sites:
                if site.func != key or site.in_enabled_autocast() is None:
                    continue
                if not same_binding(model, key, cast_site.scope, site.scope):
                    continue
                if site.scope is cast_site.scope and not sites_compatible(site, cast_site):
                    continue
                yield self.finding(
                    cast_site.call,
                    f"`{short(cast_site.call)}` turns `{key}` to {how}, and `{short(site.call, 40)}` runs it under "
                    "autocast: keep the parameters in float32 and let autocast choose per-op dtypes",
                    confidence=Confidence.HIGH
                    if site.scope is cast_site.scope and site.in_enabled_autocast().spec.enabled is True
                    else Confidence.MEDIUM,
                    context=cast_site.scope.name,
                )
                break


def _half_casts(model: FileModel) -> Iterator[Tuple[str, CallSite, str]]:
    """(module key, the cast call, "float16"/"bfloat16") for in-place casts and assignments of a cast."""
    by_value = {id(a.value): a for a in model.assignment_sites}
    for site in model.call_sites:
        how = _cast_dtype(site)
        if how is None or site.receiver is None:
            continue
        statement_value = getattr(site.small_statement, "value", None)
        if isinstance(site.small_statement, cst.Expr) and statement_value is site.call and site.func:
            yield site.func.rsplit(".", 1)[0], site, how  # `model.half()`: modules convert in place
        elif id(site.call) in by_value:
            yield by_value[id(site.call)].target, site, how


def _cast_dtype(site: CallSite) -> Optional[str]:
    method = site.method
    if method in ("half", "bfloat16") and not site.call.args:
        return "float16" if method == "half" else "bfloat16"
    if method == "to":
        for arg in site.call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            qualified = site.scope.names.qualify(arg.value)
            if qualified in names.FLOAT16:
                return "float16"
            if qualified in names.BFLOAT16:
                return "bfloat16"
    return None
