from __future__ import annotations

import re
from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Invalid, Rule

_SCALER_LIKE = re.compile(r"scaler", re.IGNORECASE)


class ScalerStateNotCheckpointed(Rule):
    """
    ## What it does
    In a file that builds an enabled `GradScaler`, finds a checkpoint dict with `optimizer.state_dict()`
    saved by `torch.save` without the scaler's `state_dict()`, and an `optimizer.load_state_dict(...)`
    with no `scaler.load_state_dict(...)` anywhere in the file.

    ## Why is this bad?
    "To save/resume Amp-enabled runs with bitwise accuracy, use scaler.state_dict and
    scaler.load_state_dict." Without it a resumed run restarts at scale 2**16 with its growth tracker
    at zero: it recalibrates through skipped steps and is not reproducible.

    ## Example
    ```python
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    ```

    ## Use instead
    ```python
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()},
        path,
    )
    ...
    if "scaler" in ckpt:
        scaler.load_state_dict(ckpt["scaler"])
    ```

    ## Fix safety
    No automatic fix. Off by default (heuristic), medium confidence: the scaler state may be saved by
    another file.

    ## References
    - [AMP recipe: Saving/Resuming](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    - `torch/amp/grad_scaler.py`: `GradScaler.state_dict`, `load_state_dict`
    """

    code = "AMP080"
    name = "scaler-state-not-checkpointed"
    summary = "Optimizer state checkpointed but GradScaler state not"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"Scaler", r"state_dict")

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, path)
ckpt = torch.load(path)
optimizer.load_state_dict(ckpt["optimizer"])
if "scaler" in ckpt:
    scaler.load_state_dict(ckpt["scaler"])
""",
        # No scaler in this file.
        """
import torch
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
""",
        # A disabled scaler has no state worth saving.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
torch.save({"optimizer": optimizer.state_dict()}, path)
""",
        # The scaler state is added separately.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
state = {"optimizer": optimizer.state_dict()}
state["scaler"] = scaler.state_dict()
torch.save(state, path)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.fp16)

    def save(self, path):
        checkpoint = {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}
        torch.save(checkpoint, path)

    def load(self, path):
        checkpoint = torch.load(path)
        self.optimizer.load_state_dict(checkpoint["optim"])
""",
            count=2,
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        saves_scaler = _scaler_method_called(model, "state_dict")
        loads_scaler = _scaler_method_called(model, "load_state_dict")
        if saves_scaler and loads_scaler:
            return
        for site in model.call_sites:
            if site.qualified_name != "torch.save" and site.method != "load_state_dict":
                continue
            if not _scaler_in_reach(model, site.scope):
                continue
            if site.qualified_name == "torch.save" and not saves_scaler and site.call.args:
                optimizer = _optimizer_in_checkpoint(model, site)
                if optimizer is not None:
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}` saves `{optimizer}.state_dict()` but not the GradScaler's: "
                        "a resumed run restarts the loss scale; add \"scaler\": scaler.state_dict()",
                        confidence=Confidence.MEDIUM,
                        context=site.scope.name,
                    )
            elif site.method == "load_state_dict" and not loads_scaler and site.receiver is not None:
                key = dotted_name(site.receiver)
                if key is not None and model.is_optimizer(key):
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}` restores the optimizer but nothing restores the GradScaler; "
                        "add `scaler.load_state_dict(ckpt[\"scaler\"])` (guarded by `if \"scaler\" in ckpt`)",
                        confidence=Confidence.MEDIUM,
                        context=site.scope.name,
                    )


def _scaler_method_called(model: FileModel, method: str) -> bool:
    for site in model.call_sites:
        if site.method != method or site.receiver is None:
            continue
        key = dotted_name(site.receiver) or ""
        if _SCALER_LIKE.search(key) or model.is_scaler(key, site.scope):
            return True
    return False


def _scaler_in_reach(model: FileModel, scope: Scope) -> bool:
    chain = list(scope.chain())
    for key, bindings in model.scalers.items():
        for binding in bindings:
            if binding.call is None or not binding.is_enabled:
                continue
            if binding.scope in chain:
                return True
            if scope.class_name and key.startswith(scope.class_name + ".self."):
                return True
    return False


def _optimizer_in_checkpoint(model: FileModel, site: CallSite) -> Optional[str]:
    value = site.call.args[0].value
    candidates: List[cst.BaseExpression] = [value]
    key = dotted_name(value)
    if key is not None:
        candidates = [a.value for a in model.assignment_sites if a.scope is site.scope and a.target == key]
    for candidate in candidates:
        if not isinstance(candidate, cst.Dict):
            continue
        for element in candidate.elements:
            item = getattr(element, "value", None)
            if (
                isinstance(item, cst.Call)
                and isinstance(item.func, cst.Attribute)
                and item.func.attr.value == "state_dict"
            ):
                receiver = dotted_name(item.func.value)
                if receiver is not None and model.is_optimizer(receiver):
                    return receiver
    return None
