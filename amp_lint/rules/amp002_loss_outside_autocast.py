from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import AssignmentSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.paths import ASSUMED, PROVED, Proof, weakest
from amp_lint.analysis.scaler_flow import StepFlow, assumption_text, flow_of
from amp_lint.analysis.flow_queries import reaching
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import mentions, short
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
        # The eval path computes its loss outside autocast but `continue`s before the backward: that loss
        # never reaches it (the lexical model saw an assignment of `loss` earlier in the text).
        """
import torch
import torch.nn.functional as F
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    if not training:
        loss = F.cross_entropy(logits, y)
        log(loss)
        continue
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
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
        # An if/else merge: the warm-up side's `logits` come from autocast and reach the loss; the last
        # assignment in the text (the float32 side) is not the only one that does.
        Invalid(
            """
import torch
import torch.nn.functional as F
for x, y in loader:
    if warmup:
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(x)
    else:
        logits = model(x).float()
    loss = F.cross_entropy(logits, y)
    loss = loss / accum
    scaler.scale(loss).backward()
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
                flow = flow_of(model, step)
                for site, to_backward in _loss_sites(model, flow, key, backward):
                    if id(site) in seen or site.regions:
                        continue
                    produced, from_autocast = _produced_in_autocast(model, flow, site)
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
                        assumption=assumption_text(weakest(to_backward, from_autocast)),
                    )


def _loss_sites(model: FileModel, flow: StepFlow, key: str, backward) -> List[Tuple[AssignmentSite, Proof]]:
    """The assignments of `key` in the iteration whose value flows into the backward: a path from the site to
    the backward on which `key` is only rebound from itself (`loss = loss / accum` keeps the chain)."""
    sites = model.assignments_in(flow.step.scope, key)
    rebinds = [s for s in sites if not mentions(s.value, key)]
    return reaching(flow, backward, sites, kills=rebinds)


def _produced_in_autocast(model: FileModel, flow: StepFlow, site: AssignmentSite) -> Tuple[List[str], Optional[Proof]]:
    """Names the right-hand side reads (uncast) with a definition inside an enabled autocast block of the
    iteration that reaches the site, and how sure the weakest such path is."""
    text = code_of(site.value)
    found, proof = [], None
    by_name: Dict[str, List[AssignmentSite]] = {}
    for other in model.assignment_sites:
        if other.scope is site.scope and other is not site and "." not in other.target:
            by_name.setdefault(other.target, []).append(other)
    for name, definitions in by_name.items():
        if not re.search(rf"(?<![\w.]){re.escape(name)}\b(?!{_CAST})", text):
            continue
        in_autocast = [
            (d, p)
            for d, p in reaching(flow, site, definitions)
            if d.in_enabled_autocast() is not None and not d.in_enabled_autocast().is_decorator
        ]
        if not in_autocast:
            continue
        found.append(name)
        best = PROVED if any(p is PROVED for _, p in in_autocast) else ASSUMED
        proof = best if proof is None else weakest(proof, best)
    return found, proof


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
