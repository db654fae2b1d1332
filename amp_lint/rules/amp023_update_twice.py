from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.paths import Proof
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.scaler_flow import StepFlow, assumption_text, flow_of
from amp_lint.analysis.flow_queries import again_in_loop, any_path, last_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class UpdateTwice(Rule):
    """
    ## What it does
    Finds `scaler.update()` called more than once per iteration: once per optimizer, in each phase of a
    GAN step, or inside a loop over the optimizers.

    ## Why is this bad?
    "`scaler.update` should only be called once, after all optimizers used this iteration have been
    stepped." The runtime does not catch it, and the math goes silently wrong: the second optimizer's
    gradients, scaled with the old scale, are unscaled with the new one (off by the growth or backoff
    factor), and the scale grows twice as fast.

    ## Example
    ```python
    scaler.step(opt_d)
    scaler.update()
    ...
    scaler.step(opt_g)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.step(opt_d)
    ...
    scaler.step(opt_g)
    scaler.update()
    ```

    ## Fix safety
    Safe. Every `update()` but the last of the iteration is removed. An `update()` inside a loop over
    optimizers is reported without a fix (the loop has to be split by hand).

    ## References
    - [AMP examples: working with multiple models, losses, and optimizers](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#working-with-multiple-models-losses-and-optimizers)
    - `torch/amp/grad_scaler.py`: `GradScaler.update`
    """

    code = "AMP023"
    name = "update-more-than-once"
    summary = "scaler.update() more than once per iteration"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bupdate\b")

    valid = [
        """
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # Alternating phases: each iteration takes one branch and updates once.
        """
for i, x in enumerate(loader):
    if i % 2 == 0:
        scaler.scale(d_loss).backward()
        scaler.step(opt_d)
        scaler.update()
    else:
        scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        scaler.update()
""",
        # Two scalers, one per network, each updated once.
        """
for x in loader:
    scaler_d.scale(d_loss).backward()
    scaler_d.step(opt_d)
    scaler_d.update()
    scaler_g.scale(g_loss).backward()
    scaler_g.step(opt_g)
    scaler_g.update()
""",
        # Step the first optimizer that has gradients, update, and leave the loop: the update runs once
        # per iteration (the lexical model saw "an update inside a loop with a step" and stopped there).
        """
for x in loader:
    scaler.scale(loss).backward()
    for opt in optimizers:
        if has_grads(opt):
            scaler.step(opt)
            scaler.update()
            break
""",
    ]
    invalid = [
        Invalid(
            """
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
            fixed="""
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        ),
        Invalid(
            """
for x in loader:
    scaler.scale(loss).backward()
    for opt in optimizers:
        scaler.step(opt)
        scaler.update()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for step in model.steps:
            # `update(new_scale)` sets the scale (icefall, matcha): not a second per-iteration update.
            updates = [u for u in step.of(EventKind.SCALER_UPDATE) if not u.call.args]
            flow = flow_of(model, step) if updates else None
            for update in updates:
                scaler = update.receiver
                if not model.scaler_enabled(scaler, step.scope):
                    continue
                later, proof = any_path(flow, update, [u for u in updates if u.receiver == scaler])
                if later:
                    last = last_of(flow, later)
                    yield self.finding(
                        update.call,
                        f"`{code_of(update.call)}` runs again later in the same iteration; "
                        "update() once, after the last step()",
                        fix=None if update.in_helper or last.in_helper else _remove_fix(model, update),
                        context=step.scope.name,
                        related=self.through_helpers(update),
                        assumption=assumption_text(proof),
                    )
                    continue
                again = _again_in_inner_loop_with_step(flow, update)
                if again is not None:
                    yield self.finding(
                        update.call,
                        f"`{code_of(update.call)}` runs once per optimizer inside a loop; "
                        "update() once, after the loop",
                        context=step.scope.name,
                        assumption=assumption_text(again),
                    )


def _again_in_inner_loop_with_step(flow: StepFlow, update: Event) -> Optional[Proof]:
    """The innermost loop inside the iteration around `update` that also steps this scaler: can the
    update run again on that loop's next pass (no `break` or `return` right after it)?"""
    step = flow.step
    if step.loop is None and not step.of(EventKind.BACKWARD):
        return None  # no backward here: the iteration's own loop is unknown
    inner = update.loops[update.loops.index(step.loop) + 1 :] if step.loop in update.loops else update.loops
    if not inner:
        return None
    loop = inner[-1]
    if not any(e.kind is EventKind.SCALER_STEP and e.receiver == update.receiver and loop in e.loops for e in step.events):
        return None
    return again_in_loop(flow, update, loop)


def _remove_fix(model: FileModel, update: Event) -> Optional[Fix]:
    if not isinstance(update.small_statement, cst.Expr) or update.small_statement.value is not update.call:
        return None
    builder = FixBuilder(model.module)
    builder.remove(removal_target(update.statement, update.small_statement))
    return builder.build("Remove the extra `update()`", Applicability.SAFE)
