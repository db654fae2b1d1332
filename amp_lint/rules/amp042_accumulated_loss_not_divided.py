from __future__ import annotations

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.order_accumulation import LOSS_NOT_DIVIDED, losses_not_divided
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Invalid


class AccumulatedLossNotDivided(OrderRule):
    """
    ## What it does
    Finds a gradient-accumulation loop (boundary `if (i + 1) % N == 0:`) whose scaled loss is never
    divided (or multiplied) by `N` on its way to `backward()`.

    ## Why is this bad?
    The AMP examples divide: `loss = loss / iters_to_accumulate`. Without it the accumulated gradient
    is N times the mean gradient: an N-times larger learning rate for SGD, a clipping threshold that
    means something else, and float16 scaled gradients that overflow earlier (the update was 4.00x
    with N=4 in a CPU reproduction).

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
            loss = loss / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Fix safety
    No automatic fix: the loss may be normalised elsewhere (inside the loss function, with
    `reduction="sum"` and an explicit divisor). Off by default (heuristic), reported at medium confidence.

    ## References
    - [AMP examples: gradient accumulation](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation)
    """

    code = "AMP042"
    query = losses_not_divided
    messages = {
        LOSS_NOT_DIVIDED: "`{event:short}` accumulates over `{node}` micro-batches but the loss is never divided by "
        "`{node}`: the accumulated gradient is that many times the mean",
    }
    name = "accumulated-loss-not-divided"
    summary = "Accumulation loop: loss not divided by the number of accumulation steps"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"[Ss]caler", r"\bbackward\b")

    valid = [
        """
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        """
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    scaler.scale(loss / args.grad_accum_steps).backward()
    if (i + 1) % args.grad_accum_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # A periodic evaluation that zeroes the gradients is no accumulation boundary.
        """
for features, labels in loader:
    scaler.scale(loss_fct(model(features), labels)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    training_steps += 1
    if evaluator is not None and training_steps % evaluation_steps == 0:
        evaluate(model)
        model.zero_grad()
""",
        # No accumulation.
        """
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    if (i + 1) % n_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
        ),
    ]

    def confidence_of(self, breach) -> Confidence:
        return Confidence.MEDIUM
