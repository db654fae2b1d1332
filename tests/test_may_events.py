"""Issue 26, principle 3 (summaries of project helpers applied at their call sites): a callee's event that
happens on only some of its paths is a *may*-event at the call site, not a must-event. A helper that
unscales the gradients only under a condition of its own (a clipping mode, a norm setting) leaves them
scaled on its other path, so a clip after the call may still see scaled gradients (AMP030). The other way
of a test about whether mixed precision runs (the scaler's presence, an AMP switch) is also where the
backward is not scaled; an unscale under such a test, or under the same condition as the clip, stays a
must-event: no finding. These shapes are our own (a trainer with two gradient helpers)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amp_lint.analysis import order_reads
from amp_lint.analysis.builder import build_model

TRAINER = """
import torch


class Trainer:
    def __init__(self, model, optimizer, norm_mode, clip_value):
        self.model = model
        self.optimizer = optimizer
        self.norm_mode = norm_mode
        self.clip_value = clip_value
        self.scaler = torch.amp.GradScaler("cuda")

    def normalise(self):
{normalise}

    def clip(self):
        if self.clip_value:
            torch.nn.utils.clip_grad_value_(self.model.parameters(), self.clip_value)

    def train(self, batches):
        for batch in batches:
            self.optimizer.zero_grad()
            self.scaler.scale(self.model(batch)).backward()
            self.normalise()
            self.clip()
            self.scaler.step(self.optimizer)
            self.scaler.update()
"""


def _reads(normalise: str):
    source = TRAINER.replace("{normalise}", textwrap.indent(textwrap.dedent(normalise).strip("\n"), " " * 8))
    model = build_model(cst.parse_module(source))
    return [b.event.call.func.attr.value for b in order_reads.scaled_gradient_reads(model)]


def test_an_unscale_a_helper_runs_on_some_paths_only_does_not_unscale_every_path():
    # the helper unscales (and clips by norm) only when a norm mode is set: otherwise the value clip that
    # follows the call sees scaled gradients
    assert _reads(
        """
        if self.norm_mode is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.norm_mode)
        """
    ) == ["clip_grad_value_"]


@pytest.mark.parametrize(
    "normalise",
    [
        # every path of the helper unscales: a must-event
        "self.scaler.unscale_(self.optimizer)",
        # the other way is where no scaler runs (the backward is not scaled there either)
        "if self.scaler is not None:\n    self.scaler.unscale_(self.optimizer)",
        # the same condition as the clip's: the unscale runs whenever the clip does
        "if self.clip_value:\n    self.scaler.unscale_(self.optimizer)",
    ],
    ids=["unconditional", "scaler-guard", "same-condition"],
)
def test_an_unscale_on_every_path_that_matters_stays_a_must_event(normalise):
    assert _reads(normalise) == []
