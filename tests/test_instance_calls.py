"""Issue 26, principle 3 (open world: resolve the calls that can be resolved): `Callback(args).on_backward(self,
batch)` calls a method of an instance the call itself builds. When the class is a project class of another
module, the method is summarised at the call: its other parameters stand for the call's arguments (the
caller's `self` passed as `trainer` makes `trainer._scaler` the caller's `self._scaler`), and its own `self`
for the new instance, never for the caller's `self`. A scaled backward found that way makes a later clip
without `unscale_` AMP030, as if the backward were written in the loop."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

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
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "callbacks.py").write_text(textwrap.dedent(CALLBACK.replace("{backward}", backward)))
    (package / "trainer.py").write_text(textwrap.dedent(TRAINER.replace("{unscale}", unscale)))
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--select", "AMP030", "--output-format", "json", "pkg/trainer.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return [(f["code"], f["location"]["row"]) for f in json.loads(result.stdout)]


def test_a_scaled_backward_in_a_callback_built_in_the_call_reaches_the_clip(tmp_path):
    found = _check(tmp_path, 'trainer._scaler.scale(outputs["loss"]).backward()', "pass")
    assert found == [("AMP030", 21)]


def test_the_clip_after_unscale_is_silent(tmp_path):
    assert _check(tmp_path, 'trainer._scaler.scale(outputs["loss"]).backward()', "self._scaler.unscale_(self.optimizer)") == []


def test_the_callbacks_own_self_is_not_the_callers(tmp_path):
    # `self._scaler` inside the callback is the new instance's attribute, not the trainer's scaler: the
    # trainer's clip is not reached by gradients scaled by its own scaler
    assert _check(tmp_path, 'self._scaler.scale(outputs["loss"]).backward()', "pass") == []
