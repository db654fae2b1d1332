from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

from amp_lint.diagnostics import Severity
from amp_lint.analysis.autocast import DType
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, ScalerBinding, TrainingStep
from amp_lint.rules._helpers import regions_feeding, short
from amp_lint.rules._precision_switches import canonical, possible_dtypes, switch_of_region, switch_of_scaler
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
    scales runs in bfloat16, and one switched on by no more than what turns autocast on while the autocast's
    dtype may be bfloat16 (`dtype=torch.bfloat16 if opt.bf16 else torch.float16` beside
    `GradScaler(enabled=use_amp)` and `autocast(..., enabled=use_amp)`): the dtype is followed through names,
    attributes of the class and parameter defaults.

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
        # The dtype is chosen at run time, and the scaler has a switch of its own (the fp16 flag).
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
dtype = torch.bfloat16 if args.bf16 else torch.float16
for x, y in loader:
    with torch.autocast("cuda", dtype=dtype, enabled=args.fp16 or args.bf16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The dtype is chosen at run time, out of sight.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.dtype)):
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
        # Issue 46, principle 6: the switch that turns autocast on is all that turns the scaler on, and the
        # dtype may be bfloat16: the scaler stays on for it.
        Invalid(
            """
import torch
class Model:
    def __init__(self, opt):
        self.use_amp = opt["use_amp"]
        self.amp_dtype = torch.bfloat16 if opt["amp_bf16"] else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)
    def optimize(self, x):
        with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.use_amp):
            loss = self.net(x)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
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
            # per backward call: the regions feeding it in any iteration that runs it (one reached through a
            # helper, `self.training_step(inputs)`, is fed in the helper's own iteration)
            regions = regions_feeding(backwards, per_call=True)
            if not regions:
                continue
            call = bindings[0].call
            context = bindings[0].scope.name if bindings[0].scope else ""
            if all(b.enabled is True for b in bindings) and all(possible_dtypes(model, r) == {DType.BF16} for r in regions):
                region = regions[0]
                yield self.finding(
                    call,
                    f"`{short(call)}` scales losses computed under bfloat16 autocast "
                    f"(`{short(region.item.item if region.item else region.node, 40)}`), which needs no loss scaling; "
                    "drop the scaler or build it with enabled=(amp_dtype == torch.float16)",
                    context=context,
                )
                continue
            region = _bf16_on_the_scalers_switch(model, bindings, regions)
            if region is not None:
                yield self.finding(
                    call,
                    f"`{short(call)}` is switched on by no more than what turns on "
                    f"`{short(region.item.item if region.item else region.node, 40)}`, whose dtype "
                    f"{'is' if possible_dtypes(model, region) == {DType.BF16} else 'may be'} bfloat16, "
                    "which needs no loss scaling; build the scaler with enabled=(amp_dtype == torch.float16)",
                    context=context,
                )


def _bf16_on_the_scalers_switch(model: FileModel, bindings: List[ScalerBinding], regions: List[AutocastRegion]):
    """A region whose dtype may be bfloat16 (some definition the file shows is) and that is on wherever the
    scaler is (the scaler's switch is no stronger than the region's: `enabled=self.use_amp` on both, or
    always on): the scaler runs with bfloat16 whenever that dtype is chosen (issue 46, principle 6). A
    scaler with a switch of its own (`enabled=args.fp16`, `enabled=dtype == torch.float16`) is left alone:
    that switch may be the dtype's."""
    built = [b for b in bindings if b.call is not None]
    switches = [switch_of_scaler(b) for b in built]
    if not switches or any(s is None for s in switches):
        return None
    switches = [canonical(model, s, b.scope.class_name if b.scope else None) for s, b in zip(switches, built)]
    for region in regions:
        if DType.BF16 not in possible_dtypes(model, region):
            continue
        on = canonical(model, switch_of_region(region), region.scope.class_name if region.scope else None)
        if all(switch <= on for switch in switches):
            return region
    return None
