from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_gradients import (
    ZERO_GRAD_MODULE,
    ZERO_GRAD_MODULE_ASSUMED,
    ZERO_GRAD_SAME_OPTIMIZER,
    zero_grads_before_step,
)
from amp_lint.rules._helpers import OrderRule
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.rules.base import Fix, Invalid


class ZeroGradBeforeStep(OrderRule):
    """
    ## What it does
    Finds `zero_grad()` between a scaled backward (`scaler.scale(loss).backward()`) and the
    `scaler.step(optimizer)` / `scaler.unscale_(optimizer)` that should consume those gradients. A
    module's `model.zero_grad()` is reported by default when the stepped optimizer is built in the file
    from that module's parameters (through names, parameter groups and loops); otherwise only with
    `--show-assumed`.

    ## Why is this bad?
    With the default `set_to_none=True` every `.grad` becomes `None`, and `scaler.step` raises
    `AssertionError: No inf checks were recorded for this optimizer.` With `set_to_none=False` the step
    runs on zero gradients: plain SGD does nothing, while momentum, Adam and weight decay still move the
    parameters with stale state. The canonical places for `zero_grad` are the start of the iteration or
    right after `scaler.update()`.

    ## Example
    ```python
    scaler.scale(loss).backward()
    optimizer.zero_grad()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    ```

    ## Fix safety
    Safe. The `zero_grad()` statement moves to right after `scaler.update()` (after the last step of that
    optimizer when the update lives elsewhere). A `model.zero_grad()` (not the stepped optimizer) is
    reported at medium confidence.

    ## References
    - [AMP examples: typical mixed precision training, gradient accumulation](https://docs.pytorch.org/docs/stable/notes/amp_examples.html)
    - `torch/amp/grad_scaler.py`: `GradScaler.step` ("No inf checks were recorded for this optimizer.")
    """

    code = "AMP043"
    query = zero_grads_before_step
    messages = dict.fromkeys(
        (ZERO_GRAD_SAME_OPTIMIZER, ZERO_GRAD_MODULE, ZERO_GRAD_MODULE_ASSUMED),
        "`{event:short}` clears the gradients of `{cause:short40}` before `{other:short40}` reads them: 'No inf checks "
        "were recorded' (or a step on zero gradients); zero them after `{scaler}.update()`",
    )
    name = "zero-grad-before-scaler-step"
    summary = "zero_grad() between the scaled backward and scaler.step()"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"zero_grad", r"[Ss]caler")

    valid = [
        """
for x in loader:
    optimizer.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # GAN: the generator's zero_grad comes after the discriminator's backward, before its own.
        """
for x in loader:
    opt_d.zero_grad()
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    opt_g.zero_grad()
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # Another optimizer's gradients.
        """
for x in loader:
    scaler.scale(loss).backward()
    scaler.step(opt_a)
    opt_a.zero_grad()
    scaler.step(opt_b)
    scaler.update()
""",
        # Accumulation: zero_grad at the boundary, after the update.
        """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # An out-of-memory retry clears the gradients and leaves the loop (Ultralytics).
        """
for epoch in range(epochs):
    for i, batch in enumerate(loader):
        try:
            scaler.scale(model(batch).sum()).backward()
        except RuntimeError:
            optimizer.zero_grad()
            break
        if i - last_opt_step >= accumulate:
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            last_opt_step = i
""",
    ]
    invalid = [
        Invalid(
            """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    optimizer.zero_grad(set_to_none=True)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
""",
        ),
        Invalid(
            """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        optimizer.zero_grad()
        scaler.unscale_(optimizer)
        clip(model)
        scaler.step(optimizer)
        scaler.update()
""",
            fixed="""
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.unscale_(optimizer)
        clip(model)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        ),
        # A module's zero_grad, the stepped optimizer built here from that module's parameters: proved.
        Invalid(
            """
import torch
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    model.zero_grad()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # A module's zero_grad, the optimizer a parameter (not known to hold the module's parameters):
        # reported with --show-assumed.
        Invalid(
            """
import torch
def train(model, optimizer, scaler, loader):
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        model.zero_grad()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
    ]

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        return _move_fix(model, breach.step, breach.event, breach.other, breach.scaler)

    def confidence_of(self, breach: Breach) -> Confidence:
        return Confidence.MEDIUM if breach.kind == ZERO_GRAD_MODULE_ASSUMED else Confidence.HIGH


def _move_fix(model: FileModel, step: TrainingStep, zero: Event, consumer: Event, scaler: str) -> Optional[Fix]:
    if zero.in_helper or not isinstance(zero.small_statement, cst.Expr) or zero.small_statement.value is not zero.call:
        return None
    flow = flow_of(model, step)
    # After the consumer, on its paths: the update (one), else the optimizer's last step.
    later = [
        e
        for e in step.events
        if e.receiver == scaler
        and (e.kind is EventKind.SCALER_UPDATE or (e.kind is EventKind.SCALER_STEP and e.target == consumer.target))
        and e is not consumer
        and flow.path(consumer, e) is not None
    ]
    updates = [e for e in later if e.kind is EventKind.SCALER_UPDATE]
    if len(updates) > 1:
        return None  # one update per branch: no single place to move to
    if updates:
        after: Optional[Event] = updates[0]
    else:
        lasts = [e for e in later if not any(flow.path(e, other) is not None for other in later if other is not e)]
        if len(lasts) > 1:
            return None
        after = lasts[0] if lasts else (consumer if consumer.kind is EventKind.SCALER_STEP else None)
    if after is None or after.in_helper:
        return None
    anchor = step.anchor_statement(after)
    target = removal_target(zero.statement, zero.small_statement)
    if anchor is zero.statement or target is anchor or not isinstance(anchor, cst.BaseStatement):
        return None
    builder = FixBuilder(model.module)
    builder.remove(target)
    builder.insert_after(anchor, builder.statement(f"{code_of(zero.call)}\n"))
    return builder.build(f"Move `zero_grad()` after `{code_of(after.call)}`", Applicability.SAFE)
