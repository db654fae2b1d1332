from __future__ import annotations

from typing import Iterator

import libcst as cst

from amp_lint.analysis.autocast import DType
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Severity
from amp_lint.rules._accelerate import accelerators_of, prepared_by, reaching
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Invalid, Rule



class AccelerateManualAmp(Rule):
    """
    ## What it does
    Finds `Accelerator(mixed_precision="fp16" or "bf16")` combined with a hand-made GradScaler on the
    prepared optimizer (`scaler.step(optimizer)`, `scaler.unscale_(optimizer)`,
    `accelerator.backward(scaler.scale(loss))`), or with a `torch.autocast` of the other half-precision
    dtype around the prepared model.

    ## Why is this bad?
    With `mixed_precision` set, `accelerator.prepare` wraps the model's forward in autocast and the
    optimizer in an `AcceleratedOptimizer` that shares the accelerator's own GradScaler, and
    `accelerator.backward(loss)` scales the loss with it. A second scaler scales the loss twice and
    unscales and steps an optimizer whose gradients the accelerator's scaler also owns; an outer autocast
    of another dtype is overridden inside the model by the prepared forward.

    ## Example
    ```python
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    scaler = torch.amp.GradScaler("cuda")
    accelerator.backward(scaler.scale(loss))
    scaler.step(optimizer)
    ```

    ## Use instead
    ```python
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.backward(loss)
    optimizer.step()
    ```

    ## Fix safety
    No fix. Reported only for a literal `mixed_precision` and names bound by `accelerator.prepare(...)`
    in this file; the precision is that of the Accelerator whose binding reaches the call (the same
    function, an enclosing one, or `self.accelerator` of the same class), never another function's.

    ## References
    - [Accelerate: mixed precision](https://huggingface.co/docs/accelerate/concept_guides/performance)
      and `Accelerator.backward` ("Should be used in lieu of `loss.backward()`"; it scales the loss)
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.scale`, `step`
    """

    code = "AMP093"
    name = "accelerate-manual-amp"
    summary = "Accelerator(mixed_precision=...) plus a hand-made GradScaler or a conflicting autocast"
    severity = Severity.WARNING
    needs = (r"autocast|[Ss]caler", r"\bAccelerator\b", r"\bmixed_precision\b")  # words other rules need first

    valid = [
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer = accelerator.prepare(model, optimizer)
accelerator.backward(loss)
optimizer.step()
""",
        # No mixed precision from Accelerate: the manual recipe is the only one.
        """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer = accelerator.prepare(model, optimizer)
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.step(optimizer)
""",
        # The same dtype: redundant, harmless.
        """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model = accelerator.prepare(model)
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
""",
        # Issue 28: two functions, two Accelerators; each autocast matches its own.
        """
import torch
from accelerate import Accelerator
def train_a(model, x):
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(model)
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x)
def train_b(model, x):
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(model)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x)
""",
    ]
    invalid = [
        # Issue 28, swapped: each function's clash is its own Accelerator's.
        Invalid(
            """
import torch
from accelerate import Accelerator
def train_a(model, x):
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(model)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x)
def train_b(model, x):
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(model)
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x)
""",
            count=2,
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    loss = model(**batch).loss
    accelerator.backward(scaler.scale(loss))
    scaler.step(optimizer)
    scaler.update()
""",
            count=2,
        ),
        Invalid(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model, optimizer = accelerator.prepare(model, optimizer)
with torch.autocast("cuda", dtype=torch.float16):
    out = model(x)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        accelerators = list(accelerators_of(model))
        if not accelerators:
            return
        prepared = prepared_by(model, accelerators)
        if not prepared:
            return
        for site in model.call_sites:
            func = dotted_name(site.call.func)
            receiver = dotted_name(site.receiver) if site.receiver is not None else None
            if site.method == "backward" and receiver is not None:
                accelerator = reaching(model, accelerators, receiver, site.scope)
                if accelerator is None:
                    continue
                arg = site.call.args[0].value if site.call.args else None
                if isinstance(arg, cst.Call) and isinstance(arg.func, cst.Attribute) and arg.func.attr.value == "scale":
                    scaler = dotted_name(arg.func.value)
                    if scaler is not None and model.is_scaler(scaler, site.scope):
                        yield self.finding(
                            site.call,
                            f"`{short(site.call, 50)}`: the Accelerator already scales the loss (mixed_precision="
                            f"{accelerator.mixed!r}); this scales it twice: pass the loss itself",
                            context=site.scope.name,
                        )
                continue
            if site.method in ("step", "unscale_") and site.call.args and receiver is not None:
                target = dotted_name(site.call.args[0].value)
                if target and reaching(model, prepared, target, site.scope) and model.is_scaler(receiver, site.scope):
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}`: `{target}` was prepared by an Accelerator with mixed precision, which "
                        "owns its GradScaler: call `optimizer.step()` and drop the manual scaler",
                        context=site.scope.name,
                    )
                continue
            if func is None:
                continue
            entry = reaching(model, prepared, func, site.scope)
            if entry is None:
                continue
            region = site.in_enabled_autocast()
            if region is None or region.spec.dtype not in (DType.FP16, DType.BF16):
                continue
            # The mixed precision of the Accelerator that prepared this model, as it reaches the call (issue 28:
            # not that of another function's Accelerator).
            if region.spec.dtype != entry.accelerator.dtype:
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 40)}` runs under `{short(region.spec.call or region.node, 40)}`, but the "
                    f"Accelerator's mixed precision ({entry.accelerator.mixed!r}) wraps the prepared model's forward in "
                    f"{entry.accelerator.dtype.value} autocast, which wins inside the model: set the dtype on the Accelerator only",
                    context=site.scope.name,
                )
