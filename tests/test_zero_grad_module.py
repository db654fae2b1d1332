"""A module's `zero_grad()` between the scaled backward and the step (AMP043): proved when the stepped
optimizer is built in the file from that module's parameters (issue 26, principle 4: values followed
everywhere they go; principle 2: what goes wrong inside one call is reported whatever its callers)."""

from __future__ import annotations

import textwrap

from amp_lint.analysis.builder import build_model
from amp_lint.analysis.gradient_effects import optimizer_holds_parameters_of
from amp_lint.engine.checker import Checker

import libcst as cst


def _amp043(source: str, show_assumed: bool = False):
    result = Checker(frozenset({"AMP043"}), show_assumed=show_assumed).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [d.code for d in result.diagnostics]


GROUPS = """
import torch

class Model:
    def train(self, loader, args):
        model = self.model
        param_optimizer = list(model.named_parameters())
        groups = []
        for group in args.custom_groups:
            params = group.pop("params")
            group["params"] = [p for n, p in param_optimizer if n in params]
            groups.append(group)
        groups.extend([{"params": [p for n, p in param_optimizer if "bias" not in n]}])
        optimizer = torch.optim.AdamW(groups, lr=1e-4)
        scaler = torch.amp.GradScaler("cuda")
        for batch in loader:
            loss = model(**batch)[0]
            scaler.scale(loss).backward()
            {zero_here}
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            {zero_after}
"""


def test_a_module_zero_grad_is_proved_when_the_optimizer_holds_its_parameters():
    # Principle 4: the optimizer's groups are built from `model.named_parameters()` through names, a
    # loop and list mutations: `model.zero_grad()` before the step clears what the step needs.
    bad = GROUPS.replace("{zero_here}", "model.zero_grad()").replace("{zero_after}", "pass")
    assert _amp043(bad) == ["AMP043"]
    good = GROUPS.replace("{zero_here}", "pass").replace("{zero_after}", "model.zero_grad()")
    assert _amp043(good, show_assumed=True) == []


def test_the_derivation_is_followed_and_others_are_not():
    model = build_model(cst.parse_module(textwrap.dedent(GROUPS.replace("{zero_here}", "pass").replace("{zero_after}", "pass"))))
    (scope,) = [s for s in model.scopes if s.name == "Model.train"]
    assert optimizer_holds_parameters_of(model, "optimizer", "model", scope)
    assert not optimizer_holds_parameters_of(model, "optimizer", "discriminator", scope)


def test_a_gan_discriminator_zero_grad_before_the_generators_step_stays_assumed():
    # The generator's optimizer holds the generator's parameters only: the discriminator's zero_grad
    # between the generator's backward and step clears nothing that step needs; not proved.
    source = """
    import torch
    g_opt = torch.optim.Adam(generator.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for z in loader:
        g_loss = -discriminator(generator(z)).mean()
        scaler.scale(g_loss).backward()
        discriminator.zero_grad()
        scaler.step(g_opt)
        scaler.update()
        g_opt.zero_grad()
    """
    assert _amp043(source) == []
