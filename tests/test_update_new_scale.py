"""Issue 26, principle 1 (one protocol, as PyTorch runs it): torch's `GradScaler.update(new_scale)` with a
`new_scale` only fills the scale and needs no inf checks, so `update(2.0 ** 16)` twice is not AMP023; but
`update(None)` is `update()`: it consumes the iteration's inf checks and asserts "No inf checks were recorded"
when there are none. So `update(x)` twice is AMP023 when `x` is None on a path the code shows (a literal
None, or a name / `self.x` that its function or class assigns None to)."""

from __future__ import annotations

import textwrap

from amp_lint.engine.checker import Checker

WRAPPER = """
import torch


class AmpWrapper:
    def __init__(self, optimizer, loss_scale="dynamic"):
        self.optimizer = optimizer
        self._new_scale = None
        if isinstance(loss_scale, float):
            self._new_scale = loss_scale
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update({arg})
        {again}
"""


def _amp023(arg: str, again: str):
    source = WRAPPER.replace("{arg}", arg).replace("{again}", again)
    result = Checker(frozenset({"AMP023"}), show_assumed=True).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [d.code for d in result.diagnostics]


def test_an_update_whose_new_scale_may_be_none_twice_is_amp023():
    assert _amp023("self._new_scale", "self.scaler.update(self._new_scale)") == ["AMP023"]


def test_update_none_twice_is_amp023():
    assert _amp023("None", "self.scaler.update(new_scale=None)") == ["AMP023"]


def test_a_new_scale_that_is_never_none_twice_is_silent():
    assert _amp023("2.0 ** 16", "self.scaler.update(2.0 ** 16)") == []
    assert _amp023("self.optimizer.lr", "self.scaler.update(self.optimizer.lr)") == []


def test_one_update_with_a_maybe_none_scale_is_silent():
    assert _amp023("self._new_scale", "pass") == []
