from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis import typestate
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.order import Breach
from amp_lint.analysis.protocol import RESETS_SCALER
from amp_lint.analysis.order_steps import AROUND_UNSCALED, CLOSED_BY_UPDATE, STEP_SCALED, STEPPED_TWICE, direct_steps
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.rules._helpers import OrderRule, remove_call_fix
from amp_lint.rules.amp030_clip_without_unscale import unscale_before_scaled_reads
from amp_lint.rules.base import Fix, Invalid


class OptimizerStepOnScaledGrads(OrderRule):
    """
    ## What it does
    Finds `optimizer.step()` called directly on gradients that a `GradScaler` scaled, either instead of
    `scaler.step(optimizer)` or in addition to it (a double step). Also a step function whose scaled
    backward runs elsewhere (a sibling method, a callback) that steps the optimizer directly and then
    closes the iteration with `scaler.update()`, with no `scaler.step` in it: whatever its callers did,
    the update finds no inf checks, or an overflowing step is never skipped. And a helper that unscales
    (its gradients arrive scaled), then steps directly and leaves the update to its caller: whatever the
    caller does, that step ran with no inf check. Silent where the scaler is proved something else (built
    from a class of the project's, here or in a base class's module) or says it is disabled (the else of
    `if scaler.is_enabled():`), and under a manual inf check of the step's own.

    ## Why is this bad?
    `scaler.step(optimizer)` unscales the gradients, checks them for inf/NaN and skips the step on
    overflow. Calling `optimizer.step()` directly applies gradients multiplied by the scale (65536 by
    default); after `scaler.unscale_` it applies the right magnitude but never skips the overflow
    iterations that GradScaler deliberately provokes, so parameters become inf/NaN. A double step
    updates twice per iteration. Fused optimizers (`Adam(fused=True)`) require `scaler.step`.

    ## Example
    ```python
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe for the redundant `optimizer.step()` after `scaler.step(optimizer)`: it is removed, but only
    when every path to it passes `scaler.step(optimizer)` (an `optimizer.step()` that also serves the
    fp32 path of an `if scaler: ... else: ...` keeps it). Unsafe for a direct `optimizer.step()` that
    bypasses the scaler when nothing else of the protocol follows: `scaler.step(optimizer)` skips
    overflowing steps and unscales, which changes the numerics of code that steps directly on purpose;
    safe when `scaler.update()` follows (that update raises today, finding no step). Unsafe, too, for a
    direct step right after an explicit `scaler.unscale_(optimizer)`: that may be deliberate (it avoids
    `scaler.step`'s host sync for one optimizer), and stepping through the scaler changes it. Keyword arguments
    are forwarded (`scaler.step(optimizer, **kwargs)` passes them to `optimizer.step`), and so is a
    positional argument that the step's function passes on from its own caller (`def step(self,
    closure=None)`); both unsafe: they may carry a closure, which `scaler.step` refuses as a keyword and
    runs after its inf check when positional. No fix for a `closure=` keyword or a closure built here
    (AMP025). Unsafe, too, in a helper whose caller updates: the edit is made on that caller's behalf.
    A clip (or gradient read) between the scaled backward and the direct step gets the `scaler.unscale_`
    it needs in the same fix, as AMP030's fix writes it; no fix where that cannot be written.

    ## References
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    - `torch/amp/grad_scaler.py`: `GradScaler.step`, `_maybe_opt_step`
    """

    code = "AMP020"
    query = direct_steps
    messages = {
        STEP_SCALED: "`{event}` applies gradients scaled by `{scaler}` and never skips overflowing steps; "
        "use `{scaler}.step({optimizer})`",
        STEPPED_TWICE: "`{event}` steps `{optimizer}` a second time after `{scaler}.step({optimizer})`; remove it",
        AROUND_UNSCALED: "`{event}` steps `{optimizer}` around `{scaler}` after `{cause}`: an overflowing step is "
        "never skipped; use `{scaler}.step({optimizer})`",
        CLOSED_BY_UPDATE: "`{event}` steps around `{scaler}`, then `{other}` closes the iteration with no inf checks "
        "recorded (AssertionError), or never skips an overflowing step; use `{scaler}.step({optimizer})`",
    }
    name = "optimizer-step-on-scaled-grads"
    summary = "optimizer.step() called directly on scaled gradients"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bstep\b")

    valid = [
        # `self.scaler` is the project's own loss scaler, built by a subclass in this file (fairseq's
        # `_FP16OptimizerMixin` and `FP16Optimizer`): not torch's GradScaler.
        """
from .dynamic_loss_scaler import DynamicLossScaler

class _FP16OptimizerMixin:
    def backward(self, loss):
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def step(self, closure=None):
        self.fp32_optimizer.step(closure)
        if self.scaler is not None:
            self.scaler.update()

class FP16Optimizer(_FP16OptimizerMixin):
    def __init__(self, cfg, fp32_optimizer):
        self.fp32_optimizer = fp32_optimizer
        self.scaler = DynamicLossScaler(init_scale=cfg.fp16_init_scale)
""",
        """
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The fp32 path of a switchable step, under differently named conditions.
        """
for x, y in loader:
    loss = loss_fn(model(x), y)
    if self.do_grad_scaling:
        self.scaler.scale(loss).backward()
    else:
        loss.backward()
    if self.use_amp:
        self.scaler.step(self.optimizer)
        self.scaler.update()
    else:
        self.optimizer.step()
""",
        # GAN: the generator's loss is not scaled, so its plain step is not on scaled gradients.
        """
for real in loader:
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    scaler.update()
    g_loss.backward()
    opt_g.step()
""",
        # A learning-rate scheduler is not an optimizer.
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    lr_scheduler.step()
""",
    ]
    invalid = [
        Invalid(
            """
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    optimizer.step()
    scaler.update()
""",
            fixed="""
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler()
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    opt.step()  # double step
    scaler.update()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler()
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
""",
        ),
        # Issue 26, principles 2 and 3: a protocol object's step method, its backward in a sibling.
        Invalid(
            """
class AmpStep:
    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self, optimizer):
        optimizer.step()
        self.scaler.update()
""",
            fixed="""
class AmpStep:
    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()
""",
        ),
        # The protocol's "step-around-unscaled": the optimizer steps directly while its scaler holds it
        # UNSCALED and an update() follows (the magnitude is right, an overflowing step is never skipped).
        Invalid(
            """
import torch
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scaler.update()
""",
        ),
        # Issue 26, principles 2 and 3: a helper unscales (its gradients arrive scaled), clips and steps
        # directly; its caller updates. Whatever the caller does, the step ran with no inf check. The fix
        # steps through the scaler: unsafe, on the caller's behalf.
        Invalid(
            """
import torch
def step_all(grad_scaler, optimizers, max_norm=None):
    for optimizer in optimizers:
        if max_norm is not None:
            grad_scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
        optimizer.step()
""",
            fixed="""
import torch
def step_all(grad_scaler, optimizers, max_norm=None):
    for optimizer in optimizers:
        if max_norm is not None:
            grad_scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
        grad_scaler.step(optimizer)
""",
        ),
    ]

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        optimizer_step, scaler, step = breach.event, breach.scaler, breach.step
        if breach.kind == STEPPED_TWICE:
            if optimizer_step.in_helper or breach.flow.from_start(optimizer_step, breach.related) is not None:
                return None  # not only after the scaler's step
            return remove_call_fix(model, optimizer_step, "Remove the second optimizer step")
        if breach.kind == AROUND_UNSCALED and breach.other is None:
            # No update here: the caller closes the iteration. Stepping through the scaler is right whatever
            # it does (the helper's own unscale_ shows the gradients arrive scaled), but it skips steps on
            # overflow that ran before, for a caller this file may not show: unsafe.
            fix = None if optimizer_step.in_helper else _step_through_scaler_fix(model, optimizer_step, scaler, True, step)
            if fix is not None:
                fix.applicability = Applicability.UNSAFE
            return fix
        if breach.kind != STEP_SCALED:
            fix = None if optimizer_step.in_helper else _step_through_scaler_fix(model, optimizer_step, scaler, True, step)
            if fix is not None and breach.kind == AROUND_UNSCALED:
                # Issue 46, a safe fix never rewrites deliberate code: a direct step right after an explicit
                # `unscale_` may be chosen on purpose (no host sync of `scaler.step` for this optimizer).
                fix.applicability = Applicability.UNSAFE
            return fix
        if optimizer_step.in_helper and not _helper_drives_protocol(model, step, optimizer_step, scaler):
            return None
        return _step_through_scaler_fix(model, optimizer_step, scaler, _drives_protocol(model, step, optimizer_step, scaler), step)

    def related(self, model: FileModel, breach: Breach):
        return self.through_helpers(breach.event)


