"""AMP013 in one file, with the findings that rest on an assumption shown: the per-epoch and per-step
findings are medium confidence (hidden by default), so the rule's `valid` examples are also checked here
with --show-assumed, and the flow questions (a loop that runs once, `break` after the call, a condition
on the epoch, a reset) get their own cases."""

from __future__ import annotations

import textwrap

import pytest

from amp_lint import rules as registry
from amp_lint.engine.checker import Checker
from amp_lint.rules.amp013_scaler_in_loop import ScalerBuiltInLoop


def _findings(source: str, show_assumed: bool = True):
    result = Checker(frozenset({"AMP013"}), show_assumed=show_assumed).check(textwrap.dedent(source), "x.py")
    assert not result.errors
    return [(d.location.row, d.confidence.value) for d in result.diagnostics]


@pytest.mark.parametrize("index", range(len(ScalerBuiltInLoop.valid)))
def test_valid_examples_are_silent_with_show_assumed_too(index):
    assert _findings(ScalerBuiltInLoop.valid[index]) == []


_HELPER = '''
import torch
def train_one_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
'''


@pytest.mark.parametrize(
    "caller, expected",
    [
        # Issue 26, principle 2: epochs are iterations too; every epoch runs it: reported by default.
        ("for epoch in range(epochs):\n    train_one_epoch(model, loader, optimizer)\n", [(4, "high")]),
        ("for epoch in range(1):\n    train_one_epoch(model, loader, optimizer)\n", []),
        ("for epoch in range(start, start + 1):\n    train_one_epoch(model, loader, optimizer)\n", []),
        ("for epoch in [0]:\n    train_one_epoch(model, loader, optimizer)\n", []),
        ("for epoch in range(epochs):\n    train_one_epoch(model, loader, optimizer)\n    break\n", []),
        ("for epoch in range(epochs):\n    if epoch < 1:\n        train_one_epoch(model, loader, optimizer)\n", []),
        # an unknown condition: reported, resting on it
        ("for epoch in range(epochs):\n    if do_train:\n        train_one_epoch(model, loader, optimizer)\n", [(4, "medium")]),
        # a call once, outside any loop; a loop that is not over epochs (one run per configuration)
        ("train_one_epoch(model, loader, optimizer)\n", []),
        ("for config in configs:\n    train_one_epoch(model, loader, optimizer)\n", []),
        # another object's method of the same name is not this function
        ("for epoch in range(epochs):\n    other.train_one_epoch(model, loader, optimizer)\n", []),
    ],
)
def test_per_epoch_function_in_one_file(caller, expected):
    assert _findings(_HELPER + "\n" + caller) == expected


def test_the_per_epoch_finding_names_the_epoch_loop():
    source = _HELPER + "\nfor epoch in range(epochs):\n    if do_train:\n        train_one_epoch(model, loader, optimizer)\n"
    [d] = Checker(frozenset({"AMP013"}), show_assumed=True).check(source, "x.py").diagnostics
    assert "called once per epoch at line 12" in d.message
    assert [(r.message, r.location.row) for r in d.related] == [("called once per epoch", 12)]


def test_a_step_function_called_before_a_break_is_built_once():
    source = '''
import torch
def train_step(model, x, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()

for x in loader:
    train_step(model, x, optimizer)
'''
    assert _findings(source) == [(4, "medium")]
    assert _findings(source + "    break\n") == []


def test_a_scaler_built_in_a_loop_that_ends_after_it_is_built_once():
    source = '''
import torch
for epoch in range(epochs):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
'''
    # Issue 26, principle 2: a scaler built in the epoch loop is reported by default (a warning).
    assert _findings(source) == [(4, "high")]
    assert _findings(source + "    break\n") == []


def test_a_reset_after_a_divergence_rests_on_an_assumption():
    source = '''
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    if diverged():
        scaler = torch.amp.GradScaler("cuda")
'''
    assert _findings(source, show_assumed=False) == []
    assert _findings(source) == [(9, "medium")]
    # without the scaler built before the loop it is a plain per-iteration scaler, proved
    assert _findings(source.replace('scaler = torch.amp.GradScaler("cuda")\nfor', "for"), show_assumed=False) == [(8, "high")]


def test_an_early_continue_on_another_value_is_not_lazy_initialisation():
    source = '''
import torch
for x in loader:
    if x is None:
        continue
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
'''
    assert _findings(source, show_assumed=False) == [(6, "high")]
    # on the scaler itself it is
    assert _findings(source.replace("if x is None:\n        continue", "if scaler is not None:\n        continue")) == []


def test_the_rule_is_registered():
    assert "AMP013" in registry.default_codes()
