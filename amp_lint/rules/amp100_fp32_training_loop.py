from __future__ import annotations

import dataclasses
from typing import Iterator

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.syntax import code_of
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

    One scaler per run: it is created where the optimizer lives. A function that receives its optimizer
    and is called once per epoch (`train(model, loader, optimizer, epoch)` from `main()`) gets the
    scaler as a parameter from the caller, which creates it next to its optimizer (through several
    callers if needed); `self.optimizer` gets `self.scaler` right after it; a global optimizer, or one
    of an enclosing factory (`_update(engine, batch)` called per iteration), gets the scaler beside it.
    Where the optimizer's state is saved (`"optimizer": optimizer.state_dict()`), the scaler's state is
    saved beside it; after every `optimizer.load_state_dict(checkpoint["optimizer"])` it is loaded when
    the checkpoint has it (`if "scaler" in checkpoint:`), so the converted file passes AMP080. The device
    follows the script's own expression: `device.type` for a `torch.device` (including
    `torch.accelerator.current_accelerator()` with a CPU fallback), `torch.device(device).type` where
    `device` may be a string (also a `device` parameter that the function only hands on to a helper),
    `torch.device(args.device).type` for `model.to(args.device)`, `"cuda" if cuda else "cpu"` where every
    `.cuda()` sits under `if cuda:`; a literal only where the script names no other device. `"cpu"` only
    where that is proved: every network the file's optimizers train is built in the file (`nn.Linear(...)`,
    its own `nn.Module` class) and nothing moves anything. A model from a call the analysis cannot see into
    (`build_model(cfg)`, which may move it to `cfg.MODEL.DEVICE`) or handed in by a caller is on a device
    not known here: the documented default, `"cuda"` (`--amp-device` names another). Checks that depend on
    the device (BCELoss under CUDA) assume CUDA whenever the device is chosen at run time.

    Gradient code in the file's helpers counts as if inline: `scaler.unscale_(optimizer)` goes before a call
    of a helper that clips or reads `.grad` (`clip_gradients(model, t)`), and a helper running
    `torch.autograd.grad(..., create_graph=True)` is refused like the inline gradient penalty; so do helpers of
    the project's other modules (`from utils import clip_gradients`, `utils.clip_gradients(...)`, a star import),
    when the file is checked from disk. A training function that receives its optimizer and is called in a loop
    from another module (`train_one_epoch(...)` per epoch from `main.py`) gets a `scaler` parameter, and the same
    fix edits the caller's file: the scaler right after the optimizer's creation, `scaler=scaler` at the calls,
    its state beside the optimizer's checkpoint. Both files are written or neither; when the caller's file is
    not among the checked files (or is excluded), nothing is written and the reason names it. A loop that
    builds an optimizer per run (a hyperparameter sweep) gets its scaler right after that optimizer. The
    scaler's state is saved wherever the optimizer's is (`{...}`, `dict(...)`, `state["optimizer"] = ...`)
    and restored, guarded, wherever it is restored from a named checkpoint, whether or not the file also
    saves; a restore from a checkpoint with no name (`torch.load(path)["optimizer"]`) gets none, and the
    conversion is then not written while AMP080 reports the result. A Gram-like product (`torch.mm(f, f.t())`,
    `x.bmm(x_t)` with `x_t = x.transpose(1, 2)`) in a helper of the forward pass is kept in float32
    (`with torch.amp.autocast(f.device.type, enabled=False):` and `.float()` inputs); written inline in the
    loop, the conversion is refused with that reason. `.double()` on accuracy bookkeeping and a
    `model.half()` that runs only after training (to save a smaller file) do not block the conversion.

    Silent (not fp32 training, or not training): code that already uses mixed or low precision (apex
    `amp.scale_loss`, DeepSpeed, ColossalAI, Megatron and fp16/bf16 optimizer wrappers, half or bf16
    models: `model.half()`, `model.to(torch.float16)`, `.to(dtype=torch.bfloat16)`, `.bfloat16()`; FSDP
    mixed-precision models, TransformerEngine `fp8_autocast`, autocast entered in a helper or wrapper,
    int8 models, a GradScaler anywhere in the file) and unit tests (`test_*`, `Test*`) that take an
    optimizer step.

    No fix (the finding says why) for: closure optimizers (`LBFGS`, `step(closure)`), float64 training
    (a network cast to double, float64 the default dtype), `torch.autograd.grad(..., create_graph=True)`
    (a gradient penalty, inline or in a helper: convert it by hand), an inline Gram matrix, `nn.BCELoss` / `F.binary_cross_entropy` when the device may be CUDA (banned under CUDA
    autocast: use `BCEWithLogitsLoss`), backward and step in different functions, parameters updated
    by hand without an optimizer (or in a branch beside it), a loss computed without any model call (the
    forward pass ran elsewhere, as in REINFORCE), a `device` parameter defaulting to None, and a step
    function whose call sites are not all in the file.

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
        # Mixed precision by apex: not fp32.
        """
import torch
from apex import amp
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for x, y in loader:
    loss = loss_fn(model(x), y)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
""",
        # An fp16 optimizer wrapper (Megatron, DeepSpeed, ColossalAI hold their own loss scaling).
        """
import torch
optimizer = FP16_Optimizer(torch.optim.Adam(model.parameters()), dynamic_loss_scale=True)
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # A bfloat16 model: it trains in low precision already.
        """
import torch
model = Net().to(torch.bfloat16)
for x, y in loader:
    loss = loss_fn(model(x.to(torch.bfloat16)), y)
    loss.backward()
    optimizer.step()
""",
        # A half-precision model (`.half()`, `.to(torch.float16)`): not fp32 training, whatever else it is.
        """
import torch
model = Net().half().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = loss_fn(model(x.cuda().half()), y.cuda())
    loss.backward()
    optimizer.step()
""",
        """
import torch as T
model = Net().to(T.float16)
for x, y in loader:
    loss = loss_fn(model(x.to(dtype=T.float16)), y)
    loss.backward()
    optimizer.step()
""",
        # FSDP with a mixed-precision policy.
        """
import torch
from torch.distributed.fsdp import MixedPrecision, FullyShardedDataParallel as FSDP
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # TransformerEngine's fp8 autocast.
        """
import torch
import transformer_engine.pytorch as te
for x, y in loader:
    with te.fp8_autocast(enabled=True):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # Autocast entered through a helper AMP100 cannot follow.
        """
import torch
for x, y in loader:
    with self.maybe_autocast():
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # An int8 model.
        """
import torch
model = AutoModelForCausalLM.from_pretrained(name, load_in_8bit=True)
for batch in loader:
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
""",
        # A unit test that takes one optimizer step to test something else.
        """
import torch
def test_step_updates_the_weights():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    assert model.weight.grad is not None
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
        # The conversion planner (1.6 MiB of code) is loaded when the rule runs (it is off by default): a
        # language server that never runs it does not hold it (issue 31, the server's memory).
        from amp_lint.conversion.planner import BFLOAT16, FLOAT16, plan_conversions

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
