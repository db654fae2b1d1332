from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.rules._helpers import short
from amp_lint.analysis.paths import PROVED
from amp_lint.analysis.scaler_flow import assumption_text, flow_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class ClipWithoutUnscale(Rule):
    """
    ## What it does
    Finds gradient clipping (`torch.nn.utils.clip_grad_norm_`, `clip_grad_value_`,
    `clip_grads_with_norm_`) between a scaled backward and `scaler.step(...)` with no
    `scaler.unscale_(optimizer)` before it.

    ## Why is this bad?
    "All gradients produced by `scaler.scale(loss).backward()` are scaled. If you attempted to clip
    without unscaling, the gradients' norm/maximum magnitude would also be scaled, so your requested
    threshold would be invalid." Clipping scaled gradients clips to `max_norm / scale`: the updates
    come out about a thousand times too small.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe. `scaler.unscale_(optimizer)` is inserted right before the clip, once for every optimizer the
    scaler steps afterwards (`unscale_` is optional and idempotent until `step`). No fix when the
    optimizer of the following step is not a plain name.

    ## References
    - [AMP examples: gradient clipping](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping)
    - [AMP recipe: Inspecting/modifying gradients](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    """

    code = "AMP030"
    name = "clip-without-unscale"
    summary = "Gradient clipping on scaled gradients (no scaler.unscale_ first)"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"clip_grad|\bparameters\b|\bnamed_parameters\b")

    valid = [
        # Checks that hold whatever the scale, right after a scaled backward (torch's distributed_test.py).
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for p in model.parameters():
        if p.requires_grad:
            assert p.grad is not None
            assert not p.grad.isnan().any()
            assert not p.grad.isinf().any()
            assert torch.isfinite(p.grad).all()
    scaler.step(optimizer)
    scaler.update()
""",
        # A linear rescale of the gradients is not an inspection of their values (fairseq).
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= world_size
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        # Accumulation with clipping at the boundary.
        """
from torch.nn.utils import clip_grad_norm_
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # fp32 branch.
        """
import torch
for x in loader:
    loss = model(x).sum()
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
""",
        # Accelerate's own clip unscales for you.
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
    ]
    invalid = [
        # Reading `.grad` of the parameters sees scaled values too (medium confidence).
        Invalid(
            """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.data.clamp_(-1.0, 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.data.clamp_(-1.0, 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    # keep updates bounded
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    # keep updates bounded
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
from torch import nn
def train_step(self, batch):
    self.scaler.scale(self.model(batch)).backward()
    nn.utils.clip_grad_value_(self.model.parameters(), 0.5)
    self.scaler.step(self.opt_a)
    self.scaler.step(self.opt_b)
    self.scaler.update()
""",
            fixed="""
from torch import nn
def train_step(self, batch):
    self.scaler.scale(self.model(batch)).backward()
    self.scaler.unscale_(self.opt_a)
    self.scaler.unscale_(self.opt_b)
    nn.utils.clip_grad_value_(self.model.parameters(), 0.5)
    self.scaler.step(self.opt_a)
    self.scaler.step(self.opt_b)
    self.scaler.update()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for step in model.steps:
            flow = flow_of(model, step)
            flagged: List[Tuple[Event, Optional[Fix]]] = []
            for clip in step.of(EventKind.CLIP, EventKind.GRAD_READ):
                # The scaled gradients reach the clip on some path with no unscale_ on it: they survive
                # inner micro-step loops and if/else merges (miles-credit #141, neural_sp).
                reached = _scaled_reaching(model, step, flow, clip)
                if reached is None:
                    continue
                backward, scaler, proof = reached
                if clip.kind is EventKind.GRAD_READ and any(
                    e.kind is EventKind.GRAD_READ and e.index < clip.index and e.loops == clip.loops for e in step.events
                ):
                    continue  # one finding per loop over the parameters
                steps = [e for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler and flow.path(clip, e) is not None]
                if not steps:
                    continue
                what = "clips" if clip.kind is EventKind.CLIP else "reads"
                # Two clips in a row get one unscale_ (issue 16, waifu-diffusion): the later one shares the
                # fix of an earlier flagged clip that precedes it.
                fix = next((f for earlier, f in flagged if flow.path(earlier, clip) is PROVED), None)
                if fix is None:
                    fix = None if clip.in_helper else _unscale_fix(model, step, clip, scaler, steps)
                flagged.append((clip, fix))
                yield self.finding(
                    clip.call,
                    f"`{short(clip.call)}` {what} gradients still scaled by `{scaler}`; "
                    f"call `{scaler}.unscale_({steps[0].target or 'optimizer'})` first",
                    # A read that remains after the scale-free ones (isnan, isinf, isfinite, `/=`) are set
                    # aside depends on the scale: a norm or statistic of scaled gradients is wrong by the factor.
                    fix=fix,
                    context=step.scope.name,
                    related=self.through_helpers(clip),
                    assumption=assumption_text(proof),
                )


def _scaled_reaching(model: FileModel, step: TrainingStep, flow, clip: Event):
    """(backward, scaler, proof): a scaled backward whose gradients reach `clip` with no unscale_ between."""
    unscales = [
        e
        for e in step.events
        if e.kind is EventKind.SCALER_UNSCALE or (e.kind is EventKind.CALL and "unscale" in (e.target or ""))
    ]
    best = None
    for backward in step.of(EventKind.BACKWARD):
        scaler = backward.scaled_by
        if scaler is None or not model.scaler_enabled(scaler, step.scope):
            continue
        if flow.path(backward, clip) is None:
            continue
        mine = [e for e in unscales if e.kind is EventKind.CALL or e.receiver == scaler]
        proof = flow.path(backward, clip, mine)
        if proof is not None and (best is None or proof is PROVED):
            best = (backward, scaler, proof)
    return best


def _unscaled_between(step: TrainingStep, backward: Event, clip: Event, scaler: str) -> bool:
    for event in step.events:
        if not backward.index < event.index < clip.index or not event.compatible(clip):
            continue
        if event.kind is EventKind.SCALER_UNSCALE and event.receiver == scaler:
            return True
        if event.kind is EventKind.CALL and "unscale" in (event.target or ""):
            return True
    return False


def _unscale_fix(model: FileModel, step: TrainingStep, clip: Event, scaler: str, steps: List[Event]) -> Optional[Fix]:
    optimizers: List[str] = []
    for event in steps:
        if event.target is None or len(event.loops) > len(clip.loops):
            return None  # no name, or one bound by a later `for opt in optimizers:` loop
        if event.target not in optimizers:
            optimizers.append(event.target)
    anchor = step.anchor_statement(clip)  # before the `for p in model.parameters():` loop, not inside it
    if not isinstance(anchor, (cst.SimpleStatementLine, cst.For, cst.While)):
        return None
    builder = FixBuilder(model.module)
    builder.insert_before(anchor, *[builder.statement(f"{scaler}.unscale_({o})\n") for o in optimizers])
    return builder.build(f"Insert `{scaler}.unscale_(...)` before clipping", Applicability.SAFE)
