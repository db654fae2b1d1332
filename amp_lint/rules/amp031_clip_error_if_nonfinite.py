from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.cfg import EXCEPTION
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.paths import PROVED
from amp_lint.analysis.scaler_flow import assumption_text, flow_of
from amp_lint.analysis.flow_queries import site_path
from amp_lint.rules._helpers import argument, literal_bool, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

# clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None)
_POSITION = 3
_NORM_CLIPS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)


class ClipErrorIfNonfinite(Rule):
    """
    ## What it does
    Finds `clip_grad_norm_(..., error_if_nonfinite=True)` in an iteration that steps through a
    `GradScaler`.

    ## Why is this bad?
    With dynamic loss scaling, non-finite gradients are expected now and then: the scaler grows the
    scale until it overflows, and `scaler.step` then skips that step and backs off.
    `error_if_nonfinite=True` turns every such overflow into `RuntimeError: The total norm of order 2.0
    for gradients from `parameters` is non-finite, so it cannot be clipped.` With the default
    `growth_interval=2000` the crash comes hours into training.

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)  # skips the step when the gradients are inf/NaN
    scaler.update()
    ```

    ## Fix safety
    Safe. The `error_if_nonfinite=True` argument is removed; `scaler.step` already skips non-finite
    steps. Written positionally, it is reported without a fix when arguments follow it.

    ## References
    - `torch/nn/utils/clip_grad.py` (the `error_if_nonfinite` error)
    - `torch/amp/grad_scaler.py`: the `GradScaler` docstring on expected infs/NaNs
    """

    code = "AMP031"
    name = "clip-error-if-nonfinite-with-scaler"
    summary = "clip_grad_norm_(error_if_nonfinite=True) in a GradScaler loop"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"clip_grad_norm", r"[Ss]caler")

    valid = [
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        # No scaler: a non-finite norm is a real problem worth an error.
        """
import torch
for x in loader:
    model(x).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    optimizer.step()
""",
        # The fp32 branch of a switchable loop.
        """
import torch
for x in loader:
    loss = model(x).sum()
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()
""",
        # The fp32 path returns (inside its profiling block) before the scaler's path: its
        # error_if_nonfinite never meets scaled gradients (the lexical model knew an early return only as
        # the last line of the `if` itself).
        """
import torch
def train_step(self, loss):
    if self.scaler is None:
        with self.profiler.record("fp32_step"):
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, error_if_nonfinite=True)
            self.optimizer.step()
            return
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False)
    scaler.step(optimizer)
    scaler.update()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
from torch.nn.utils import clip_grad_norm_
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    clip_grad_norm_(self.model.parameters(), 1.0, 2.0, True)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
            fixed="""
from torch.nn.utils import clip_grad_norm_
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    clip_grad_norm_(self.model.parameters(), 1.0, 2.0)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for step in model.steps:
            for clip in step.of(EventKind.CLIP):
                if clip.target not in _NORM_CLIPS:
                    continue
                arg = argument(clip.call, _POSITION, "error_if_nonfinite")
                if arg is None or literal_bool(arg.value) is not True:
                    continue
                # A scaler step in the clip's own pass through the iteration (before or after it).
                flow = flow_of(model, step)
                if not clip.in_helper and _caught(flow, clip):
                    continue  # exceptions are paths (issue 26, principle 4): the raise is the skip branch
                scaler_steps, proof = [], None
                for e in step.of(EventKind.SCALER_STEP):
                    if not model.scaler_enabled(e.receiver, step.scope):
                        continue
                    found = site_path(flow, clip, e) or site_path(flow, e, clip)
                    if found is not None:
                        scaler_steps.append(e)
                        proof = found if proof is None or found is PROVED else proof
                if not scaler_steps:
                    continue
                yield self.finding(
                    arg,
                    f"`{short(clip.call)}` raises on the inf/NaN gradients that dynamic loss scaling "
                    f"produces by design; `{scaler_steps[0].receiver}.step()` already skips those steps",
                    fix=_remove_fix(model, clip, arg),
                    context=step.scope.name,
                    assumption=assumption_text(proof),
                )


_CAUGHT = frozenset({"RuntimeError", "Exception", "BaseException"})


def _caught(flow, clip: Event) -> bool:
    """Is the clip in a `try` whose handler catches the RuntimeError it raises? Then the raise is how the
    code skips a non-finite step (the step in the `try` body, `update()` after both), which is correct."""
    graph = flow.flow.graph
    node = flow.node(clip)
    if node is None:
        return False
    for target, atom in graph.succ[node]:
        if atom is not EXCEPTION:
            continue
        handler = graph.statements[target]
        if not isinstance(handler, cst.ExceptHandler):
            continue
        if handler.type is None:
            return True
        caught = [handler.type] if not isinstance(handler.type, cst.Tuple) else [e.value for e in handler.type.elements]
        if any((dotted_name(t) or "").split(".")[-1] in _CAUGHT for t in caught):
            return True
    return False


def _remove_fix(model: FileModel, clip: Event, arg: cst.Arg) -> Optional[Fix]:
    args = list(clip.call.args)
    if arg.keyword is None and args[-1] is not arg:
        return None
    builder = FixBuilder(model.module)
    index = args.index(arg)
    builder.replace(clip.call, lambda updated: with_call_args(updated, [a for i, a in enumerate(updated.args) if i != index]))
    return builder.build("Remove `error_if_nonfinite=True`", Applicability.SAFE)
