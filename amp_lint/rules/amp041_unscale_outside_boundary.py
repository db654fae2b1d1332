from __future__ import annotations

from typing import Optional

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_accumulation import CLIP_EVERY_MICRO_BATCH, UNSCALE_EVERY_MICRO_BATCH, unscales_every_micro_batch
from amp_lint.rules._helpers import OrderRule, move_into_boundary_fix
from amp_lint.rules.base import Fix, Invalid


class UnscaleOutsideBoundary(OrderRule):
    """
    ## What it does
    Finds, in a gradient-accumulation loop whose `scaler.step()` waits for the boundary (inside
    `if (i + 1) % accum == 0:`, or after `if (i + 1) % accum != 0: continue`), `scaler.unscale_()` or
    gradient clipping that runs on the micro-batches that only accumulate: on a path where the boundary
    test does not hold, unconditionally or under a test of its own (`if clip_grad:`).

    ## Why is this bad?
    "Call unscale_ just before step, after all (scaled) grads for the upcoming step have been
    accumulated." `unscale_` on every micro-batch raises `RuntimeError: unscale_() has already been
    called on this optimizer since the last update().` on the second micro-batch; run once too early,
    the next backward adds scaled gradients to unscaled ones and the result cannot be recovered.
    Clipping every micro-batch clips partial (and still scaled) sums.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Fix safety
    Safe. The `unscale_` and clipping statements move into the boundary block, right before
    `scaler.step`. No fix when other training statements sit between them and the boundary, or when a
    moved statement assigns a name (a gradient norm) that code outside the block reads.

    ## References
    - [AMP examples: gradient accumulation](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation)
    - `torch/amp/grad_scaler.py`: `GradScaler.unscale_`
    """

    code = "AMP041"
    query = unscales_every_micro_batch
    messages = {
        UNSCALE_EVERY_MICRO_BATCH: "`{event:short}` runs on every micro-batch, but the step waits for {waits}: "
        "RuntimeError 'unscale_() has already been called' on the second micro-batch; move it into that block, "
        "before the step",
        CLIP_EVERY_MICRO_BATCH: "`{event:short}` runs on every micro-batch, but the step waits for {waits}: "
        "it clips partial, still-scaled gradient sums; move it into that block, before the step",
    }
    name = "unscale-outside-accumulation-boundary"
    summary = "Accumulation loop: unscale_()/clipping outside the step boundary"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"unscale_|clip_grad")

    valid = [
        """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    if (i + 1) % accum == 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # No accumulation.
        """
import torch
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    ]
    invalid = [
        # The accumulation is one branch of `if accum > 1: ... else: ...` (issue 44): the enclosing branch
        # changes nothing, the other branch (a step per batch) keeps its unscale_.
        Invalid(
            """
import torch
for i, (x, y) in enumerate(loader):
    if accum > 1:
        scaler.scale(loss_fn(model(x), y) / accum).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    else:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            fixed="""
import torch
for i, (x, y) in enumerate(loader):
    if accum > 1:
        scaler.scale(loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    else:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            count=2,
        ),
        Invalid(
            """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    running_loss += 1
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            fixed="""
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    running_loss += 1
    if (i + 1) % accum == 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            count=2,
        ),
        # Only the unscale_ is outside: it goes before the clipping (YOLOv5's loop, broken).
        Invalid(
            """
import torch
for i, (imgs, targets) in enumerate(loader):
    ni = i + nb * epoch
    scaler.scale(compute_loss(model(imgs), targets)).backward()
    scaler.unscale_(optimizer)  # unscale gradients
    if ni - last_opt_step >= accumulate:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        last_opt_step = ni
""",
            fixed="""
import torch
for i, (imgs, targets) in enumerate(loader):
    ni = i + nb * epoch
    scaler.scale(compute_loss(model(imgs), targets)).backward()
    if ni - last_opt_step >= accumulate:
        scaler.unscale_(optimizer)  # unscale gradients
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        last_opt_step = ni
""",
        ),
        # The norm is logged outside: reported, not moved.
        Invalid(
            """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    log(norm)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
            count=2,
        ),
    ]

    def words(self, model: FileModel, breach: Breach):
        return {"waits": breach.accumulation.waits_for("to fail")}

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        # One fix per iteration (its accumulation boundary), shared by its findings.
        if id(breach.step) not in memo:
            acc, message = breach.accumulation, "Move unscale_/clipping into the accumulation boundary"
            memo[id(breach.step)] = move_into_boundary_fix(model, acc, list(breach.related), message, ("AMP041", id(acc.boundary)))
        return memo[id(breach.step)]
