"""AMP011 on a per-call `backward()` method whose class builds a GradScaler and steps it in a sibling
method (issue 26, principle 2: the protocol applies per call; principle 3: silent where a caller could
complete it)."""

from __future__ import annotations

import textwrap

from amp_lint.engine.checker import Checker


def _amp011(source: str, show_assumed: bool = False):
    result = Checker(frozenset({"AMP011"}), show_assumed=show_assumed).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.code, d.location.row) for d in result.diagnostics]


MANAGER = """
import torch

class MixedPrecisionManager:
    def __init__(self, activated{param}):
        self.activated = activated
        if self.activated:
            self.scaler = {scaler}

    def backward(self, loss):
        if self.activated:
            {amp_backward}
        else:
            loss.backward()

    def step(self, model, optimizer):
        if self.activated:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            optimizer.step()
        optimizer.zero_grad()
"""


def _manager(amp_backward: str, scaler: str = "torch.amp.GradScaler('cuda')", param: str = "") -> str:
    return MANAGER.replace("{amp_backward}", amp_backward).replace("{scaler}", scaler).replace("{param}", param)


def test_an_unscaled_backward_on_the_scalers_branch_is_reported():
    # Principle 2: `backward()` and `step()` run once per batch each; on the amp branch the class's own
    # scaler steps (and unscales) gradients that the backward never scaled.
    assert _amp011(_manager("loss.backward()")) == [("AMP011", 12)]


def test_the_fp32_branch_and_the_correct_class_are_silent():
    # The `else` backward pairs with the plain `optimizer.step()` of the same condition.
    assert _amp011(_manager("self.scaler.scale(loss).backward()"), show_assumed=True) == []


def test_a_scaler_handed_in_may_scale_at_the_caller():
    # Principle 3: the callers share a scaler passed in; one of them may scale the loss: silent.
    assert _amp011(_manager("loss.backward()", scaler="scaler", param=", scaler"), show_assumed=True) == []


def test_a_call_that_passes_a_scaled_loss_is_silent():
    source = _manager("loss.backward()") + textwrap.dedent(
        """
        def train(manager, model, optimizer, loader):
            for x in loader:
                manager.backward(manager.scaler.scale(model(x).sum()))
                manager.step(model, optimizer)
        """
    )
    assert _amp011(source, show_assumed=True) == []


def test_a_plain_step_on_the_backwards_path_is_silent():
    # An unconditional backward that may pair with the class's plain `optimizer.step()`: not proved.
    source = """
    import torch

    class Runner:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")

        def backward(self, loss):
            loss.backward()

        def step(self, optimizer):
            if self.use_amp:
                self.scaler.step(optimizer)
                self.scaler.update()
            else:
                optimizer.step()
    """
    assert _amp011(source) == []


def _amp030(source: str, show_assumed: bool = False):
    result = Checker(frozenset({"AMP030"}), show_assumed=show_assumed).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.code, d.location.row) for d in result.diagnostics]


def test_a_per_call_step_clips_gradients_scaled_by_the_sibling_backward():
    # Principle 2: `step()` runs once per batch after the sibling `backward()` scaled the gradients with
    # the class's own scaler: a clip with no `unscale_` before it reads scaled gradients on every call.
    source = _manager("self.scaler.scale(loss).backward()").replace("            self.scaler.unscale_(optimizer)\n", "")
    assert _amp030(source) == [("AMP030", 18)]
    assert _amp030(_manager("self.scaler.scale(loss).backward()"), show_assumed=True) == []


def test_a_per_call_step_with_a_handed_in_scaler_or_an_unscale_elsewhere_is_silent():
    # Principle 3: a scaler handed in may be unscaled by the caller; so may one another method unscales.
    handed = _manager("self.scaler.scale(loss).backward()", scaler="scaler", param=", scaler")
    assert _amp030(handed.replace("            self.scaler.unscale_(optimizer)\n", ""), show_assumed=True) == []
    elsewhere = _manager("self.scaler.scale(loss).backward()").replace("            self.scaler.unscale_(optimizer)\n", "")
    elsewhere += "\n    def unscale(self, optimizer):\n        self.scaler.unscale_(optimizer)\n"
    assert _amp030(elsewhere, show_assumed=True) == []
