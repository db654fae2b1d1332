"""Issue 26, principle 1 (one protocol, with the gradients' state in it), as met on held-out code (round ten):
the state an iteration ends in on each path, what a manual inf check proves on each edge of its test, and
a direct step that is wrong on every state reaching it. The shapes are our own.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amp_lint.analysis.conditions import FINITE, NONFINITE, OPAQUE, finiteness
from amp_lint.analysis.syntax import loop_counters
from tests.test_protocol_per_call import _found


# The overflow branch steps and forgets the update the other branch runs (espnet's trainer with one line
# dropped): the iteration can end STEPPED, and the next iteration's step raises "step-twice".
_SKIPS_UPDATE = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if overflowed(x):
        scaler.step(opt)
    else:
        scaler.step(opt)
        scaler.update()
    opt.zero_grad()
"""


def test_a_path_that_skips_the_update_ends_the_iteration_stepped():
    # Principle 1: the protocol's end state on one path is STEPPED: AMP021 at the step that left it so.
    assert _found(_SKIPS_UPDATE, "AMP021", "AMP024") == [("AMP021", 7)]
    fixed = _SKIPS_UPDATE.replace("        scaler.step(opt)\n    else:", "        scaler.step(opt)\n        scaler.update()\n    else:")
    assert _found(fixed, "AMP021", "AMP023", "AMP024", show_assumed=True) == []


def test_a_break_or_return_after_the_step_is_not_a_next_iteration():
    # Principle 1: only a path that reaches the next iteration ends it STEPPED; `break` leaves the loop.
    source = _SKIPS_UPDATE.replace("        scaler.step(opt)\n    else:", "        scaler.step(opt)\n        break\n    else:")
    assert _found(source, "AMP021", show_assumed=True) == []


def test_passes_that_alternate_on_the_loop_counter_are_only_assumed():
    # Principle 1, cross-iteration: a test of what the loop advances every pass (`i % 2`) need not go the
    # same way on the next pass; the update under the other way may run in between (a GAN alternating
    # its discriminator and generator). Shown with --show-assumed only.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, x in enumerate(loader):
        scaler.scale(model(x).sum()).backward()
        if i % 2:
            scaler.step(opt_d)
        else:
            scaler.step(opt_g)
            scaler.update()
    """
    assert _found(source, "AMP021") == []
    assert _found(source, "AMP021", show_assumed=True) == [("AMP021", 7)]
    # An accumulation boundary is also a test of the counter, but no update runs on the other passes: the
    # boundary's overflow branch that skips the update still meets its own step again.
    boundary = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, x in enumerate(loader):
        scaler.scale(model(x).sum() / 4).backward()
        if (i + 1) % 4 == 0:
            if overflowed(x):
                scaler.step(opt)
            else:
                scaler.step(opt)
                scaler.update()
            opt.zero_grad()
    """
    assert _found(boundary, "AMP021") == [("AMP021", 8)]


def test_an_exception_handler_that_skips_the_update_is_only_assumed():
    # Principle 1: `scaler.step` that raises leaves the stage as it was; the handler's `continue` is a path
    # only if the step raised: an assumption, not a proof.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        try:
            scaler.step(opt)
        except RuntimeError:
            continue
        scaler.update()
    """
    assert _found(source, "AMP021") == []
    assert _found(source, "AMP021", show_assumed=True) == [("AMP021", 7)]


def test_a_call_handed_the_scaler_may_be_the_update_on_that_path():
    # Principle 3 (open world) inside principle 1's question: a call the analysis does not follow, handed
    # the scaler, on the path that skips the update may update it.
    source = _SKIPS_UPDATE.replace("        scaler.step(opt)\n    else:", "        scaler.step(opt)\n        finish(scaler)\n    else:")
    assert _found(source, "AMP021", show_assumed=True) == []


@pytest.mark.parametrize(
    "test, taken, expected",
    [
        ("torch.isfinite(norm)", True, {FINITE}),
        ("torch.isfinite(norm)", False, {NONFINITE}),
        ("not torch.isfinite(norm)", False, {FINITE}),
        ("norm is None or torch.isfinite(norm)", True, set()),  # no norm, no check
        ("norm is None or torch.isfinite(norm)", False, {NONFINITE}),
        ("not torch.isfinite(norm) or skip", False, {FINITE}),
        ("torch.isfinite(norm) and ready", True, {FINITE}),
        ("found_inf", True, {NONFINITE}),
        ("found_inf.item() == 0", True, {OPAQUE}),
        ("ready", True, set()),
    ],
)
def test_what_each_edge_of_an_inf_check_proves(test, taken, expected):
    assert finiteness(cst.parse_expression(test), taken) == expected


_INF_CHECKED = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(opt)
    norm = None
    if clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if TEST:
        opt.step()
    scaler.update()
"""


