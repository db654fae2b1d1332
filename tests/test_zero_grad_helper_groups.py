"""Issue 26, principle 4 (values followed everywhere they go), for AMP043: a module's `zero_grad()` between the
scaled backward and the step is proved when the stepped optimizer holds that module's parameters, also when
the parameter groups come from a function of the same file that is given the module and builds what it
returns from `<its parameter>.named_parameters()` (`groups = self.get_optimizer_parameters(model, args)`).
What is not evidence: that the loss derives from the module (a GAN zeroes D after G's backward correctly),
or a helper that builds its groups from another module than the one it is given."""

from __future__ import annotations

import textwrap

from amp_lint.engine.checker import Checker

SOURCE = """
import torch


class Trainer:
    def get_optimizer_parameters(self, net, args):
        groups = []
        for n, p in {source}.named_parameters():
            if "bias" in n:
                groups.append({"params": [p], "weight_decay": 0.0})
        groups.extend([{"params": [p for n, p in {source}.named_parameters() if "bias" not in n]}])
        return groups

    def train(self, model, loader, args):
        optimizer_grouped_parameters = self.get_optimizer_parameters(model, args)
        optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=1e-4)
        scaler = torch.amp.GradScaler("cuda")
        for batch in loader:
            loss = model(batch)
            scaler.scale(loss).backward()
            {zero_here}
            scaler.step(optimizer)
            scaler.update()
            {zero_after}
"""


def _amp043(source: str, show_assumed: bool = False):
    result = Checker(frozenset({"AMP043"}), show_assumed=show_assumed).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.code, d.confidence.value) for d in result.diagnostics]


def _source(source="net", zero_here="pass", zero_after="pass"):
    return SOURCE.replace("{source}", source).replace("{zero_here}", zero_here).replace("{zero_after}", zero_after)


def test_groups_built_by_a_helper_from_the_module_it_is_given_prove_the_module_zero_grad():
    assert _amp043(_source(zero_here="model.zero_grad()")) == [("AMP043", "high")]


def test_the_zero_grad_after_the_step_is_silent():
    assert _amp043(_source(zero_after="model.zero_grad()"), show_assumed=True) == []


def test_a_helper_that_builds_from_another_module_proves_nothing():
    # the helper ignores the module it is given (`self.head`): the zeroed module's parameters may not be stepped
    found = _amp043(_source(source="self.head", zero_here="model.zero_grad()"))
    assert found == []
    assert _amp043(_source(source="self.head", zero_here="model.zero_grad()"), show_assumed=True) != []
