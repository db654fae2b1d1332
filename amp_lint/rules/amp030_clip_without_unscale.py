from __future__ import annotations

import re
from typing import List, Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis import order_reads
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.accumulation import accumulation
from amp_lint.analysis.gradient_effects import effects_of_call
from amp_lint.analysis.order import Breach
from amp_lint.analysis.paths import PROVED
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Fix, Invalid


class ClipWithoutUnscale(OrderRule):
    """
    ## What it does
    Finds gradient clipping (`torch.nn.utils.clip_grad_norm_`, `clip_grad_value_`,
    `clip_grads_with_norm_`) between a scaled backward and `scaler.step(...)` with no
    `scaler.unscale_(optimizer)` before it; also before a direct `optimizer.step()` (AMP020's): the
    gradients are scaled whatever steps them. A project helper that reads or clips gradients (a model's own
    `clip_grad_norm_` method, a trainer's `_clip_grad()`, a function bound to an attribute or passed in)
    counts as the clip it makes; so does a per-call `step()` method whose class scales the backward in a
    sibling method with a scaler it builds itself.

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
    optimizer of the following step is not a plain name. Where the scaler may be `None` on the clip's
    path, the inserted call carries the scaled backward's guard; when that guard is not known here (the
    backward is in a sibling method or a helper) and `scaler.step` does not run on every path through the
    clip, no fix.

    ## References
    - [AMP examples: gradient clipping](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping)
    - [AMP recipe: Inspecting/modifying gradients](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    """

    code = "AMP030"
    query = order_reads.scaled_gradient_reads
    # `detail`: "clips" or "reads". A read that remains after the scale-free ones (isnan, isinf, isfinite,
    # `/=`) are set aside depends on the scale: a norm or statistic of scaled gradients is wrong by the factor.
    messages = {order_reads.READ_SCALED: "`{event:short}` {detail} gradients still scaled by `{scaler}`; call {unscale} first"}
    name = "clip-without-unscale"
    summary = "Gradient clipping on scaled gradients (no scaler.unscale_ first)"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"clip_grad|\bparameters\b|\bnamed_parameters\b|\bparam_groups\b")

    valid = [
        # A helper clips to `max_norm * scale`, and the call binds `scale` to the scaler's scale (mmf's
        # `clip_gradients(..., scale=self.scaler.get_scale())`): the threshold carries the scale.
        """
import torch
from torch import nn

def clip_gradients(model, max_norm, scale=1.0):
    nn.utils.clip_grad_norm_(model.parameters(), max_norm * scale)

scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    clip_gradients(model, 1.0, scale=scaler.get_scale())
    scaler.step(optimizer)
    scaler.update()
""",
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
        # A GAN: the generator's loss is not scaled, and its clip and direct step read its own gradients.
        """
import torch
for real in loader:
    scaler.scale(D(real).mean()).backward()
    scaler.step(opt_d)
    scaler.update()
    G(real).mean().backward()
    torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)
    opt_g.step()
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
        # The loop steps its optimizer directly (AMP020's): the gradients the clip reads are scaled all the same
        # (issue 44).
        Invalid(
            """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    optimizer.step()
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    optimizer.step()
    scaler.update()
""",
        ),
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

    def words(self, model: FileModel, breach: Breach):
        return {"unscale": _unscale_calls(model, breach.event, breach.scaler, list(breach.related))}

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        clip, step, flow, steps = breach.event, breach.step, breach.flow, list(breach.related)
        if memo.get("step") is not step:
            memo["step"], memo["flagged"] = step, []  # the iteration's findings so far, with their fixes
        flagged = memo["flagged"]
        # Two clips in a row get one unscale_ (issue 16, waifu-diffusion): the later one shares the fix of an
        # earlier flagged clip that precedes it.
        fix = next((f for earlier, f in flagged if flow.path(earlier, clip) is PROVED), None)
        # A clip inside a helper gets its unscale_ before the call that reaches it, in this iteration: an edit
        # of the caller, not of the helper; unless the helper (of this file) steps the scaler itself after the
        # clip: then it is wrong for every caller, and the unscale_ goes before the clip there. Two clips of
        # one helper call (its if/else) share one fix.
        site = clip if _helper_owns_the_step(model, clip, steps) else clip.trail()[0]
        fix = fix or next((f for earlier, f in flagged if earlier is site), None)
        # The backward may be in a sibling method (`cause` is None): its guard is then unknown, which matters
        # only when the scaler is not called on every path through the clip.
        if fix is None and not _every_micro_batch(model, step, site) and not _callee_unscales(model, step, site, breach.scaler):
            fix = _unscale_fix(model, step, site, breach.scaler, steps, breach.cause)
        flagged.append((clip, fix))
        if site is not clip:
            flagged.append((site, fix))
        return fix

    def related(self, model: FileModel, breach: Breach):
        return self.through_helpers(breach.event)


_loops_holding = order_reads.loops_holding


def _bound_by_a_later_loop(flow, clip: Event, event: Event) -> bool:
    """Is `event` inside a loop the clip is not in (`for opt in optimizers: scaler.step(opt)`)? Every path
    from the clip then enters that loop, and a name it binds does not exist at the clip."""
    around_clip = {header for _, header in _loops_holding(flow, flow.node(clip))}
    return any(header not in around_clip for _, header in _loops_holding(flow, flow.node(event)))


def _every_micro_batch(model: FileModel, step: TrainingStep, clip: Event) -> bool:
    """Does the clip run on micro-batches that only accumulate (the step waits for a boundary)? An
    `unscale_` inserted before it would run there too and raise on the second micro-batch (issue 27,
    item 2): AMP041 moves the clip into the boundary, and this fix is not offered."""
    acc = accumulation(model, step)
    return acc is not None and acc.every_micro_batch(clip) is not None


def _clipped_optimizers(model: FileModel, clip: Event, optimizers: List[str]) -> List[str]:
    """The optimizers whose parameters the clip reads: those built from the parameters of the module the
    clip names (`encoder_opt = Adam(encoder.parameters())`, `clip_grad_norm_(encoder.parameters())`)."""
    if clip.kind is not EventKind.CLIP or not clip.call.args:
        return []
    head = dotted_name(_module_of(clip.call.args[0].value))
    if head is None:
        return []
    found = []
    for site in model.assignment_sites:
        if site.target in optimizers and site.target not in found:
            if re.search(rf"(?<![\w.]){re.escape(head)}\.(parameters|named_parameters)\(", code_of(site.value)):
                found.append(site.target)
    return found


def _module_of(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`decoder` of `decoder.parameters()`."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("parameters", "named_parameters"):
        return expr.func.value
    return expr


def _unscale_calls(model: FileModel, clip: Event, scaler: str, steps: List[Event]) -> str:
    """What to call first, naming the optimizer whose parameters are clipped (issue 27, item 8)."""
    optimizers = [e.target for e in steps if e.target is not None]
    optimizers = list(dict.fromkeys(optimizers))
    chosen = _clipped_optimizers(model, clip, optimizers) if len(optimizers) > 1 else []
    named = chosen or optimizers[:1] or ["optimizer"]
    if len(optimizers) > 1 and not chosen:
        named = optimizers  # not known which: every optimizer stepped after it
    return " and ".join(f"`{scaler}.unscale_({o})`" for o in named)


def _guard_of(backward: Event, clip: Event) -> Optional[str]:
    """The test the scaled backward runs under and the clip does not (`if self.fp16:`): an `unscale_`
    inserted before the clip must carry it (issue 27, item 1), or a scaler that is None when the guard is
    false is called. "" when there is none."""
    mine = {b.condition for b in clip.branches}
    tests = []
    for branch in backward.branches:
        if branch.condition in mine:
            continue
        tests.append((code_of(branch.node.test), branch.taken))
    if len(tests) == 1 and tests[0][1]:
        return tests[0][0]
    return " and ".join(f"({test})" if taken else f"not ({test})" for test, taken in tests)


def _callee_unscales(model: FileModel, step: TrainingStep, site: Event, scaler: str) -> bool:
    """Issue 46, the fix follows the finding through callees: an `unscale_` inserted before a call whose callee
    unscales this scaler itself (on any path, `if self.clip: scaler.unscale_(...)`) makes that a second
    unscale_ (AMP024, "unscale_() has already been called"): no fix."""
    if site.kind is not EventKind.CALL:
        return False
    if any(e.kind is EventKind.SCALER_UNSCALE and e.trail()[:1] == [site] for e in step.events):
        return True
    return "unscale_" in effects_of_call(model, site).scaler


def _helper_owns_the_step(model: FileModel, clip: Event, steps: List[Event]) -> bool:
    """The clip is in this iteration's own code, or in a helper of this file reached through the same calls as
    a `scaler.step` after it (the helper clips and steps: ultralytics' `optimizer_step`)."""
    if not clip.in_helper:
        return True
    return model.block_of(clip.statement) is not None and any(s.reached_alike(clip) for s in steps)


def _scaler_called_anyway(clip: Event, steps: List[Event]) -> bool:
    """Does a `scaler.step(...)` run whenever the clip does (in this iteration's own code, under no `if` the
    clip is not under, in the clip's loops)? Then the scaler is a GradScaler on every path through the clip,
    and an `unscale_` before the clip needs no guard of its own (issue 27, item 1: the guard matters only
    when the scaler may be None there)."""
    mine = {(id(b.node), b.taken) for b in clip.branches}
    return any(
        e.reached_alike(clip)
        and all((id(b.node), b.taken) in mine for b in e.branches)
        and [id(loop) for loop in e.loops] == [id(loop) for loop in clip.loops[: len(e.loops)]]
        for e in steps
    )


def _bound_in(scope, name: str) -> bool:
    """Is the root of `name` bound where the fix writes it: `self` in a method, or a parameter or an
    assignment of the iteration's scope or one around it?"""
    root = name.split(".")[0].split("[")[0]
    if root == "self":
        return scope.class_name is not None
    return any(root in s.params or root in s.assignments for s in scope.chain())


def _unscale_fix(
    model: FileModel, step: TrainingStep, clip: Event, scaler: str, steps: List[Event], backward: Optional[Event]
) -> Optional[Fix]:
    builder = FixBuilder(model.module)
    if not _unscale_edits(model, step, clip, scaler, steps, backward, builder):
        return None
    return builder.build(f"Insert `{scaler}.unscale_(...)` before clipping", Applicability.SAFE)


def _unscale_edits(
    model: FileModel,
    step: TrainingStep,
    clip: Event,
    scaler: str,
    steps: List[Event],
    backward: Optional[Event],
    builder: FixBuilder,
) -> bool:
    """Insert `scaler.unscale_(opt)` before `clip` for each optimizer of `steps`, into `builder`; False (nothing
    added) where it cannot be written here."""
    flow = flow_of(model, step)
    optimizers: List[str] = []
    for event in steps:
        if event.target is None or _bound_by_a_later_loop(flow, clip, event):
            return False  # no name, or one bound by a later `for opt in optimizers:` loop
        if event.in_helper and not _bound_in(step.scope, event.target):
            return False  # the helper's own name (`optimizer` of a loop in a callee), not one of the caller's
        if event.target not in optimizers:
            optimizers.append(event.target)
    anchor = step.anchor_statement(clip)  # before the `for p in model.parameters():` loop, not inside it
    if not isinstance(anchor, (cst.SimpleStatementLine, cst.For, cst.While)):
        return False
    # A direct `optimizer.step()` says nothing about the scaler: only its own step shows it is there.
    if all(e.kind is EventKind.SCALER_STEP for e in steps) and _scaler_called_anyway(clip, steps):
        guard = ""  # the scaler is called on every path through the clip: the unscale_ needs no guard
    elif backward is None or backward.in_helper:
        return False  # the backward's guard is in a sibling method or inside a helper: not known here
    else:
        guard = _guard_of(backward, clip)
    if guard and len(guard) > 80:
        return False
    if guard:
        indent = model.module.default_indent
        body = "".join(f"{indent}{scaler}.unscale_({o})\n" for o in optimizers)
        builder.insert_before(anchor, builder.statement(f"if {guard}:\n{body}"))
    else:
        builder.insert_before(anchor, *[builder.statement(f"{scaler}.unscale_({o})\n") for o in optimizers])
    return True


def unscale_before_scaled_reads(model: FileModel, step: TrainingStep, optimizer_step: Event, builder: FixBuilder) -> bool:
    """For a fix that steps `optimizer_step` (a direct `optimizer.step()`) through its scaler (AMP020): the
    `scaler.unscale_(...)` every clip or gradient read before it needs, as this rule's own fix writes it, added
    to `builder` (issue 44: the clip reads scaled gradients whatever the step is). False where one is needed and
    cannot be written."""
    done: List[Event] = []
    for breach in order_reads.scaled_gradient_reads(model):
        if breach.step.scope is not step.scope or breach.step.loop is not step.loop:
            continue
        if not any(related is optimizer_step for related in breach.related):
            continue
        clip, steps = breach.event, list(breach.related)
        if any(breach.flow.path(earlier, clip) is PROVED or earlier is clip for earlier in done):
            continue  # two clips in a row: one unscale_, before the first
        site = clip if _helper_owns_the_step(model, clip, steps) else clip.trail()[0]
        if site is not clip and any(earlier is site for earlier in done):
            continue
        if _every_micro_batch(model, step, site):
            return False
        if not _unscale_edits(model, step, site, breach.scaler, steps, breach.cause, builder):
            return False
        done.extend([clip, site])
    return True
