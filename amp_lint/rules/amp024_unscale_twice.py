from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_unscale import UNSCALE_AFTER_STEP, UNSCALE_NEXT_ITERATION, UNSCALE_TWICE, unscales_twice
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Fix, Invalid


class UnscaleTwice(OrderRule):
    """
    ## What it does
    Finds `scaler.unscale_(optimizer)` called a second time for the same optimizer in one iteration (no
    `scaler.update()` in between), or called after `scaler.step(optimizer)`.

    ## Why is this bad?
    "unscale_ should only be called once per optimizer per step call." GradScaler records the state
    per optimizer and raises `RuntimeError: unscale_() has already been called on this optimizer since
    the last update().` or `RuntimeError: unscale_() is being called after step().`

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe. The second `unscale_` is removed (the gradients are already unscaled); an `unscale_` after the
    step with none before it moves to right before the step. No fix when the call is not a statement of
    its own or sits in a helper function.

    ## References
    - [AMP examples: gradient clipping](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping)
    - `torch/amp/grad_scaler.py`: `GradScaler.unscale_`
    """

    code = "AMP024"
    query = unscales_twice
    messages = {
        UNSCALE_TWICE: "`{event:short}` runs again after `{cause:short}` with no `{scaler}.update()` between: "
        "RuntimeError 'unscale_() has already been called'",
        UNSCALE_AFTER_STEP: "`{event:short}` runs after `{cause:short}`: RuntimeError "
        "'unscale_() is being called after step()'; unscale before stepping",
        UNSCALE_NEXT_ITERATION: "`{event:short}` can run again in the next {detail} with no `{scaler}.update()` "
        "since it ran (a path skips the update): RuntimeError 'unscale_() has already been called'",
    }
    name = "unscale-twice"
    summary = "scaler.unscale_() twice per optimizer per iteration, or after step()"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bunscale_\b", r"[Ss]caler")

    valid = [
        # Issue 26, principle 4 (values followed): a flag the code keeps, set right after each unscale_,
        # guards the other one (a logging branch unscales first).
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    unscaled = False
    if i % log_every == 0:
        scaler.unscale_(opt)
        unscaled = True
        log_grad_norm(model)
    if not unscaled:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
""",
        # The scaler's own state decides (allennlp's gradient_descent_trainer: rescale, then clip).
        """
from torch.amp.grad_scaler import OptState
class Trainer:
    def rescale_gradients(self):
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
    def clip_gradient(self):
        if self._scaler is not None:
            state = self._scaler._per_optimizer_states[id(self.optimizer)]
            if state["stage"] is not OptState.UNSCALED:
                self._scaler.unscale_(self.optimizer)
    def train(self, loader):
        for batch in loader:
            self._scaler.scale(self.model(batch)).backward()
            self.rescale_gradients()
            self.clip_gradient()
            self._scaler.step(self.optimizer)
            self._scaler.update()
""",
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        # One unscale_ per optimizer.
        """
for x in loader:
    scaler.scale(loss).backward()
    scaler.unscale_(opt_a)
    scaler.unscale_(opt_b)
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
""",
        # Two phases, each updated.
        """
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    scaler.scale(g_loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
""",
        # Exclusive branches.
        """
for x in loader:
    scaler.scale(loss).backward()
    if clip:
        scaler.unscale_(opt)
        clip_grads(model)
    else:
        scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
""",
        # `optimizers[i]` is another optimizer on every pass of its own loop.
        """
for x in loader:
    scaler.scale(loss).backward()
    for i in range(k):
        scaler.unscale_(optimizers[i])
    for i in range(k, len(optimizers)):
        scaler.unscale_(optimizers[i])
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
""",
        # Exclusive `match` cases, the optimizer named by a subscript: each pass unscales once (the lexical
        # fallback took two calls with no `if` between them for one pass).
        """
for x in loader:
    scaler.scale(loss).backward()
    match mode:
        case "clip":
            scaler.unscale_(optimizers[0])
            clip_grads(model)
        case _:
            scaler.unscale_(optimizers[0])
    scaler.step(optimizers[0])
    scaler.update()
""",
    ]
    invalid = [
        # Issue 26, principle 1: `super()` in a GradScaler subclass is the scaler itself.
        Invalid(
            """
import torch
class ClampedScaler(torch.amp.GradScaler):
    def unscale_(self, optimizer):
        super().unscale_(optimizer)
        super().unscale_(optimizer)
        self.clamp_found_inf(optimizer)
""",
            fixed="""
import torch
class ClampedScaler(torch.amp.GradScaler):
    def unscale_(self, optimizer):
        super().unscale_(optimizer)
        self.clamp_found_inf(optimizer)
""",
        ),
        Invalid(
            """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.step(self.optimizer)
    self.scaler.unscale_(self.optimizer)
    self.scaler.update()
""",
            fixed="""
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        ),
        # A per-call step function (issue 26, principle 2) that returns after unscale_ on a skip branch.
        Invalid(
            """
import torch
class Trainer:
    def train_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if not torch.isfinite(norm):
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
        ),
    ]

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        unscale, previous = breach.event, breach.cause
        if breach.kind == UNSCALE_TWICE:
            return _remove_fix(model, unscale, previous)
        if breach.kind == UNSCALE_AFTER_STEP:
            if any(e.kind is EventKind.SCALER_UNSCALE for e in breach.related):
                return _remove_fix(model, unscale)
            return _move_before_fix(model, breach.step, unscale, previous)
        return None


def _own_statement(event: Event) -> bool:
    return (
        not event.in_helper
        and isinstance(event.small_statement, cst.Expr)
        and event.small_statement.value is event.call
    )


def _twice_in_one_helper_block(model: FileModel, first: Event, second: Event) -> bool:
    """Both calls are statements of one block of one helper's body, reached through the same call, the first
    before the second: the helper itself unscales twice on every call, so removing the second is right for
    every caller (not an edit of the helper on one caller's behalf)."""
    if not second.in_helper or not first.reached_alike(second):
        return False
    if not isinstance(second.small_statement, cst.Expr) or second.small_statement.value is not second.call:
        return False
    block = model.block_of(second.statement)
    return (
        block is not None
        and first.statement in block
        and second.statement in block
        and list(block).index(first.statement) < list(block).index(second.statement)
    )


def _remove_fix(model: FileModel, event: Event, previous: Optional[Event] = None) -> Optional[Fix]:
    if not _own_statement(event) and not (previous is not None and _twice_in_one_helper_block(model, previous, event)):
        return None
    builder = FixBuilder(model.module)
    builder.remove(removal_target(event.statement, event.small_statement))
    return builder.build("Remove the second `unscale_`", Applicability.SAFE)


def _move_before_fix(model: FileModel, step: TrainingStep, unscale: Event, scaler_step: Event) -> Optional[Fix]:
    if not _own_statement(unscale) or scaler_step.in_helper:
        return None
    anchor = step.anchor_statement(scaler_step)
    target = removal_target(unscale.statement, unscale.small_statement)
    if target is anchor or unscale.statement is anchor or not isinstance(anchor, cst.BaseStatement):
        return None
    builder = FixBuilder(model.module)
    builder.remove(target)
    builder.insert_before(anchor, builder.statement(f"{code_of(unscale.call)}\n"))
    return builder.build("Move `unscale_` before the step", Applicability.SAFE)
