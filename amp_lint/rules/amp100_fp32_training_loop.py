from __future__ import annotations

import dataclasses
from typing import Iterator

from amp_lint.conversion.planner import BFLOAT16, FLOAT16, plan_conversions
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.analysis.model import FileModel, code_of
from amp_lint.rules.base import Finding, Invalid, Rule


class Fp32TrainingLoop(Rule):
    """
    ## What it does
    Finds training loops that run in full fp32: `loss.backward()` and `optimizer.step()` on a torch
    optimizer, with no autocast region and no `GradScaler` in reach. A step function called once per
    batch (`train_step(model, batch, optimizer)` called from a loop) counts as a loop. Off by default:
    fp32 training is not a bug, but converting it by hand is tedious and easy to get wrong, and the
    fix does it the canonical way.

    The options `amp-dtype` (`float16`, the default: autocast + GradScaler; or `bfloat16`: autocast
    only) and `amp-device` (default: inferred from `torch.device(...)`, `.cuda()`, `.to("cuda")` or an
    existing autocast, else `"cuda"`; a `device = torch.device(...)` variable in scope is emitted as
    `device.type`, so the script keeps following its own device choice) shape the conversion.

    ## Why is this bad?
    On GPUs with tensor cores, mixed precision runs the matrix multiplications and convolutions in
    float16 or bfloat16: typically 1.5-3x faster and about half the activation memory, at the same
    accuracy when done the canonical way (autocast around the forward pass and the loss only, and
    for float16 a GradScaler so that small gradients do not underflow to zero).

    ## Example
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        optimizer.zero_grad()
        with torch.amp.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Unsafe: it changes numerics on purpose. The fix wraps the forward slice (the contiguous statements
    that compute each loss from a model call; `zero_grad`, logging and `.to(device)` transfers before it
    stay outside) in `torch.amp.autocast`. With float16 it also creates one `GradScaler` before the
    function's outermost loop (named `scaler`, or `grad_scaler`, ... when that name is taken), scales
    every backward, calls `scaler.unscale_(optimizer)` right before gradient clipping or a gradient
    read, steps every optimizer through the scaler and calls `scaler.update()` once after the last
    step, inside the accumulation boundary when there is one. A step function gets the scaler as a new
    keyword parameter `scaler`, and each caller creates it once before its loop and passes
    `scaler=scaler`: explicit, and the scaler's state lives as long as the training run.

    No fix (the finding says why) for: closure optimizers (`LBFGS`, `step(closure)`), `model.half()`,
    float64 training, `torch.autograd.grad(..., create_graph=True)` (a gradient penalty, convert it by
    hand), `nn.BCELoss` / `F.binary_cross_entropy` when the device may be CUDA (banned under CUDA
    autocast: use `BCEWithLogitsLoss`), backward and step in different functions, parameters updated
    by hand without an optimizer, and a step function whose call sites are not all in the file.

    ## References
    - [AMP examples](https://docs.pytorch.org/docs/stable/notes/amp_examples.html): typical, accumulation, clipping,
      several optimizers
    - [AMP recipe](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "AMP100"
    name = "fp32-training-loop"
    summary = "Training loop runs in full fp32"
    severity = Severity.INFO
    default_enabled = False
    fix_applicability = Applicability.UNSAFE
    # A finding needs a backward (`x.backward()`, `torch.autograd.backward` or `torch.autograd.grad`,
    # whose name always brings "autograd" into the file) and an update: an optimizer's `.step(...)` or
    # a parameter updated by hand from its `.grad` (attributes: a dot, then maybe spaces, line breaks or
    # whole comments, then the name; a comment must reach its line break, or a run of `#` could be
    # split in exponentially many ways). The second step looks for the `step` call or the
    # `manual_grad_update` fact (`p.data -= lr * p.grad`, `p.data.add_(p.grad, ...)`).
    needs = (r"backward|autograd", r"\.(?:[\s\\]|#[^\r\n]*[\r\n])*step\b|\.(?:[\s\\]|#[^\r\n]*[\r\n])*grad\b")
    ast_needs = (r"\bbackward\b|\bgrad\b", r"\bstep\b|\bmanual_grad_update\b")

    valid = [
        # Already AMP.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # bfloat16 autocast needs no scaler: AMP is set up.
        """
