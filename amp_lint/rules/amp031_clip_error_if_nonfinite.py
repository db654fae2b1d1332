from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.analysis.events import Event
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_reads import CLIP_RAISES_NONFINITE, clips_raising_on_nonfinite
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Fix, Invalid


class ClipErrorIfNonfinite(OrderRule):
    """
    ## What it does
    Finds `clip_grad_norm_(..., error_if_nonfinite=True)` in an iteration that steps through a
    `GradScaler`.

    ## Why is this bad?
    With dynamic loss scaling, non-finite gradients are expected now and then: the scaler grows the
    scale until it overflows, and `scaler.step` then skips that step and backs off.
    `error_if_nonfinite=True` turns every such overflow into `RuntimeError: The total norm of order 2.0
    for gradients from `parameters` is non-finite, so it cannot be clipped.` With the default
    `growth_interval=2000` the crash comes hours into training.

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)  # skips the step when the gradients are inf/NaN
    scaler.update()
    ```

    ## Fix safety
    Safe. The `error_if_nonfinite=True` argument is removed; `scaler.step` already skips non-finite
    steps. Written positionally, it is reported without a fix when arguments follow it.

    ## References
    - `torch/nn/utils/clip_grad.py` (the `error_if_nonfinite` error)
    - `torch/amp/grad_scaler.py`: the `GradScaler` docstring on expected infs/NaNs
    """

    code = "AMP031"
    query = clips_raising_on_nonfinite
    at_node = True
    messages = {
        CLIP_RAISES_NONFINITE: "`{event:short}` raises on the inf/NaN gradients that dynamic loss scaling produces "
        "by design; `{scaler}.step()` already skips those steps",
    }
    name = "clip-error-if-nonfinite-with-scaler"
    summary = "clip_grad_norm_(error_if_nonfinite=True) in a GradScaler loop"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"clip_grad_norm", r"[Ss]caler")

    valid = [
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        # No scaler: a non-finite norm is a real problem worth an error.
        """
import torch
for x in loader:
    model(x).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    optimizer.step()
""",
        # The fp32 branch of a switchable loop.
        """
import torch
for x in loader:
    loss = model(x).sum()
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()
""",
        # The fp32 path returns (inside its profiling block) before the scaler's path: its
        # error_if_nonfinite never meets scaled gradients (the lexical model knew an early return only as
        # the last line of the `if` itself).
        """
import torch
def train_step(self, loss):
    if self.scaler is None:
        with self.profiler.record("fp32_step"):
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, error_if_nonfinite=True)
            self.optimizer.step()
            return
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False)
    scaler.step(optimizer)
    scaler.update()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
from torch.nn.utils import clip_grad_norm_
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    clip_grad_norm_(self.model.parameters(), 1.0, 2.0, True)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
            fixed="""
from torch.nn.utils import clip_grad_norm_
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    clip_grad_norm_(self.model.parameters(), 1.0, 2.0)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        ),
    ]

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        return _remove_fix(model, breach.event, breach.node)


def _remove_fix(model: FileModel, clip: Event, arg: cst.Arg) -> Optional[Fix]:
    args = list(clip.call.args)
    if arg.keyword is None and args[-1] is not arg:
        return None
    builder = FixBuilder(model.module)
    index = args.index(arg)
    builder.replace(clip.call, lambda updated: with_call_args(updated, [a for i, a in enumerate(updated.args) if i != index]))
    return builder.build("Remove `error_if_nonfinite=True`", Applicability.SAFE)