def _drives_protocol(model: FileModel, step: TrainingStep, optimizer_step: Event, scaler: str) -> bool:
    """Does `scaler.update()` follow the direct step on a path? Then the code means the scaler protocol
    (and raises today: update() finds no inf checks); without it the direct step may be deliberate."""
    return bool(typestate.follows(flow_of(model, step), optimizer_step, RESETS_SCALER, scaler)[0])


def _helper_drives_protocol(model: FileModel, step: TrainingStep, optimizer_step: Event, scaler: str) -> bool:
    """The direct step is in a helper of this file that updates the scaler itself after it (ultralytics'
    `optimizer_step`: unscale_, clip, `optimizer.step()`, `scaler.update()`): the helper is wrong for every
    caller, so stepping through the scaler there is no edit on one caller's behalf."""
    if model.block_of(optimizer_step.statement) is None:
        return False
    updates, _ = typestate.follows(flow_of(model, step), optimizer_step, RESETS_SCALER, scaler)
    return any(update.reached_alike(optimizer_step) for update in updates)


def _step_through_scaler_fix(
    model: FileModel, event: Event, scaler: str, protocol: bool, step: TrainingStep
) -> Optional[Fix]:
    # `GradScaler.step(optimizer, *args, **kwargs)` forwards its arguments to `optimizer.step` (torch/amp/
    # grad_scaler.py); enabled, it refuses any `closure` keyword (RuntimeError, even `closure=None`) and runs
    # a positional closure inside `optimizer.step`, after its own inf check (AMP025). So: no fix for a
    # `closure=` keyword; a positional argument (`Optimizer.step`'s first is the closure) or `*args` is
    # forwarded only when it passes on what the step function's own caller handed it (accelerate's
    # `def step(self, closure=None): ... self.optimizer.step(closure)`): the function's contract stays
    # "whatever my caller passes, as `scaler.step` takes it"; one built here is AMP025's. Other keywords and
    # `**kwargs` are forwarded as they are.
    passes_through = False
    for arg in event.call.args:
        if arg.keyword is not None:
            if arg.keyword.value == "closure":
                return None
            continue
        if arg.star == "**" or _caller_hands_it(event, arg.value):
            passes_through = True
            continue
        return None
    add_update = False
    if not protocol:
        # `scaler.step(opt)` with no `update()` after it raises on the next step (issue 27, item 4): the
        # fix adds the update right after, when the scaler is updated nowhere else (a caller or another
        # phase that updates it would then update twice) and the step is a statement of its own.
        if any(e.receiver == scaler for e in model.events if e.kind is EventKind.SCALER_UPDATE):
            return None
        if not isinstance(event.small_statement, cst.Expr) or event.small_statement.value is not event.call:
            return None
        if not isinstance(event.statement, cst.SimpleStatementLine) or len(event.statement.body) != 1:
            return None
        add_update = True
    builder = FixBuilder(model.module)
    optimizer_node = event.call.func.value

    def through_scaler(updated: cst.CSTNode) -> cst.CSTNode:
        new = builder.expression(f"{scaler}.step(__optimizer__)")
        forwarded = tuple(event.call.args)  # as checked above: `scaler.step` hands them to `optimizer.step`
        return new.with_changes(args=(cst.Arg(value=optimizer_node), *forwarded), lpar=updated.lpar, rpar=updated.rpar)

    builder.replace(event.call, through_scaler)
    # A clip between the scaled backward and this step reads scaled gradients: `scaler.step` alone would leave it
    # clipping to `max_norm / scale`; its `unscale_` goes in with the step, as AMP030's fix writes it.
    if not unscale_before_scaled_reads(model, step, event, builder):
        return None
    if add_update:
        builder.insert_after(event.statement, builder.statement(f"{scaler}.update()\n"))
    # Stepping through the scaler skips steps on overflow and unscales first. Safe where the iteration
    # already runs the rest of the protocol (its update() needs the step); otherwise the direct step may
    # be deliberate (nerfacc steps its optimizer directly on purpose, issue #307): unsafe.
    # A pass-through (`**kwargs`, a closure parameter) may hold a closure, which `opt.step` ran and
    # `scaler.step` refuses (a keyword) or runs after its inf check (positional): unsafe, whatever follows.
    applicability = Applicability.SAFE if protocol and not passes_through else Applicability.UNSAFE
    return builder.build(f"Step through `{scaler}.step(...)`", applicability)


def _caller_hands_it(event: Event, value: cst.BaseExpression) -> bool:
    """`value` is a parameter of the step's own function, never rebound there: what its caller handed in."""
    scope = event.scope
    return (
        not event.in_helper
        and isinstance(value, cst.Name)
        and scope is not None
        and value.value in scope.params
        and value.value not in scope.assignments
    )
