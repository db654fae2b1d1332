from __future__ import annotations

from typing import Iterator, List, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.gradient_effects import optimizer_holds_parameters_of
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import short
from amp_lint.analysis.paths import PROVED, Proof, weakest
from amp_lint.analysis.scaler_flow import assumption_text, flow_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class ZeroGradBeforeStep(Rule):
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
            flow = flow_of(model, step)
            for consumer in step.of(EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
                scaler = consumer.receiver
                if consumer.target is None or not model.scaler_enabled(scaler, step.scope):
                    continue
                backwards = [e for e in step.of(EventKind.BACKWARD) if e.scaled_by == scaler and flow.path(e, consumer) is not None]
                if not backwards:
                    continue
                stepped = {e.target for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler}
                # A step of this optimizer consumes the gradients: a zero_grad after it clears nothing it needs.
                own_steps = [
                    e for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler and e.target == consumer.target and e is not consumer
                ]
                refills = [e for e in step.of(EventKind.BACKWARD) if flow.path(e, consumer) is not None]
                for zero in step.of(EventKind.ZERO_GRAD):
                    if id(zero.call) in reported:
                        continue
                    # The gradients of a scaled backward reach the zero_grad (no step of this optimizer
                    # between), and the zero_grad reaches the consumer with no backward between to
                    # refill them (GAN: the generator's zero_grad, then its own backward). A zero_grad that
                    # leaves the loop (`optimizer.zero_grad(); break`, an OOM retry) has no path on.
                    proof = weakest(_reached_by(flow, backwards, zero, own_steps), flow.path(zero, consumer, refills))
                    if proof is None:
                        continue
                    backward = _last_backward(flow, backwards, zero)
                    # An `except RuntimeError` out-of-memory handler that drops the batch is not the normal
                    # path (fairseq's ddp_trainer): a finding there assumes the exception happens.
                    assumption = (
                        "assumes the exception handler runs" if flow.in_handler(zero) else assumption_text(proof)
                    )
                    if zero.target == consumer.target:
                        confidence = Confidence.HIGH
                    elif zero.target is not None and not model.is_optimizer(zero.target) and len(stepped) == 1:
                        # A module's zero_grad: proved when the stepped optimizer is built here from that
                        # module's parameters (issue 26, principle 4), else assumed.
                        holds = optimizer_holds_parameters_of(model, consumer.target, zero.target, step.scope)
                        confidence = Confidence.HIGH if holds else Confidence.MEDIUM
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


def _reached_by(flow, backwards: List[Event], zero: Event, own_steps: List[Event]) -> Optional[Proof]:
    """The best proof that some scaled backward reaches `zero` with no step of the optimizer between."""
    best = None
    for backward in backwards:
        proof = flow.path(backward, zero, own_steps)
        if proof is PROVED:
            return proof
        best = best or proof
    return best


def _last_backward(flow, backwards: List[Event], zero: Event) -> Event:
    """A backward that reaches `zero` with no other backward between (the one whose gradients it clears)."""
    for backward in backwards:
        if flow.path(backward, zero, [b for b in backwards if b is not backward]) is not None:
            return backward
    return next((b for b in backwards if flow.path(b, zero) is not None), backwards[0])


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
