from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.scaler_flow import StepFlow
from amp_lint.analysis.flow_queries import site_path
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_updates import (
    BEFORE_STEP,
    BREAKS_EVERY_PATH,
    CHECKS_ONLY_ON_SOME_PATHS,
    NEVER_STEPPED,
    RESETS_UNSCALED,
    updates_before_inf_checks,
)
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Fix, Invalid

class UpdateBeforeStep(OrderRule):
    """
    ## What it does
    Finds `scaler.update()` called before any `scaler.step(...)` / `scaler.unscale_(...)` of the
    iteration, or on a scaler that is never stepped at all.

    ## Why is this bad?
    `update()` consumes the inf/NaN checks that `step()` and `unscale_()` record. Called first, it raises
    `AssertionError: No inf checks were recorded prior to update.` on the very first iteration. The
    documentation is explicit: `update()` "should only be called at the end of the iteration, after
    `scaler.step(optimizer)` has been invoked for all optimizers used this iteration".

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.update()
    scaler.step(optimizer)
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe. The `update()` moves to right after the last `scaler.step(...)` of the iteration, at the same
    block level. No fix when the scaler is never stepped.

    ## References
    - `torch/amp/grad_scaler.py`: `GradScaler.update` docstring and its "No inf checks" assertion
    - [AMP examples](https://docs.pytorch.org/docs/stable/notes/amp_examples.html)
    """

    code = "AMP022"
    query = updates_before_inf_checks
    messages = {
        BEFORE_STEP: "`{event}` runs before `{other}`; update() must come after every step() of the iteration",
        CHECKS_ONLY_ON_SOME_PATHS: "`{event}` runs on every pass but `{last}` only {guard}; update() without a step "
        "raises 'No inf checks were recorded' (move it next to the step)",
        BREAKS_EVERY_PATH: "`{event}` runs before `{other}`: without an earlier unscale_ it finds no inf checks, after "
        "one the step divides the gradients again; update() must come after every step()",
        NEVER_STEPPED: "`{event}` but `{scaler}` is never stepped: update() raises 'No inf checks were recorded'; "
        "call `{scaler}.step(optimizer)` first",
        RESETS_UNSCALED: "`{event}` runs between `{scaler}.unscale_(...)` and `{other}`: the step finds the optimizer "
        "reset and divides the gradients by the scale again, and the next `unscale_()` raises 'unscale_() is being "
        "called after step()'; update() must come after every step()",
    }
    name = "update-before-step"
    summary = "scaler.update() before (or without) scaler.step()"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bupdate\b")

    valid = [
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # unscale_ also records the inf checks.
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    scaler.update()
""",
        # The step lives in another method of the class.
        """
class Trainer:
    def step(self):
        self.scaler.step(self.optimizer)

    def end_of_iteration(self):
        self.scaler.update()
""",
        # A step in each branch of an if/else (open_clip's Horovod switch).
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if args.horovod:
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
    else:
        scaler.step(optimizer)
    scaler.update()
""",
        # `dict.update` on something that is not a scaler.
        """
for x in loader:
    metrics.update(loss=1.0)
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
""",
    ]
    valid += [
        # PyTorch's multi-optimizer example with the optimizers in a list (issue 44): a loop that steps each
        # optimizer is a step, and a `continue` that skips step and update alike is no condition on the step.
        """
for x, y in loader:
    scaler.scale(loss_fn(model0(x), y)).backward()
    if skip_batch:
        continue
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
""",
    ]
    invalid = [
        # Accumulation: update() on every micro-batch, step() only at the boundary.
        Invalid(
            """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        optimizer.zero_grad()
    scaler.update()
""",
            fixed="""
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        ),
        Invalid(
            """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.update()
    scaler.step(optimizer)
""",
            fixed="""
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # The update in the `else` comes later in the text than the step but never runs after it: the
        # fix still needs an update next to the step (the lexical model took the `else` one for it and
        # only deleted the flagged update, leaving the step without any).
        Invalid(
            """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        optimizer.zero_grad()
    else:
        scaler.update()
    scaler.update()
""",
            fixed="""
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    else:
        scaler.update()
""",
        ),
        # `unscale_(); update(); step()` (issue 26, principle 1): step() finds the optimizer READY again,
        # unscales the already unscaled gradients, and the next iteration's unscale_() meets STEPPED.
        Invalid(
            """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    scaler.update()
    scaler.step(optimizer)
""",
            fixed="""
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # Issue 26, principle 1: every path breaks (no inf checks without the clip, a second unscaling
        # with it): proved, not assumed.
        Invalid(
            """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if max_norm:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
""",
            fixed="""
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if max_norm:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # Never stepped anywhere: reported, not fixed.
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler()
for x in loader:
    scaler.scale(model(x).sum()).backward()
    optimizer.step()
    scaler.update()
""",
        ),
    ]

    def words(self, model: FileModel, breach: Breach):
        return {"guard": _guard(breach.event, breach.last)} if breach.kind == CHECKS_ONLY_ON_SOME_PATHS else {}

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        update, last, flow = breach.event, breach.last, breach.flow
        if breach.kind == NEVER_STEPPED or update.in_helper or last.in_helper:
            return None
        if breach.kind == CHECKS_ONLY_ON_SOME_PATHS:
            fix = _direct_step_fix(model, breach.step, flow, update, breach.related, breach.scaler)
            if fix is not None:
                return fix
        return _move_fix(model, flow, update, last, breach.scaler)

    def related(self, model: FileModel, breach: Breach):
        return () if breach.kind == NEVER_STEPPED else self.through_helpers(breach.event)


def _guard(update: Event, last: Event) -> str:
    # A guard the update is under too (`if skip: continue` before both) is no condition on the step.
    own = [b for b in last.branches if not any(b.node is u.node and b.taken == u.taken for u in update.branches)]
    if own:
        branch = own[-1]
        test = code_of(branch.node.test)
        return f"under `if {test}`" if branch.taken else f"where `{test}` is false"
    if len(last.loops) > len(update.loops):
        return "inside a loop that may run no times"
    return "under a branch"


def _direct_step_fix(
    model: FileModel, step: TrainingStep, flow: StepFlow, update: Event, earlier, scaler: str
) -> Optional[Fix]:
    """Only `unscale_` records inf checks before the update, and the optimizer it unscales is stepped directly
    on the way (`scaler.unscale_(opt)` under a flag, `opt.step()`, `scaler.update()`: lightning's precision
    plugin with its `scaler.step` written `optimizer.step`): the step is what is wrong, and it goes through
    the scaler. Moving the update next to the unscale_ would leave the optimizer stepping on inf gradients."""
    if any(e.kind is EventKind.SCALER_STEP for e in earlier):
        return None
    targets = {e.target for e in earlier if e.target is not None}
    direct = [
        e for e in step.of(EventKind.OPTIMIZER_STEP)
        if e.target in targets and flow.path(e, update) is not None and not e.in_helper
    ]
    if len(direct) != 1 or not isinstance(direct[0].call.func, cst.Attribute):
        return None
    call = direct[0].call
    if any(arg.star != "**" for arg in call.args):
        return None  # a positional closure or `*args`: AMP025's, or not known
    builder = FixBuilder(model.module)
    optimizer_node = call.func.value

    def through_scaler(updated: cst.CSTNode) -> cst.CSTNode:
        new = builder.expression(f"{scaler}.step(__optimizer__)")
        return new.with_changes(args=(cst.Arg(value=optimizer_node), *updated.args), lpar=updated.lpar, rpar=updated.rpar)

    builder.replace(call, through_scaler)
    # `**kwargs` may carry a closure, which GradScaler.step refuses: unsafe then.
    applicability = Applicability.UNSAFE if call.args else Applicability.SAFE
    return builder.build(f"Step through `{scaler}.step(...)`", applicability)


def _move_fix(model: FileModel, flow: StepFlow, update: Event, last_step: Event, scaler: str) -> Optional[Fix]:
    step = flow.step
    if not isinstance(update.small_statement, cst.Expr) or update.small_statement.value is not update.call:
        return None
    anchor = step.anchor_statement(last_step)
    target = removal_target(update.statement, update.small_statement)
    if anchor is update.statement or target is anchor:
        return None
    block = model.block_of(anchor)
    if block is not None and anchor in block:
        following = list(block).index(anchor) + 1
        if following < len(block) and block[following] is target:
            return None  # the update already follows the last step: moving it changes nothing
    builder = FixBuilder(model.module)
    builder.remove(target)
    # Another update that a path runs after the step already closes the iteration.
    has_later_update = any(
        e is not update and site_path(flow, last_step, e) is not None
        for e in step.scaler_events(scaler, EventKind.SCALER_UPDATE)
    )
    if not has_later_update:
        # The same statement, trailing comment included (a copy: the original is marked for removal).
        moved = update.statement.deep_clone() if target is update.statement else builder.statement(f"{code_of(update.call)}\n")
        builder.insert_after(anchor, moved.with_changes(leading_lines=()))
    return builder.build(f"Move `{scaler}.update()` after the last `{scaler}.step(...)`", Applicability.SAFE)
