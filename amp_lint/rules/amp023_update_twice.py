from __future__ import annotations

from typing import Optional

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_updates import UPDATE_AGAIN, UPDATE_PER_OPTIMIZER, updates_twice
from amp_lint.rules._helpers import OrderRule, remove_call_fix
from amp_lint.rules.base import Fix, Invalid


class UpdateTwice(OrderRule):
    """
    ## What it does
    Finds `scaler.update()` called more than once per iteration where a later step consumes gradients
    scaled before the earlier update: once per optimizer after one backward, or inside a loop over the
    optimizers. Two complete cycles (`scale -> backward -> step(opt_a) -> update`, then the same for `opt_b`)
    are legal and not reported: each update follows the step of gradients scaled with the current scale.

    ## Why is this bad?
    "`scaler.update` should only be called once, after all optimizers used this iteration have been
    stepped." The runtime does not catch it, and the math goes silently wrong: the second optimizer's
    gradients, scaled with the old scale, are unscaled with the new one (off by the growth or backoff
    factor), and the scale grows twice as fast.

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler.step(opt_g)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(opt_d)
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
    query = updates_twice
    messages = {
        UPDATE_AGAIN: "`{event}` runs again later in the same iteration; update() once, after the last step()",
        UPDATE_PER_OPTIMIZER: "`{event}` runs once per optimizer inside a loop; update() once, after the loop",
    }
    name = "update-more-than-once"
    summary = "scaler.update() more than once per iteration"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bupdate\b")

    valid = [
        # Issue 26, principle 1 (an iteration steps each optimizer once): a whole round (backward, step,
        # update) and then another of the same optimizer are two iterations (mmf's tests run
        # `_do_a_fp16_pass()` twice in a row), not one that updates twice.
        """
class Test:
    def one_pass(self, x):
        self.scaler.scale(self.model(x).sum()).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def test_resume(self, x):
        self.one_pass(x)
        self.one_pass(x)
""",
        # The loop over optimizers picks one of them: the step and the update run on one pass only.
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for index, optimizer in enumerate(optimizers):
        if index == turn:
            scaler.step(optimizer)
            scaler.update()
""",
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
        # Issue 46, two complete cycles per iteration: each update follows the step of gradients scaled
        # after the previous update (weights, then architecture parameters; a GAN's two phases).
        """
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    scaler.update()
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
    scaler.scale(g_loss).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler.step(opt_g)
    scaler.update()
""",
            fixed="""
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.scale(g_loss).backward()
    scaler.step(opt_d)
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

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        if breach.kind != UPDATE_AGAIN or breach.event.in_helper or breach.last.in_helper:
            return None
        return remove_call_fix(model, breach.event, "Remove the extra `update()`")

    def related(self, model: FileModel, breach: Breach):
        return self.through_helpers(breach.event) if breach.kind == UPDATE_AGAIN else ()
