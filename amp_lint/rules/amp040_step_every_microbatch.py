from __future__ import annotations

from typing import Optional

from amp_lint.diagnostics import Severity, Applicability
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_accumulation import STEP_ON_PARTIAL_SUMS, STEP_TWICE_PER_BOUNDARY, steps_every_micro_batch
from amp_lint.rules._helpers import OrderRule, move_into_boundary_fix
from amp_lint.rules.base import Fix, Invalid


class StepEveryMicrobatch(OrderRule):
    """
    ## What it does
    Finds gradient-accumulation loops (a scaled backward on every micro-batch, and an accumulation
    boundary `if (i + 1) % accum == 0:`, or `if (i + 1) % accum != 0: continue`, that `zero_grad`,
    `scaler.step` or `scaler.update` waits for) where `scaler.step()` still runs on the micro-batches
    that only accumulate. (`update()` on every micro-batch with `step()` at the boundary is AMP022's
    finding.) A step under a test of its own that the loop sets (`if do_step:`) may be the boundary
    under another name: that finding rests on an assumption.

    ## Why is this bad?
    "Grads should remain scaled, and the scale factor should remain constant, while grads for a given
    effective batch are accumulated." Depending on which call is outside the boundary:
    - `step()` every micro-batch, `update()` at the boundary: `RuntimeError: step() has already been
      called since the last update().` on the second micro-batch;
    - both every micro-batch, `zero_grad()` at the boundary: silent. The optimizer steps N times per
      effective batch on gradients that mix unscaled and newly scaled values (2.19x the correct Adam
      update in a CPU reproduction).

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y) / accum
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if (i + 1) % accum == 0:
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Fix safety
    Safe. The per-micro-batch `unscale_`, clipping, `step` and `update` statements move into the
    boundary `if`, in that order, before its `zero_grad`. No fix when other training statements sit
    between them and the boundary, when the boundary `if` comes before the backward, or when a moved
    statement assigns a name used outside the block.

    ## References
    - [AMP examples: gradient accumulation](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation)
    - `torch/amp/grad_scaler.py`: `GradScaler.unscale_`, `step`, `update`
    """

    code = "AMP040"
    query = steps_every_micro_batch
    messages = {
        STEP_TWICE_PER_BOUNDARY: "`{event:short}` runs on every micro-batch of a loop that accumulates gradients until "
        "{waits}: RuntimeError 'step() has already been called since the last update()' on the second micro-batch; "
        "move it into that block",
        STEP_ON_PARTIAL_SUMS: "`{event:short}` runs on every micro-batch of a loop that accumulates gradients until "
        "{waits}: the optimizer steps on every micro-batch while gradients accumulate, mixing unscaled and newly "
        "scaled values; move it into that block",
    }
    name = "scaler-step-every-microbatch"
    summary = "Accumulation loop: scaler.step() on every micro-batch"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bstep\b|\bupdate\b")

    valid = [
        # A step and an update every batch; every hundred batches a small scale is doubled by hand with
        # `update(new_scale)` (icefall's recipes): that sets the scale, it is no accumulation boundary.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch_idx, batch in enumerate(loader):
    with torch.autocast("cuda"):
        loss = model(batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    if batch_idx % 100 == 0:
        cur_grad_scale = scaler._scale.item()
        if cur_grad_scale < 1.0 or (cur_grad_scale < 8.0 and batch_idx % 400 == 0):
            scaler.update(cur_grad_scale * 2.0)
""",
        """
import torch
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y) / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # No accumulation: zero_grad every iteration, a periodic log.
        """
for i, x in enumerate(loader):
    optimizer.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    if i % 100 == 0:
        log(i)
""",
        # update() every micro-batch with step() at the boundary is AMP022's.
        """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        optimizer.zero_grad()
    scaler.update()
""",
        # A periodic branch that updates both ways is no accumulation boundary.
        """
for x, y in loader:
    optimizer.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    step += 1
    if step % reset_scale_every == 0:
        scaler.update(2.0**12)
    else:
        scaler.update()
""",
        # An unrelated condition (AMP on or off).
        """
for i, x in enumerate(loader):
    loss = model(x).sum()
    scaler.scale(loss).backward()
    if scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
    optimizer.zero_grad()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y) / accum
    scaler.scale(loss).backward()
    scaler.step(optimizer); scaler.update()
    if (i + 1) % accum == 0:
        optimizer.zero_grad()
""",
            fixed="""
import torch
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y) / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer); scaler.update()
        optimizer.zero_grad()
""",
        ),
        Invalid(
            """
for step, batch in enumerate(loader):
    scaler.scale(model(batch).sum() / args.grad_accum).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    if (step + 1) % args.grad_accum == 0:
        scaler.update()
        optimizer.zero_grad()
""",
            fixed="""
for step, batch in enumerate(loader):
    scaler.scale(model(batch).sum() / args.grad_accum).backward()
    if (step + 1) % args.grad_accum == 0:
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        ),
        # The boundary comes first: reported, not fixed.
        Invalid(
            """
for i, batch in enumerate(loader):
    if i % accum == 0:
        optimizer.zero_grad()
    scaler.scale(model(batch).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
"""
        ),
    ]

    def words(self, model: FileModel, breach: Breach):
        return {"waits": breach.accumulation.waits_for()}

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        acc = breach.accumulation
        message = "Move the scaler calls into the accumulation boundary"
        return move_into_boundary_fix(model, acc, list(breach.related), message, ("AMP040", id(acc.boundary)))