import torch
for x, y in loader:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # No optimizer step anywhere: computing gradients is not training.
        """
import torch
saliency = []
for x in loader:
    x.requires_grad_(True)
    model(x).sum().backward()
    saliency.append(x.grad)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # Accumulation and clipping: unscale_, step and update inside the boundary.
        Invalid(
            """
import torch as T
def train(model, loader, opt, device, accum=4):
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss = T.nn.functional.cross_entropy(out, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            T.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
""",
            fixed="""
import torch as T
def train(model, loader, opt, device, accum=4):
    scaler = T.amp.GradScaler(T.device(device).type)
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        with T.amp.autocast(T.device(device).type, dtype=T.float16):
            out = model(x)
            loss = T.nn.functional.cross_entropy(out, y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(opt)
            T.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
""",
        ),
        # A step function called from a loop gets the scaler as a parameter.
        Invalid(
            """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def train_step(model, batch, optimizer):
    x, y = batch
    optimizer.zero_grad()
    loss = model(x.to(device)).sub(y.to(device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    return loss

for batch in loader:
    train_step(model, batch, optimizer)
""",
            fixed="""
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def train_step(model, batch, optimizer, scaler):
    x, y = batch
    optimizer.zero_grad()
    with torch.amp.autocast(device.type, dtype=torch.float16):
        loss = model(x.to(device)).sub(y.to(device)).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss

scaler = torch.amp.GradScaler(device.type)
for batch in loader:
    train_step(model, batch, optimizer, scaler=scaler)
""",
        ),
        # Refused: gradients from torch.autograd.grad (no `backward` anywhere in the file).
        Invalid(
            """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    for p, g in zip(model.parameters(), grads):
        p.grad = g
    optimizer.step()
""",
        ),
        # Refused: parameters updated by hand, no optimizer to step through a GradScaler.
        Invalid(
            """
import torch
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
""",
        ),
        Invalid(
            """
import torch
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data.add_(p.  # the gradient
                        grad, alpha=-0.01)
""",
        ),
        # Refused: closure optimizers cannot step through a GradScaler.
        Invalid(
            """
import torch
optimizer = torch.optim.LBFGS(model.parameters())
for x, y in loader:
    def closure():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    optimizer.step(closure)
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        dtype = BFLOAT16 if self.options.get("amp_dtype") == BFLOAT16 else FLOAT16
        device = self.options.get("amp_device") or None
        target = "float16 autocast + GradScaler" if dtype == FLOAT16 else "bfloat16 autocast"
        for outcome in plan_conversions(model, dtype, device):
            what = f"training step `{outcome.scope.name}`" if outcome.is_step_function else "training loop"
            backward = code_of(outcome.anchor.call)
            if len(backward) > 50:
                backward = backward[:47] + "..."
            fix = outcome.fix
            if fix is not None and dtype == FLOAT16 and not supports(self.options.get("target_torch"), "2.3"):
                # The conversion writes torch.amp.GradScaler(device), new in torch 2.3 (target-torch).
                outcome = dataclasses.replace(outcome, reason="torch.amp.GradScaler needs torch 2.3 (target-torch)", fix=None)
                fix = None
            if outcome.reason is None:
                message = f"{what} runs in full fp32 (`{backward}`, no autocast or GradScaler); convert it to {target}"
            else:
                message = f"{what} runs in full fp32 (`{backward}`); not converted: {outcome.reason}"
            yield self.finding(outcome.anchor.call, message, fix=fix, context=outcome.scope.name)
