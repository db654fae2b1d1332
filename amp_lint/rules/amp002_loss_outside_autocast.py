from __future__ import annotations

import re
from typing import Iterator, List, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import AssignmentSite, FileModel, TrainingStep
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Invalid, Rule

_LOSS_CLASS = re.compile(r"^torch\.nn\.(modules\.loss\.)?\w*Loss$")
_CAST = r"\s*\.\s*(float|double|to|type)\s*\("


class LossOutsideAutocast(Rule):
    """
    ## What it does
    Finds a loss that reaches `backward()` but is computed after the autocast block ends, from values
    the block produced, with a torch function, an `F.*` function or an `nn.*Loss` module.

    ## Why is this bad?
    autocast "should wrap only the forward pass(es) of your network, including the loss
    computation(s)". Outside the block, the loss runs in the dtype of the float16 activations instead of
    autocast's float32 policy: `cross_entropy`, `mse_loss`, `softmax`, `log`, `sum`... run in float16 and
    overflow (an `mse_loss` of about 300 on float16 activations gave `inf` outside, 60880.1 inside).

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = F.cross_entropy(logits, y)
    scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    scaler.scale(loss).backward()
    ```

    ## Fix safety
    No automatic fix; move the loss computation into the `with` block. Off by default (heuristic):
    casting the outputs back with `.float()` first, the documented alternative, is not reported.

    ## References
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) docstring
    - [AMP: CUDA Op-Specific Behavior](https://docs.pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32)
    """

    code = "AMP002"
    name = "loss-outside-autocast"
    summary = "Loss computed outside the autocast region"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"\bautocast\b", r"\bbackward\b")

    valid = [
        """
import torch
import torch.nn.functional as F
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    scaler.scale(loss).backward()
""",
        # Cast back to float32 first: the documented pattern.
        """
import torch
import torch.nn.functional as F
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = F.cross_entropy(logits.float(), y)
    scaler.scale(loss).backward()
""",
        # Not a torch function: unknown.
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = compute_loss(logits, y)
    loss.backward()
""",
        # The loss comes from the model (computed inside); dividing is not a torch op.
        """
import torch
for batch in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(**batch)
    loss = out.loss / accum
    loss.backward()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
import torch.nn.functional as F
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = F.cross_entropy(logits, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
        ),
        Invalid(
            """
import torch
from torch import nn
def train(model, loader, optimizer):
    criterion = nn.MSELoss()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = model(x)
        loss = criterion(pred, y)
        loss.backward()
        optimizer.step()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        seen: Set[int] = set()
        for step in model.steps:
            for backward in step.of(EventKind.BACKWARD):
                if backward.in_helper or backward.loss is None:
                    continue
                key = dotted_name(backward.loss)
                if key is None:
                    continue
                for site in _assignments_before(model, step, key, backward.index):
                    if id(site) in seen or site.regions:
                        continue
                    produced = _produced_in_autocast(model, step, site)
                    if not produced:
                        continue
                    confidence = _torch_loss_call(model, site)
                    if confidence is None:
                        continue
                    seen.add(id(site))
                    yield self.finding(
                        site.value,
                        f"`{short(site.value)}` computes `{key}` outside autocast from `{produced[0]}`, which the "
                        "autocast block produced: the loss runs in the activations' low precision, without "
                        "autocast's float32 policy; compute it inside the block (or cast with .float())",
                        confidence=confidence,
                        context=step.scope.name,
                    )


def _assignments_before(model: FileModel, step: TrainingStep, key: str, index: float) -> List[AssignmentSite]:
    return [
        site
        for site in model.assignment_sites
        if site.scope is step.scope
        and site.target == key
        and site.index < index
        and (step.loop is None or step.loop in site.loops)
    ]


def _produced_in_autocast(model: FileModel, step: TrainingStep, site: AssignmentSite) -> List[str]:
    """Names the right-hand side reads (uncast) whose last assignment was inside an enabled autocast block."""
    text = code_of(site.value)
    found = []
    latest = {}
    for other in model.assignment_sites:
        if other.scope is site.scope and other.order < site.order and "." not in other.target:
            latest[other.target] = other
    for name, other in latest.items():
        region = other.in_enabled_autocast()
        if region is None or region.is_decorator:
            continue
        if step.loop is not None and step.loop not in other.loops:
            continue
        if not re.search(rf"(?<![\w.]){re.escape(name)}\b(?!{_CAST})", text):
            continue
        found.append(name)
    return found


def _torch_loss_call(model: FileModel, site: AssignmentSite) -> Optional[Confidence]:
    for call_site in model.call_sites:
        if call_site.statement is not site.statement or call_site.scope is not site.scope:
            continue
        qualified = call_site.qualified_name or ""
        if qualified.startswith("torch.nn.functional.") or _LOSS_CLASS.match(qualified):
            return Confidence.HIGH
        if qualified.startswith("torch.") and not qualified.startswith("torch.nn."):
            return Confidence.MEDIUM
        key = call_site.func
        if key is not None and _is_loss_module(model, key, call_site.scope):
            return Confidence.HIGH
    return None


def _is_loss_module(model: FileModel, key: str, scope) -> bool:
    for assignment in model.assignment_sites:
        if assignment.target != key or not isinstance(assignment.value, cst.Call):
            continue
        if key.startswith("self."):
            if assignment.scope.class_name != scope.class_name:
                continue
        elif assignment.scope not in list(scope.chain()):
            continue
        if _LOSS_CLASS.match(assignment.scope.names.qualify(assignment.value.func) or ""):
            return True
    return False
