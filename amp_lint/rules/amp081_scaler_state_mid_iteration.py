from __future__ import annotations

from amp_lint.analysis.order_gradients import PICKLED_MID_ITERATION, STATE_SAVED_BEFORE_UPDATE, scaler_saved_mid_iteration
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Invalid


class ScalerStateMidIteration(OrderRule):
    """
    ## What it does
    Finds a GradScaler checkpointed in the middle of an iteration: `scaler.state_dict()` after the scaled
    backward and before `scaler.update()`, or the scaler itself pickled (`torch.save(scaler, ...)`,
    `pickle.dump(scaler, ...)`, `copy.deepcopy(scaler)`) after `scaler.unscale_()` / `scaler.step()` and
    before `scaler.update()`.

    ## Why is this bad?
    Pickling then raises `AssertionError: A GradScaler instance may only be pickled at the beginning of
    an iteration, or at the end after scaler.update().` (`GradScaler.__getstate__`), and `state_dict()`
    records the scale before this iteration's update: a resumed run starts from a scale that was about to
    be backed off after an overflow, or grown. The docstring says: "If you wish to checkpoint the
    scaler's state after a particular iteration, `state_dict` should be called after `update`."

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, path)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, path)
    ```

    ## Fix safety
    No fix: moving a checkpoint changes what it records. Reported only when the three calls are in the
    same function and loop body, in this order, with no `if`/`else` between them that separates them.

    ## References
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.state_dict` (the note) and `__getstate__`
      (the assertion)
    - `../shared/amp-reference/rules.md` AMP081 (E2)
    """

    code = "AMP081"
    query = scaler_saved_mid_iteration
    messages = {
        PICKLED_MID_ITERATION: "pickling `{scaler}` between `{cause:short40}` and `{other:short40}` raises "
        "AssertionError (a GradScaler may only be pickled at the beginning of an iteration or after update()); "
        "save after update()",
        STATE_SAVED_BEFORE_UPDATE: "`{scaler}.state_dict()` between `{cause:short40}` and `{other:short40}` records "
        "the scale before this iteration's update(): a resumed run starts from a stale scale; save after update()",
    }
    name = "scaler-state-mid-iteration"
    summary = "GradScaler state saved between the scaled backward and update() (stale scale, or AssertionError when pickled)"
    severity = Severity.WARNING
    needs = (r"[Ss]caler", r"\bupdate\b", r"state_dict|\bsave\b|\bdump|deepcopy|\bcopy\b")

    valid = [
        """
import torch
for x in data:
    scaler.scale(loss_fn(model(x))).backward()
    scaler.step(opt)
    scaler.update()
    torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
""",
        # Before the scaled backward: the start of an iteration.
        """
import torch
for x in data:
    state = scaler.state_dict()
    scaler.scale(loss_fn(model(x))).backward()
    scaler.step(opt)
    scaler.update()
""",
        # Exclusive branches.
        """
import torch
for x in data:
    scaler.scale(loss).backward()
    if save_now:
        ckpt = scaler.state_dict()
    else:
        scaler.step(opt)
        scaler.update()
""",
        # The save's path leaves the iteration before any update() (`continue`): nothing is pending there.
        # (The text has an update() after the save; no path does.)
        """
import torch
for x in data:
    scaler.scale(loss_fn(model(x))).backward()
    if skip_this_batch:
        ckpt = scaler.state_dict()
        continue
    scaler.step(opt)
    scaler.update()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in data:
    scaler.scale(loss_fn(model(x))).backward()
    scaler.step(opt)
    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
    scaler.update()
"""
        ),
        Invalid(
            """
import pickle
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    blob = pickle.dumps(self.scaler)
    self.scaler.step(self.optimizer)
    self.scaler.update()
"""
        ),
    ]

    def related(self, model, breach):
        return (("update() here", breach.other.call),)