def test_a_direct_step_is_a_manual_skip_only_where_its_test_proves_the_gradients_finite():
    # Principle 1: a manual inf check guards the direct step on the edge that proves the gradients
    # finite; `norm is None or isfinite(norm)` proves nothing on its body (no clip, no check), and the
    # body of `not isfinite(norm)` steps on the overflow itself.
    assert _found(_INF_CHECKED.replace("TEST", "norm is not None and torch.isfinite(norm)"), "AMP020") == []
    assert _found(_INF_CHECKED.replace("TEST", "norm is None or torch.isfinite(norm)"), "AMP020") == [("AMP020", 11)]
    assert _found(_INF_CHECKED.replace("TEST", "norm is not None and not torch.isfinite(norm)"), "AMP020") == [("AMP020", 11)]


def test_a_direct_step_wrong_on_every_state_is_proved():
    # Principle 1: the unscale_ loop may skip this optimizer (`continue` under a selector the step loop
    # repeats, which the paths do not correlate across two loops): the direct step then meets SCALED
    # gradients, otherwise UNSCALED ones with an update after it. Wrong on every state: proved.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        for i, opt in enumerate(optimizers):
            if only is not None and i != only:
                continue
            scaler.unscale_(opt)
        for i, opt in enumerate(optimizers):
            if only is not None and i != only:
                continue
            opt.step()
            scaler.update()
    """
    assert ("AMP020", 13) in _found(source, "AMP020")


def test_loop_counters_are_what_a_loop_advances_not_its_data():
    def counters(code: str) -> set:
        return loop_counters(cst.parse_statement(textwrap.dedent(code)))

    assert counters("for i, x in enumerate(loader):\n    step += 1\n    self.global_step += 1\n") == {"i", "step", "self.global_step"}
    assert counters("for epoch in range(n):\n    pass\n") == {"epoch"}
    assert counters("for x in loader:\n    pass\n") == set()
    assert counters("while True:\n    total += loss\n") == {"total"}


def test_a_loop_over_parameter_groups_steps_each_groups_optimizer_once():
    # Principle 2: the pass's optimizer may be a tuple element of the target (`for group, opt in
    # opts.items()`) or looked up from it first thing (`opt = self.optimizers[group]`); a clip of the
    # group and a builtin call (`any(...)`) in the pass are no iteration's work.
    from amp_lint.analysis.builder import build_model
    from amp_lint.analysis.single_pass_loops import single_pass_loops

    source = """
    def step_groups(self, scaler, groups):
        for group in groups:
            optimizer = self.optimizers[group]
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(self.parameters[group], 1.0)
            if any(p.grad is not None for p in self.parameters[group]):
                scaler.step(optimizer)

    def step_items(self, scaler):
        for group, optimizer in self.optimizers.items():
            scaler.step(optimizer)

    def train(self, scaler, loader):
        for batch in loader:
            scaler.step(self.optimizer)
    """
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    once = {}
    for scope in model.scopes:
        if scope.is_function:
            once[scope.node.name.value] = bool(single_pass_loops(scope.events, lambda e: True))
    assert once == {"step_groups": True, "step_items": True, "train": False}


def test_the_fix_check_refuses_a_name_nothing_binds():
    # A fix that writes a name of another scope (a callee's loop variable) into the caller raises NameError:
    # refused whatever the rules say.
    from amp_lint.engine.fix_check import hazard_regression
    from amp_lint.fixes.undefined_names import new_undefined_names, undefined_names

    before = "def train(self):\n    self.helper(self.scaler)\n"
    after = "def train(self):\n    self.scaler.unscale_(optimizer)\n    self.helper(self.scaler)\n"
    assert new_undefined_names(before, after) == ["optimizer"]
    assert "optimizer" in (hazard_regression(before, after) or "")
    bound = "def train(self, optimizer):\n    self.scaler.unscale_(optimizer)\n    self.helper(self.scaler)\n"
    assert new_undefined_names(before.replace("(self)", "(self, optimizer)"), bound) == []
    # the file's own unbound names (a snippet's `loader`) are compared away; a star import makes it unknowable
    assert new_undefined_names("for x in loader:\n    f(x)\n", "for x in loader:\n    f(x)\n    g(x)\n") == ["g"]
    assert undefined_names("from torch import *\nprint(nn)\n") is None
    # a class body's names are not visible in its methods
    assert new_undefined_names("class A:\n    y = 1\n", "class A:\n    y = 1\n    def m(self):\n        return y\n") == ["y"]


def test_a_short_circuit_test_is_read_operand_by_operand():
    # Principle 1 (correlated conditions): the false edge of `if clip or i % 100 == 0:` says `clip` is
    # false, so the later `if clip:` clip always follows the unscale_; the compound was one opaque (and,
    # with its `%`, "varying") test, and the path that skips the unscale_ and clips was taken as proved.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for i, x in enumerate(loader):
        scaler.scale(model(x).sum()).backward()
        if clip or i % 100 == 0:
            scaler.unscale_(opt)
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    """
    assert _found(source, "AMP030", show_assumed=True) == []
    conjunction = source.replace("if clip or i % 100 == 0:", "if clip and ready:").replace("if clip:", "if ready and clip:")
    assert _found(conjunction, "AMP030", show_assumed=True) == []
    # `not (a or b)`: its body says both are false
    negated = textwrap.dedent(source).replace(
        "if clip or i % 100 == 0:\n        scaler.unscale_(opt)", "if not (clip or log):\n        pass\n    else:\n        scaler.unscale_(opt)"
    )
    assert "else:" in negated and _found(negated, "AMP030", show_assumed=True) == []
    # an operand that decides nothing else keeps the path open
    other = source.replace("if clip:", "if clip_now:")
    assert _found(other, "AMP030", show_assumed=True) == [("AMP030", 9)]


