from __future__ import annotations

from amp_lint.diagnostics import Severity
from amp_lint.analysis.order_gradients import CLOSURE_KEYWORD, CLOSURE_POSITIONAL, closures_to_scaler_step
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Invalid


class ClosureToScalerStep(OrderRule):
    """
    ## What it does
    Finds `scaler.step(optimizer, closure)` or `scaler.step(optimizer, closure=...)`: a closure handed
    to `GradScaler.step`.

    ## Why is this bad?
    GradScaler does not support closures. The keyword form raises `RuntimeError: Closure use is not
    currently supported if GradScaler is enabled.` The positional form slips past that check and is
    forwarded to `optimizer.step(closure)`: the closure reruns the forward pass and an *unscaled*
    backward, adding unscaled gradients on top of the ones the scaler already unscaled and checked.

    ## Example
    ```python
    def closure():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        return loss

    scaler.step(optimizer, closure)
    scaler.update()
    ```

    ## Use instead
    Closure-based optimizers (LBFGS) do not mix with GradScaler: train them in float32 or with bfloat16
    autocast (no scaler).
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: the training step has to be restructured by hand.

    ## References
    - `torch/amp/grad_scaler.py`: `GradScaler.step` (docstring warning and closure check)
    """

    code = "AMP025"
    query = closures_to_scaler_step
    at_node = True
    messages = {
        CLOSURE_KEYWORD: "`{event:short}` passes a closure to GradScaler.step: it raises 'Closure use is not "
        "currently supported'; GradScaler does not support closure-based optimizers",
        CLOSURE_POSITIONAL: "`{event:short}` passes a closure to GradScaler.step: it is forwarded to the optimizer, "
        "whose closure re-runs an unscaled backward; GradScaler does not support closure-based optimizers",
    }
    name = "closure-to-scaler-step"
    summary = "Closure passed to scaler.step()"
    severity = Severity.ERROR
    needs = (r"[Ss]caler", r"\bstep\b")

    valid = [
        """
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A plain optimizer step with a closure is not the scaler's business.
        """
for x, y in loader:
    optimizer.step(closure)
""",
        # A scaler switched off by a literal is a plain optimizer step.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
for x in loader:
    scaler.step(lbfgs, closure)
    scaler.update()
""",
        # A project's scaler subclass that supports closures (Composer).
        """
from composer.trainer._scaler import ClosureGradScaler
from torch.amp import GradScaler
class Trainer:
    def __init__(self):
        self.scaler = ClosureGradScaler() if self.use_closures() else GradScaler()

    def step(self, optimizer):
        self.scaler.step(optimizer, closure=lambda **kwargs: self.train_microbatches(**kwargs))
""",
        # A wrapper forwarding an optional closure (Accelerate's AcceleratedOptimizer.step).
        """
class AcceleratedOptimizer:
    def step(self, closure=None):
        if self.scaler is not None:
            self.scaler.step(self.optimizer, closure)
            self.scaler.update()
""",
        # The caller's optional closure, replaced only on a path that returns before the step.
        """
class AcceleratedOptimizer:
    def step(self, closure=None):
        if self.scaler is None:
            closure = self._wrap(closure)
            self.optimizer.step(closure)
            return
        self.scaler.step(self.optimizer, closure)
        self.scaler.update()
""",
        # Forwarded arguments: unknown.
        """
def step(scaler, optimizer, *args):
    scaler.step(optimizer, *args)
""",
    ]
    invalid = [
        # A default closure filled in when the caller gives none: whatever the caller passes, the step gets
        # a closure (the lexical model saw only "a parameter that defaults to None").
        Invalid(
            """
class Trainer:
    def step(self, closure=None):
        if closure is None:
            closure = self._default_closure
        self.scaler.step(self.optimizer, closure)
        self.scaler.update()
"""
        ),
        Invalid(
            """
for x, y in loader:
    def closure():
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        return loss
    scaler.step(lbfgs, closure)
    scaler.update()
"""
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
scaler.step(optimizer, closure=closure)
scaler.update()
"""
        ),
    ]
