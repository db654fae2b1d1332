from __future__ import annotations

from typing import Dict, Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.autocast import DType
from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.rules._helpers import LOWER_PRECISION_METHODS, LOWER_PRECISION_OPS, short
from amp_lint.rules.base import Finding, Invalid, Rule


class ManualCastInAutocast(Rule):
    """
    ## What it does
    Finds manual casts inside an enabled autocast region that do not do what they look like:
    `.float()` / `.to(torch.float32)` on an input of a matmul-like op (`torch.mm`, `F.linear`,
    `x.matmul(...)`), and `.half()` / `.to(torch.float16)` on tensors.

    ## Why is this bad?
    Inside autocast, ops on the lower-precision list cast their inputs themselves:
    `torch.mm(a.float(), b.float())` still runs in float16. The documented way to force float32 is a
    nested `torch.autocast(..., enabled=False)` plus `.float()` on the inputs. `.half()` is redundant
    for float16-list ops, loses precision before float32-list ops, and forces float16 on the others
    (inside bfloat16 autocast it brings float16's overflow range back).

    ## Example
    ```python
    with torch.autocast("cuda"):
        scores = torch.mm(q.float(), k.float().t())
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        with torch.autocast("cuda", enabled=False):
            scores = torch.mm(q.float(), k.float().t())
    ```

    ## Fix safety
    No automatic fix. Off by default (heuristic); `.half()` findings are at medium confidence.

    ## References
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) docstring
    - [AMP: Op Eligibility](https://docs.pytorch.org/docs/stable/amp.html#op-eligibility)
    """

    code = "AMP051"
    name = "manual-cast-in-autocast"
    summary = "Manual .float()/.half() casts inside autocast that autocast overrides"
    severity = Severity.INFO
    default_enabled = False
    needs = (r"\bautocast\b", r"float|half|\bto\b")

    valid = [
        """
import torch
with torch.autocast("cuda"):
    out = model(x)
loss = loss_fn(out.float(), y)
""",
        # The documented float32 subregion.
        """
import torch
with torch.autocast("cuda"):
    h = model(x)
    with torch.autocast("cuda", enabled=False):
        out = torch.mm(h.float(), w.float())
""",
        # .float() before an op autocast does not touch is effective.
        """
import torch
with torch.autocast("cuda"):
    logits = model(x)
    probs = torch.softmax(logits.float(), dim=-1)
""",
        # A test harness switching between pure float16 and autocast.
        """
import torch
with torch.autocast("cuda", enabled=use_autocast):
    if use_pure_fp16:
        x = x.half()
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.autocast("cuda"):
    scores = torch.mm(q.float(), k)
"""
        ),
        Invalid(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = encoder(x).half()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        parents = _lower_precision_inputs(model)
        for site in model.call_sites:
            region = site.in_enabled_autocast()
            if region is None:
                continue
            dtype = _cast(site)
            if dtype == "float32" and id(site.call) in parents:
                op = parents[id(site.call)]
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 40)}` does not make `{short(op.call, 40)}` run in float32: autocast casts its "
                    "inputs to the low precision anyway; use a nested autocast(enabled=False) for float32",
                    context=site.scope.name,
                )
            elif dtype == "float16" and site.method is not None and region.spec.enabled is True:
                # (A region switched on at run time often alternates with a pure-float16 mode.)
                what = (
                    "forces float16 inside bfloat16 autocast"
                    if region.spec.dtype is DType.BF16
                    else "is redundant under autocast (and loses precision before float32 ops)"
                )
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 40)}` {what}; let autocast choose the dtype",
                    confidence=Confidence.MEDIUM,
                    context=site.scope.name,
                )


def _cast(site: CallSite) -> Optional[str]:
    method = site.method
    if method == "float" and not site.call.args:
        return "float32"
    if method == "half" and not site.call.args:
        return "float16"
    if method in ("to", "type"):
        for arg in site.call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            qualified = site.scope.names.qualify(arg.value)
            if qualified in names.FLOAT16:
                return "float16"
            if qualified in ("torch.float32", "torch.float"):
                return "float32"
    return None


def _lower_precision_inputs(model: FileModel) -> Dict[int, CallSite]:
    """id(call) -> the matmul-like op it is a direct input of (argument, or receiver of x.mm(...))."""
    found: Dict[int, CallSite] = {}
    for site in model.call_sites:
        if site.qualified_name in LOWER_PRECISION_OPS:
            inputs = [a.value for a in site.call.args]
        elif site.method in LOWER_PRECISION_METHODS and site.qualified_name is None:
            inputs = [a.value for a in site.call.args]
            if site.receiver is not None:
                inputs.append(site.receiver)
        else:
            continue
        for value in inputs:
            if isinstance(value, cst.Call):
                found[id(value)] = site
    return found
