from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

from amp_lint.diagnostics import Severity
from amp_lint.analysis.autocast import DType
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, ScalerBinding, TrainingStep
from amp_lint.rules._helpers import forward_regions, short
from amp_lint.rules.base import Finding, Invalid, Rule


def scaler_uses(model: FileModel) -> Dict[int, Tuple[List[ScalerBinding], List[Tuple[TrainingStep, Event]]]]:
    """Scalers built in this file (by their first binding) -> (bindings, the scaled backwards they scale)."""
    uses: Dict[int, Tuple[List[ScalerBinding], List[Tuple[TrainingStep, Event]]]] = {}
    for step in model.steps:
        for backward in step.of(EventKind.BACKWARD):
            if backward.scaled_by is None:
                continue
            bindings = [b for b in model.scaler_bindings(backward.scaled_by, step.scope) if b.call is not None]
            if not bindings:
                continue
            entry = uses.setdefault(id(bindings[0]), (bindings, []))
            entry[1].append((step, backward))
    return uses


class ScalerWithBf16(Rule):
    """
    ## What it does
    Finds a `GradScaler` that is always enabled while every autocast region feeding the losses it
    scales runs in bfloat16.

    ## Why is this bad?
    bfloat16 has float32's exponent range, so there is no gradient underflow to prevent: "automatic
    mixed precision training ... with datatype of torch.bfloat16 only uses torch.autocast". The scaler
    costs extra kernels and a host synchronisation per step, and with bfloat16 *parameters* it fails on
    CUDA (`_amp_foreach_non_finite_check_and_unscale_cuda" not implemented for 'BFloat16'`).

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda", enabled=(amp_dtype == torch.float16))
    ```
    or drop the scaler and call `loss.backward()` / `optimizer.step()` directly.

    ## Fix safety
    No automatic fix: a scaler still skips steps whose gradients are inf/NaN, so removing it changes
    behaviour. The message suggests the `enabled=` switch.

    ## References
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html) (introduction)
    - pytorch/pytorch#127176 (bfloat16 gradients with GradScaler on CUDA)
    """

    code = "AMP012"
    name = "grad-scaler-with-bf16"
    summary = "GradScaler with bfloat16 autocast (not needed)"
    severity = Severity.INFO
    needs = (r"Scaler", r"bfloat16|autocast")

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The documented switch.
        """
import torch
amp_dtype = torch.bfloat16
scaler = torch.amp.GradScaler("cuda", enabled=(amp_dtype == torch.float16))
for x, y in loader:
    with torch.autocast("cuda", dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The dtype is chosen at run time.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
dtype = torch.bfloat16 if args.bf16 else torch.float16
for x, y in loader:
    with torch.autocast("cuda", dtype=dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The forward runs elsewhere: unknown dtype.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def step(loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
        ),
        # CPU autocast defaults to bfloat16.
        Invalid(
            """
import torch
def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cpu")
    for x in loader:
        with torch.autocast("cpu"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for bindings, backwards in scaler_uses(model).values():
            if not all(b.enabled is True for b in bindings):
                continue
            regions: List[AutocastRegion] = []
            for step, backward in backwards:
                feeding = forward_regions(step, backward)
                if not feeding:
                    regions = []
                    break
                regions += feeding
            if not regions or not all(r.spec.dtype is DType.BF16 for r in regions):
                continue
            region = regions[0]
            call = bindings[0].call
            yield self.finding(
                call,
                f"`{short(call)}` scales losses computed under bfloat16 autocast "
                f"(`{short(region.item.item if region.item else region.node, 40)}`), which needs no loss scaling; "
                "drop the scaler or build it with enabled=(amp_dtype == torch.float16)",
                context=bindings[0].scope.name if bindings[0].scope else "",
            )
