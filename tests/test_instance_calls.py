"""Issue 26, principle 3 (open world: resolve the calls that can be resolved): `Callback(args).on_backward(self,
batch)` calls a method of an instance the call itself builds. When the class is a project class of another
module, the method is summarised at the call: its other parameters stand for the call's arguments (the
caller's `self` passed as `trainer` makes `trainer._scaler` the caller's `self._scaler`), and its own `self`
for the new instance, never for the caller's `self`. A scaled backward found that way makes a later clip
without `unscale_` AMP030, as if the backward were written in the loop."""

from __future__ import annotations

from package_check import check_in_package, write_package

CALLBACK = """
class BackwardCallback:
    def __init__(self, folder):
        self.folder = folder

    def on_backward(self, trainer, outputs):
        {backward}
        return True
"""

TRAINER = """
import torch
from torch.nn.utils import clip_grad_norm_

from pkg.callbacks import BackwardCallback


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self._scaler = torch.amp.GradScaler("cuda")

    def train_epoch(self, loader):
        for batch in loader:
            self.optimizer.zero_grad()
            with torch.autocast("cuda"):
                outputs = {"loss": self.model(batch)}
            BackwardCallback("out").on_backward(self, outputs)
            {unscale}
            clip_grad_norm_(self.model.parameters(), 1.0)
            self._scaler.step(self.optimizer)
            self._scaler.update()
"""


def _check(tmp_path, backward: str, unscale: str):
    files = {"callbacks.py": CALLBACK.replace("{backward}", backward), "trainer.py": TRAINER.replace("{unscale}", unscale)}
    write_package(tmp_path, files)
    return check_in_package(tmp_path, "pkg/trainer.py", "AMP030")


def test_a_scaled_backward_in_a_callback_built_in_the_call_reaches_the_clip(tmp_path):
    found = _check(tmp_path, 'trainer._scaler.scale(outputs["loss"]).backward()', "pass")
    assert found == [("AMP030", 21)]


def test_the_clip_after_unscale_is_silent(tmp_path):
    assert _check(tmp_path, 'trainer._scaler.scale(outputs["loss"]).backward()', "self._scaler.unscale_(self.optimizer)") == []


def test_the_callbacks_own_self_is_not_the_callers(tmp_path):
    # `self._scaler` inside the callback is the new instance's attribute, not the trainer's scaler: the
    # trainer's clip is not reached by gradients scaled by its own scaler
    assert _check(tmp_path, 'self._scaler.scale(outputs["loss"]).backward()', "pass") == []
