from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

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
    No automatic fix. Enabled by default and shown by default: nine reported bugs (transformers, detectron2,
    ultralytics, torchtitan, ...) had this shape, every finding on the judged corpora was true, and nothing
    was reported on fresh projects. Where the scaler's state may be checkpointed out of sight, the file is
    left alone: a file that hands its scaler to a call (a checkpoint helper such as timm's `CheckpointSaver`)
    gets no finding. AMP100's conversion obeys it: the scaler it adds is saved wherever the optimizer's state
    is saved, and restored (guarded by `if "scaler" in checkpoint`) beside every optimizer restore it can name.

    ## References
    - [AMP recipe: Saving/Resuming](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    - `torch/amp/grad_scaler.py`: `GradScaler.state_dict`, `load_state_dict`
    """

    code = "AMP080"
    name = "scaler-state-not-checkpointed"
    summary = "Optimizer state checkpointed but GradScaler state not"
    severity = Severity.WARNING
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
    valid += [
        # A file that only resumes (another script saves): the guarded restore is a restore.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
ckpt = torch.load(path)
optimizer.load_state_dict(ckpt["optimizer"])
if "scaler" in ckpt:
    scaler.load_state_dict(ckpt["scaler"])
""",
        # The scaler is handed to a checkpoint helper, which may save it (timm's `CheckpointSaver`).
        """
import torch
scaler = torch.amp.GradScaler("cuda")
saver = CheckpointSaver(model, optimizer, amp_scaler=scaler)
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "init.pt")
""",
        # `dict` is the file's own function (which may add the scaler), not the builtin.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def dict(**parts):
    return with_amp_state(parts)
torch.save(dict(model=model.state_dict(), optimizer=optimizer.state_dict()), path)
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
        # The keyword form of the dict.
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
torch.save(dict(model=model.state_dict(), optimizer=optimizer.state_dict()), path)
"""
        ),
        # One checkpoint dict saved to three files: one finding, at the first save.
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
def save(model, optimizer, folder):
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(checkpoint, f"{folder}/last.pt")
    torch.save(checkpoint, f"{folder}/best.pt")
    torch.save(checkpoint, f"{folder}/epoch.pt")
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
        if (saves_scaler and loads_scaler) or _scaler_handed_on(model):
            return
        reported = set()  # one checkpoint dict saved to several files is one finding
        for site in model.call_sites:
            if site.qualified_name != "torch.save" and site.method != "load_state_dict":
                continue
            scaler = _scaler_in_reach(model, site.scope)
            if scaler is None:
                continue
            if site.qualified_name == "torch.save" and not saves_scaler and site.call.args:
                found = _optimizer_in_checkpoint(model, site)
                if found is not None and id(found[1]) not in reported:
                    optimizer = found[0]
                    reported.add(id(found[1]))
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}` saves `{optimizer}.state_dict()` but not the GradScaler's: "
                        f"a resumed run restarts the loss scale; add \"scaler\": {scaler}.state_dict()",
                        confidence=Confidence.HIGH,
                        context=site.scope.name,
                    )
            elif site.method == "load_state_dict" and not loads_scaler and site.receiver is not None:
                key = dotted_name(site.receiver)
                if key is not None and model.is_optimizer(key):
                    checkpoint = _checkpoint_name(site.call)
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}` restores the optimizer but nothing restores the GradScaler; "
                        f"add `{scaler}.load_state_dict({checkpoint}[\"scaler\"])` "
                        f"(guarded by `if \"scaler\" in {checkpoint}`)",
                        confidence=Confidence.HIGH,
                        context=site.scope.name,
                    )


def _scaler_handed_on(model: FileModel) -> bool:
    """The scaler is handed to a call (`CheckpointSaver(..., amp_scaler=loss_scaler)`, `save_checkpoint(model,
    optimizer, scaler, path)`): what that call saves or restores is out of sight, so the file's own saves
    and loads prove nothing about the scaler's state (issue 46: silent where the evidence is not in view)."""
    for site in model.call_sites:
        for arg in site.call.args:
            key = dotted_name(arg.value)
            if key is not None and (_SCALER_LIKE.search(key) or model.is_scaler(key, site.scope)):
                return True
    return False


def _scaler_method_called(model: FileModel, method: str) -> bool:
    for site in model.call_sites:
        if site.method != method or site.receiver is None:
            continue
        key = dotted_name(site.receiver) or ""
        if _SCALER_LIKE.search(key) or model.is_scaler(key, site.scope):
            return True
    return False


def _scaler_in_reach(model: FileModel, scope: Scope) -> Optional[str]:
    """How `scope` spells the enabled GradScaler it can reach (`scaler`, `self.scaler`), or None."""
    chain = list(scope.chain())
    for key, bindings in model.scalers.items():
        for binding in bindings:
            if binding.call is None or not binding.is_enabled:
                continue
            if binding.scope in chain:
                return key
            if scope.class_name and key.startswith(scope.class_name + ".self."):
                return key[len(scope.class_name) + 1 :]
    return None


def _checkpoint_name(call: cst.Call) -> str:
    """`ckpt` in `optimizer.load_state_dict(ckpt["optimizer"])`; "ckpt" where the argument is not a subscript."""
    if call.args and isinstance(call.args[0].value, cst.Subscript):
        name = dotted_name(call.args[0].value.value)
        if name is not None:
            return name
    return "ckpt"


def _optimizer_in_checkpoint(model: FileModel, site: CallSite) -> Optional[Tuple[str, cst.BaseExpression]]:
    """(the optimizer whose state the saved dict holds, the dict expression) for `torch.save({...}, p)`,
    `torch.save(dict(optimizer=opt.state_dict(), ...), p)`, or a name bound to either in the same function."""
    value = site.call.args[0].value
    candidates: List[cst.BaseExpression] = [value]
    key = dotted_name(value)
    if key is not None:
        candidates = [a.value for a in model.assignment_sites if a.scope is site.scope and a.target == key]
    for candidate in candidates:
        for item in _dict_values(candidate, site.scope):
            if (
                isinstance(item, cst.Call)
                and isinstance(item.func, cst.Attribute)
                and item.func.attr.value == "state_dict"
            ):
                receiver = dotted_name(item.func.value)
                if receiver is not None and model.is_optimizer(receiver):
                    return receiver, candidate
    return None


def _dict_values(candidate: cst.BaseExpression, scope: Scope) -> List[cst.BaseExpression]:
    """The values of a dict display, or of the keywords of a `dict(...)` call."""
    if isinstance(candidate, cst.Dict):
        return [element.value for element in candidate.elements if isinstance(element, cst.DictElement)]
    if isinstance(candidate, cst.Call) and isinstance(candidate.func, cst.Name) and candidate.func.value == "dict":
        table = scope.names
        while table is not None:  # the builtin, not a name the file binds
            if "dict" in table.own or "dict" in table.imported:
                return []
            table = table.parent
        return [arg.value for arg in candidate.args if arg.keyword is not None]
    return []
