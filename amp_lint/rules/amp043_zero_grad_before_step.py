from __future__ import annotations

from typing import Iterator, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import contains, short
from amp_lint.analysis.paths import weakest
from amp_lint.analysis.scaler_flow import assumption_text, flow_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class ZeroGradBeforeStep(Rule):
    """
    ## What it does
    Finds `zero_grad()` between a scaled backward (`scaler.scale(loss).backward()`) and the
    `scaler.step(optimizer)` / `scaler.unscale_(optimizer)` that should consume those gradients.

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
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        reported: Set[int] = set()
        for step in model.steps:
            for consumer in step.of(EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
                scaler = consumer.receiver
                if consumer.target is None or not model.scaler_enabled(scaler, step.scope):
                    continue
                backwards = [
                    e
                    for e in step.of(EventKind.BACKWARD)
                    if e.scaled_by == scaler and e.index < consumer.index and e.compatible(consumer)
                ]
                if not backwards:
                    continue
                backward = backwards[-1]
                stepped = {e.target for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler}
                for zero in step.of(EventKind.ZERO_GRAD):
                    if not backward.index < zero.index < consumer.index or id(zero.call) in reported:
                        continue
                    if not (zero.compatible(backward) and zero.compatible(consumer)):
                        continue
                    flow = flow_of(model, step)
                    proof = weakest(flow.path(backward, zero), flow.path(zero, consumer))
                    if proof is None:
                        continue
                    # An `except RuntimeError` out-of-memory handler that drops the batch is not the normal
                    # path (fairseq's ddp_trainer): a finding there assumes the exception happens.
                    assumption = (
                        "assumes the exception handler runs" if flow.in_handler(zero) else assumption_text(proof)
                    )
                    if _stepped_between(step, backward, zero, consumer.target, scaler):
                        continue
                    if _leaves_before(model, zero, consumer):
                        continue
                    if zero.target == consumer.target:
                        confidence = Confidence.HIGH
                    elif zero.target is not None and not model.is_optimizer(zero.target) and len(stepped) == 1:
                        confidence = Confidence.MEDIUM
                    else:
                        continue
                    reported.add(id(zero.call))
                    yield self.finding(
                        zero.call,
                        f"`{short(zero.call)}` clears the gradients of `{short(backward.call, 40)}` before "
                        f"`{short(consumer.call, 40)}` reads them: 'No inf checks were recorded' (or a step on "
                        f"zero gradients); zero them after `{scaler}.update()`",
                        fix=_move_fix(model, step, zero, consumer, scaler),
                        confidence=confidence,
                        context=step.scope.name,
                        assumption=assumption,
                    )


def _caller_statement(event: Event) -> cst.CSTNode:
    """The statement of the iteration itself: for an event inside a helper, the call of the helper."""
    trail = event.trail()
    return trail[0].statement if trail else event.statement


def _leaves_before(model: FileModel, zero: Event, consumer: Event) -> bool:
    """`optimizer.zero_grad(); break` (an OOM retry in an `except`): the step never follows on that path."""
    statement = _caller_statement(zero)
    block = model.block_of(statement)
    if block is None:
        return False
    target = _caller_statement(consumer)
    for following in block[list(block).index(statement) + 1 :]:
        if following is target or contains(following, target):
            return False
        if isinstance(following, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Break, cst.Continue, cst.Return, cst.Raise)) for small in following.body
        ):
            return True
    return False


def _stepped_between(step: TrainingStep, backward: Event, zero: Event, optimizer: str, scaler: str) -> bool:
    return any(
        e.kind is EventKind.SCALER_STEP and e.receiver == scaler and e.target == optimizer and backward.index < e.index < zero.index
        for e in step.events
    )


def _move_fix(model: FileModel, step: TrainingStep, zero: Event, consumer: Event, scaler: str) -> Optional[Fix]:
    if zero.in_helper or not isinstance(zero.small_statement, cst.Expr) or zero.small_statement.value is not zero.call:
        return None
    later = [
        e
        for e in step.events
        if e.index > consumer.index and e.receiver == scaler and e.compatible(zero)
        and (e.kind is EventKind.SCALER_UPDATE or (e.kind is EventKind.SCALER_STEP and e.target == consumer.target))
    ]
    updates = [e for e in later if e.kind is EventKind.SCALER_UPDATE]
    after = updates[0] if updates else (later[-1] if later else (consumer if consumer.kind is EventKind.SCALER_STEP else None))
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
