from __future__ import annotations

from typing import Iterator, List, Tuple

import libcst as cst

from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.paths import weakest
from amp_lint.analysis.scaler_flow import assumption_text
from amp_lint.analysis.flow_queries import site_path, whole_scope_flow
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Invalid, Rule

_PICKLERS = frozenset({"torch.save", "pickle.dump", "pickle.dumps", "copy.deepcopy", "copy.copy"})


class ScalerStateMidIteration(Rule):
    """
    ## What it does
    Finds a GradScaler checkpointed in the middle of an iteration: `scaler.state_dict()` after the scaled
    backward and before `scaler.update()`, or the scaler itself pickled (`torch.save(scaler, ...)`,
    `pickle.dump(scaler, ...)`, `copy.deepcopy(scaler)`) after `scaler.unscale_()` / `scaler.step()` and
    before `scaler.update()`.

    ## Why is this bad?
    Pickling then raises `AssertionError: A GradScaler instance may only be pickled at the beginning of
    an iteration, or at the end after scaler.update().` (`GradScaler.__getstate__`), and `state_dict()`
    records the scale before this iteration's update: a resumed run starts from a scale that was about to
    be backed off after an overflow, or grown. The docstring says: "If you wish to checkpoint the
    scaler's state after a particular iteration, `state_dict` should be called after `update`."

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, path)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, path)
    ```

    ## Fix safety
    No fix: moving a checkpoint changes what it records. Reported only when the three calls are in the
    same function and loop body, in this order, with no `if`/`else` between them that separates them.

    ## References
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.state_dict` (the note) and `__getstate__`
      (the assertion)
    - `../shared/amp-reference/rules.md` AMP081 (E2)
    """

    code = "AMP081"
    name = "scaler-state-mid-iteration"
    summary = "GradScaler state saved between the scaled backward and update() (stale scale, or AssertionError when pickled)"
    severity = Severity.WARNING
    needs = (r"[Ss]caler", r"\bupdate\b", r"state_dict|\bsave\b|\bdump|deepcopy|\bcopy\b")

    valid = [
        """
import torch
for x in data:
    scaler.scale(loss_fn(model(x))).backward()
    scaler.step(opt)
    scaler.update()
    torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
""",
        # Before the scaled backward: the start of an iteration.
        """
import torch
for x in data:
    state = scaler.state_dict()
    scaler.scale(loss_fn(model(x))).backward()
    scaler.step(opt)
    scaler.update()
""",
        # Exclusive branches.
        """
import torch
for x in data:
    scaler.scale(loss).backward()
    if save_now:
        ckpt = scaler.state_dict()
    else:
        scaler.step(opt)
        scaler.update()
""",
        # The save's path leaves the iteration before any update() (`continue`): nothing is pending there.
        # (The text has an update() after the save; no path does.)
        """
import torch
for x in data:
    scaler.scale(loss_fn(model(x))).backward()
    if skip_this_batch:
        ckpt = scaler.state_dict()
        continue
    scaler.step(opt)
    scaler.update()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in data:
    scaler.scale(loss_fn(model(x))).backward()
    scaler.step(opt)
    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
    scaler.update()
"""
        ),
        Invalid(
            """
import pickle
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    blob = pickle.dumps(self.scaler)
    self.scaler.step(self.optimizer)
    self.scaler.update()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        saves = list(_saves(model))
        if not saves:
            return
        for save, scaler, pickled in saves:
            flow = whole_scope_flow(model, save.scope)
            updates = _scaler_calls(model, save, scaler, ("update",))
            starts = _scaler_calls(model, save, scaler, ("unscale_", "step") if pickled else ("backward",))
            # The iteration's work reaches the save with no update() between, and an update() follows it.
            reached = [(s, site_path(flow, s, save, updates)) for s in starts]
            start, into = next(((s, proof) for s, proof in reached if proof is not None), (None, None))
            if start is None:
                continue
            followed = [(u, site_path(flow, save, u)) for u in updates]
            update, onward = next(((u, proof) for u, proof in followed if proof is not None), (None, None))
            if update is None:
                continue
            what = f"pickling `{scaler}`" if pickled else f"`{scaler}.state_dict()`"
            consequence = (
                "raises AssertionError (a GradScaler may only be pickled at the beginning of an iteration or after update())"
                if pickled
                else "records the scale before this iteration's update(): a resumed run starts from a stale scale"
            )
            yield self.finding(
                save.call,
                f"{what} between `{short(start.call, 40)}` and `{short(update.call, 40)}` {consequence}; "
                "save after update()",
                context=save.scope.name,
                related=(("update() here", update.call),),
                assumption=assumption_text(weakest(into, onward)),
            )


def _saves(model: FileModel) -> Iterator[Tuple[CallSite, str, bool]]:
    """(the call, the scaler's key, whether it pickles the scaler itself)."""
    for site in model.call_sites:
        if site.method == "state_dict" and site.receiver is not None and not site.call.args:
            key = dotted_name(site.receiver)
            if key is not None and model.is_scaler(key, site.scope) and model.scaler_enabled(key, site.scope):
                yield site, key, False
        elif site.qualified_name in _PICKLERS and site.call.args:
            key = dotted_name(site.call.args[0].value)
            if key is not None and model.is_scaler(key, site.scope) and model.scaler_enabled(key, site.scope):
                yield site, key, True


def _scaler_calls(model: FileModel, save: CallSite, scaler: str, methods) -> List[CallSite]:
    """Calls `scaler.<method>()` in the save's function and loop body; "backward": `scaler.scale(x).backward()`."""
    found = []
    for site in model.call_sites:
        if site.scope is not save.scope or site.loops != save.loops or site.method not in methods:
            continue
        receiver = site.receiver
        if site.method == "backward":
            if not (isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute)):
                continue
            if receiver.func.attr.value != "scale" or dotted_name(receiver.func.value) != scaler:
                continue
        elif receiver is None or dotted_name(receiver) != scaler:
            continue
        found.append(site)
    return found
