from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import argument, literal_bool, short
from amp_lint.rules.base import Finding, Invalid, Rule


class GradientPenaltyScaling(Rule):
    """
    ## What it does
    Finds a gradient penalty, `torch.autograd.grad(..., create_graph=True)`, in a function that scales
    its loss with a GradScaler, when the outputs passed in are not scaled (`scaler.scale(out)`), or when
    they are scaled but the function never divides the resulting gradients by `scaler.get_scale()`.

    ## Why is this bad?
    The AMP examples: "the `outputs` Tensor(s) passed to `torch.autograd.grad` should be scaled. The
    resulting gradients will therefore be scaled, and should be unscaled before being combined to create
    the penalty value." Unscaled outputs give float16 gradients that underflow, as in AMP010; scaled
    gradients used as they are make the penalty `scale` times (65536 at first) too large.
    `scaler.unscale_` does not help: these gradients belong to no optimizer.

    ## Example
    ```python
    grads = torch.autograd.grad(loss, model.parameters(), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    scaler.scale(loss + penalty).backward()
    ```

    ## Use instead
    ```python
    scaled = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
    inv_scale = 1.0 / scaler.get_scale()
    grads = [g * inv_scale for g in scaled]
    with torch.autocast("cuda"):
        penalty = sum(g.pow(2).sum() for g in grads)
    scaler.scale(loss + penalty).backward()
    ```

    ## Fix safety
    No fix (the D-EX pattern above is the model). Reported only with a literal `create_graph=True`, in
    a function that itself calls `scaler.scale(...)` on an enabled scaler.

    ## References
    - [AMP examples: gradient penalty](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-penalty)
    - `../shared/amp-reference/rules.md` AMP032
    """

    code = "AMP032"
    name = "gradient-penalty-scaling"
    summary = "Gradient penalty (autograd.grad with create_graph=True) on unscaled outputs, or scaled gradients never unscaled"
    severity = Severity.WARNING
    needs = (r"[Ss]caler", r"\bcreate_graph\b", r"\bgrad\b")  # a word other rules need first

    valid = [
        """
import torch
def step(model, loss, scaler):
    scaled = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
    inv_scale = 1.0 / scaler.get_scale()
    grads = [g * inv_scale for g in scaled]
    penalty = sum(g.pow(2).sum() for g in grads)
    scaler.scale(loss + penalty).backward()
""",
        # The outputs scaled under another name, or an element of a scaled tensor; the plain call only where the
        # scaler is None (mmagic's r1_gradient_penalty_loss and gen_path_regularizer).
        """
import torch
from torch import autograd
def r1_penalty(discriminator, real, loss_scaler=None):
    pred = discriminator(real)
    if loss_scaler:
        pred = loss_scaler.scale(pred)
    grads = autograd.grad(outputs=pred, inputs=real, grad_outputs=torch.ones_like(pred), create_graph=True)[0]
    if loss_scaler:
        grads = grads / loss_scaler.get_scale()
    return grads.pow(2).sum()

def path_penalty(generator, latents, loss_scaler=None):
    out = generator(latents)
    if loss_scaler:
        loss = loss_scaler.scale(out.sum())[0]
        grad = autograd.grad(outputs=loss, inputs=latents, create_graph=True)[0]
        grad = grad * (1.0 / loss_scaler.get_scale())
    else:
        grad = autograd.grad(outputs=out.sum(), inputs=latents, create_graph=True)[0]
    return grad.pow(2).sum()
""",
        # No scaler in this function.
        """
import torch
def step(model, loss):
    grads = torch.autograd.grad(loss, model.parameters(), create_graph=True)
    (loss + sum(g.pow(2).sum() for g in grads)).backward()
""",
        # Not a penalty: no graph of the gradients.
        """
import torch
def step(model, loss, scaler):
    grads = torch.autograd.grad(loss, model.parameters())
    scaler.scale(loss).backward()
""",
    ]
    invalid = [
        # Under `if scaler is not None:` the scaler does scale the loss.
        Invalid(
            """
import torch
def step(model, loss, scaler=None):
    if scaler is not None:
        grads = torch.autograd.grad(loss, model.parameters(), create_graph=True)
        penalty = sum(g.pow(2).sum() for g in grads)
        scaler.scale(loss + penalty).backward()
"""
        ),
        Invalid(
            """
import torch
def step(model, loss, scaler):
    grads = torch.autograd.grad(outputs=loss, inputs=model.parameters(), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    scaler.scale(loss + penalty).backward()
"""
        ),
        Invalid(
            """
import torch
def step(model, loss, scaler):
    grads = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    scaler.scale(loss + penalty).backward()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        # The analysis's record of each call: what its outputs hold (a name bound to `scaler.scale(...)`,
        # an element of one, a container of them: issue 26, principle 4) and the branches it runs under.
        events = {id(e.call): e for e in model.events if e.kind is EventKind.AUTOGRAD_GRAD}
        for site in model.call_sites:
            if site.qualified_name not in names.AUTOGRAD_GRAD:
                continue
            create = argument(site.call, 4, "create_graph")  # (outputs, inputs, grad_outputs, retain_graph, create_graph)
            if create is None or literal_bool(create.value) is not True:
                continue
            scaler = _scaling_scaler(model, site)
            if scaler is None:
                continue
            outputs = argument(site.call, 0, "outputs")
            if outputs is None:
                continue
            event = events.get(id(site.call))
            if event is not None and scaler in event.failing_tests:
                continue  # under `else:` of `if scaler:` (or `if scaler is None:`): no scaler scales this loss
            scaled_by = _scaled_by(outputs.value) or (event.scaled_by if event is not None else None)
            if scaled_by is None and event is not None and any(
                other.scope is event.scope and _scaled_by(other.call.args[0].value if other.call.args else other.call) == scaler
                and not event.compatible(other) for other in events.values()
            ):
                continue  # the fp32 alternative of a scaled penalty (`if use_scaler: ... else: ...`)
            if scaled_by is None:
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 50)}` differentiates unscaled outputs while `{scaler}` scales the loss: pass "
                    f"`{scaler}.scale(...)` as outputs (float16 gradients underflow otherwise), then divide the gradients "
                    f"by `{scaler}.get_scale()`",
                    context=site.scope.name,
                )
            elif not _unscaled_later(model, site, scaled_by):
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 50)}` returns gradients scaled by `{scaled_by}`, and this function never divides "
                    f"them by `{scaled_by}.get_scale()`: the penalty is `scale` times too large",
                    context=site.scope.name,
                )


def _scaled_by(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "scale":
        return dotted_name(expr.func.value)
    return None


def _scaling_scaler(model: FileModel, grad: CallSite) -> Optional[str]:
    """The scaler whose `.scale(...)` this function calls, when it is an enabled scaler."""
    for site in model.call_sites:
        if site.scope is not grad.scope or site.method != "scale" or site.receiver is None:
            continue
        key = dotted_name(site.receiver)
        if key and model.is_scaler(key, site.scope) and model.scaler_enabled(key, site.scope):
            return key
    return None


def _unscaled_later(model: FileModel, grad: CallSite, scaler: str) -> bool:
    return any(
        site.scope is grad.scope and site.method == "get_scale" and dotted_name(site.receiver) == scaler
        for site in model.call_sites
    )