def test_an_unscale_behind_a_latch_the_code_keeps_runs_once():
    # Principle 4 (values followed): `if not self.unscaled: unscale_(); self.unscaled = True` in a helper
    # called twice runs the unscale_ once; a first unscale_ that does not set the flag is still a second.
    helper = """
    import torch
    class Trainer:
        def unscale(self):
            if not self.unscaled:
                self.scaler.unscale_(self.opt)
                self.unscaled = True

        def train_step(self, x):
            self.unscaled = False
            self.scaler.scale(self.model(x).sum()).backward()
            self.unscale()
            self.unscale()
            self.scaler.step(self.opt)
            self.scaler.update()
    """
    assert _found(helper, "AMP024", show_assumed=True) == []
    unlatched = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        unscaled = False
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(opt)
        if not unscaled:
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    """
    assert _found(unlatched, "AMP024") == [("AMP024", 9)]


@pytest.mark.parametrize(
    "rescale",
    [
        "for p in muon_params:\n        p.grad.mul_(1.0 / scaler.get_scale())",
        "inv = 1.0 / scaler.get_scale()\n    for p in muon_params:\n        p.grad.data.mul_(inv)",
        "s = scaler.get_scale()\n    for p in muon_params:\n        p.grad /= s",
        "for p in muon_params:\n        p.grad = p.grad / scaler.get_scale()",
    ],
)
def test_gradients_rescaled_by_hand_are_not_the_protocols_to_judge(rescale):
    # Principle 1: the state the code puts the gradients in. A Muon optimizer's gradients divided by the
    # scale by hand beside an AdamW the scaler unscales: a direct `muon.step()` is not "on scaled
    # gradients", and its safe fix (through the scaler) would unscale them twice.
    source = f"""
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optim_adam)
    {rescale}
    scaler.step(optim_adam)
    optim_muon.step()
    scaler.update()
"""
    assert _found(source, "AMP020", show_assumed=True) == []
    # the same without the rescale: the Muon step is on scaled gradients
    assert _found(source.replace(rescale, "pass"), "AMP020") == [("AMP020", 9)]


def test_a_clip_of_gradients_rescaled_by_hand_is_not_a_read_of_scaled_ones():
    # Principle 1, the reads (AMP030): the Muon gradients divided by the scale by hand, then clipped; the
    # safe fix (`scaler.unscale_(adam)` before the clip) was beside the point.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        inv_scale = 1.0 / scaler.get_scale()
        for p in muon_params:
            p.grad.mul_(inv_scale)
        torch.nn.utils.clip_grad_norm_(muon_params, 1.0)
        scaler.step(adam)
        muon.step()
        scaler.update()
    """
    assert _found(source, "AMP030", show_assumed=True) == []
    assert _found(source.replace("p.grad.mul_(inv_scale)", "pass"), "AMP030") == [("AMP030", 9)]
