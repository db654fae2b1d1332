"""Issue 26, principle 2 (an iteration is not only a loop body; the protocol applies per call): two `unscale_` of
one optimizer in one block of statements, with nothing between them that could run `update()` (no call, no
jump), raise on the second whatever came before, also where no training step holds the calls (the unscale_
after a micro-batch loop whose backward runs in a helper)."""

from __future__ import annotations

import textwrap

from amp_lint.engine.checker import Checker

SOURCE = """
import torch


class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def _micro(self, batch, use_scaling):
        loss = self.model(batch).sum()
        if use_scaling:
            loss = self.scaler.scale(loss)
        loss.backward()

    def train_batch(self, microbatches, use_scaling):
        for batch in microbatches:
            self._micro(batch, use_scaling)
        if use_scaling:
            for optimizer in self.optimizers:
                {body}
        return True
"""


def _codes(body: str):
    source = SOURCE.replace("{body}", body)
    result = Checker(frozenset({"AMP024"})).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.code, d.location.row) for d in result.diagnostics]


def test_unscale_twice_in_one_block_after_a_micro_batch_loop():
    assert _codes("self.scaler.unscale_(optimizer)\n                self.scaler.unscale_(optimizer)") == [("AMP024", 21)]


def test_once_per_optimizer_is_fine():
    assert _codes("self.scaler.unscale_(optimizer)") == []


def test_a_call_between_could_update_so_nothing_is_proved():
    # Principle 3 (open world): a helper between the two could call update(); stay silent.
    assert _codes("self.scaler.unscale_(optimizer)\n                self.after_unscale()\n                self.scaler.unscale_(optimizer)") == []


def test_two_optimizers_are_two_states():
    assert _codes("self.scaler.unscale_(optimizer)\n                self.scaler.unscale_(self.other)") == []
