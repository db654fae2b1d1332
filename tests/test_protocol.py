"""The GradScaler protocol as data (issue 26), the principles it carries, and fixes that respect it (issue 27).

Each test names the principle or item it shows; the shapes are our own."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amp_lint.analysis import protocol as P
from amp_lint.analysis.builder import build_model
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis import typestate
from amp_lint.engine.checker import Checker
from amp_lint.rules import ALL_RULES


def _check(source: str, codes, fix: bool = False, show_assumed: bool = False):
    result = Checker(frozenset(codes), fix=fix, unsafe_fixes=fix, show_assumed=show_assumed).check(
        textwrap.dedent(source), "train.py"
    )
    return result


def _found(source: str, *codes: str, show_assumed: bool = False):
    return [(d.code, d.location.row) for d in _check(source, codes, show_assumed=show_assumed).diagnostics]


# --- Principle 1: one protocol, written once, as data ---------------------------------------------------


def test_the_table_is_pure_data_without_libcst():
    # Principle 1: the table is importable by anything (a runtime guard) and models torch's GradScaler.
    source = Path(P.__file__).read_text()
    imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all("libcst" not in ast.dump(n) and "amp_lint" not in ast.dump(n) for n in imports)
    assert P.stage_after(P.STEP, P.READY) == (P.STEPPED, None)  # step() unscales by itself
    assert P.stage_after(P.UNSCALE, P.STEPPED)[1] == "unscale-after-step"
    assert P.stage_after(P.UNSCALE, P.UNSCALED)[1] == "unscale-twice"
    assert P.stage_after(P.STEP, P.STEPPED)[1] == "step-twice"
    assert P.stage_after(P.UPDATE, P.STEPPED) == (P.READY, None)
    assert P.grads_after(P.STEP, P.READY, P.GRADS_UNSCALED)[1] == "unscaled-twice"
    assert P.inf_checks_after(P.UPDATE, False, False)[1] == "update-without-inf-checks"
    assert P.inf_checks_after(P.UPDATE_NEW_SCALE, False, False)[1] is None  # update(new_scale) sets the scale
    assert P.inf_checks_after(P.UPDATE, True, False) == (False, None)  # unscale_(); update() is legal
    assert {rule for rule, _ in P.VIOLATIONS.values()} <= {r.code for r in ALL_RULES}


def _states(source: str, kind: EventKind, index: int = -1):
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    step = model.steps[0]
    event = step.of(kind)[index]
    return typestate.run(flow_of(model, step)), event


def test_the_engine_follows_the_gradients_scale_and_accumulation():
    # Principle 1: the gradients' scale and whether they accumulate are part of the state.
    source = """
for i, x in enumerate(loader):
    scaler.scale(loss).backward()
    scaler.scale(loss2).backward()
    scaler.unscale_(opt)
    clip(model)
    scaler.step(opt)
    scaler.update()
"""
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    [step_model] = model.steps
    states = typestate.run(flow_of(model, step_model))
    [unscale], [step] = step_model.of(EventKind.SCALER_UNSCALE), step_model.of(EventKind.SCALER_STEP)
    assert {s.grads_of("scaler", "opt") for s in states.before[id(unscale)]} == {(P.SCALED, True)}
    before_step = states.before[id(step)]
    assert {s.grads_of("scaler", "opt")[0] for s in before_step} == {P.GRADS_UNSCALED}
    assert all("scaler" in s.checks for s in before_step)  # unscale_ recorded the inf checks
    assert states.violations == {}


def test_unscale_update_step_divides_twice_and_is_amp022():
    # Principle 1: step() finds the optimizer READY again after update(), unscales the unscaled
    # gradients a second time; the engine names it and AMP022 reports the update.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.update()
    scaler.step(optimizer)
"""
    states, step = _states(source, EventKind.SCALER_STEP)
    [violation] = states.at(step)
    assert violation.name == "unscaled-twice" and violation.cause.kind is EventKind.SCALER_UPDATE
    assert _found(source, "AMP022") == [("AMP022", 8)]
    # update() after unscale_ with no step at all is legal, and update(new_scale) needs no inf checks
    legal = source.replace("    scaler.step(optimizer)\n", "")
    assert _found(legal, "AMP022", "AMP024") == []
    assert _found("for x in loader:\n    scaler.scale(l).backward()\n    scaler.update(2.0 ** 16)\n", "AMP022") == []


# --- Principle 2: an iteration is not only a loop body --------------------------------------------------

_GUARDED_CLASS = """
import torch
class Trainer:
    def __init__(self, model, optimizer, fp16, accum):
        self.model = model
        self.optimizer = optimizer
        self.fp16 = fp16
        self.accum = accum
        self.scaler = torch.amp.GradScaler("cuda") if fp16 else None

    def train_step(self, i, batch):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.fp16):
            loss = self.model(batch).sum() / self.accum
        if self.fp16:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if self.fp16:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
"""


def test_a_per_call_step_is_one_iteration():
    # Principle 2: what goes wrong inside one call of `train_step(self, batch)` is reported.
    source = """
class Trainer:
    def train_step(self, batch):
        self.scaler.scale(self.model(batch).sum()).backward()
        self.scaler.update()
        self.scaler.step(self.optimizer)
"""
    assert _found(source, "AMP022") == [("AMP022", 5)]


def test_returning_after_unscale_without_step_or_update_breaks_the_next_call():
    # Principle 2: an iteration boundary that is a call; the skip branch returns with the optimizer
    # UNSCALED and the next call's unscale_ raises.
    source = """
import torch
class Trainer:
    def train_step(self, batch):
        self.scaler.scale(self.model(batch).sum()).backward()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if not torch.isfinite(norm):
            return None
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""
    assert _found(source, "AMP024") == [("AMP024", 6)]
    # A helper that only unscales (its caller steps and updates) is a step part, not an iteration.
    helper = """
class Trainer:
    def unscale_and_clip(self):
        self.scaler.unscale_(self.optimizer)
        clip(self.model)
"""
    assert _found(helper, "AMP024") == []


def test_an_accumulation_boundary_inside_a_per_call_function_is_amp041_and_the_fix_lands_inside():
    # Principle 2 (and issue 27, item 2): `if (i + 1) % k == 0:` around the step in the per-call function
    # makes the unscale_ and clip before it AMP041; the fix moves them into the boundary.
    source = """
import torch
class Trainer:
    def train_step(self, i, batch):
        self.scaler.scale(self.model(batch).sum() / self.accum).backward()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if (i + 1) % self.accum == 0:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()
"""
    assert _found(source, "AMP041", "AMP024") == [("AMP041", 6), ("AMP041", 7)]
    fixed = _check(source, {"AMP041"}, fix=True).fixed_source
    assert "        if (i + 1) % self.accum == 0:\n            self.scaler.unscale_(self.optimizer)\n" in fixed


def test_a_scaler_built_once_per_epoch_is_a_default_warning():
    # Principle 2: epochs are iterations too, for a scaler built in the epoch loop or in a function the
    # epoch loop calls: reported by default (no --show-assumed), as a warning.
    source = """
import torch
def fit_one_epoch(net, batches, opt):
    grad_scaler = torch.amp.GradScaler("cuda")
    for b in batches:
        grad_scaler.scale(net(b).mean()).backward()
        grad_scaler.step(opt)
        grad_scaler.update()

for ep in range(num_epochs):
    fit_one_epoch(net, batches, opt)
"""
    [diagnostic] = _check(source, {"AMP013"}).diagnostics
    assert (diagnostic.location.row, diagnostic.severity.value) == (4, "warning")


# --- Principle 3: open world ----------------------------------------------------------------------------


def test_a_helper_stepping_one_optimizer_leaves_update_to_its_caller():
    # Principle 3: several optimizers, one update; the helper is correct and its caller supplies update().
    source = """
import torch
class GAN:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def _apply(self, opt):
        self.scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(self.params_of(opt), 5.0)
        self.scaler.step(opt)

    def fit(self, data):
        for batch in data:
            self.scaler.scale(self.loss(batch)).backward()
            self._apply(self.gen_opt)
            self._apply(self.disc_opt)
            self.scaler.update()
"""
    assert _found(source, "AMP021", "AMP022", "AMP023", "AMP024") == []


def test_a_public_library_step_is_not_reported_and_gets_no_fix():
    # Principle 3 (and issue 27, item 3): a library's public step method whose users call update().
    source = """
import torch
class Accelerated:
    def __init__(self, optimizer):
        self.grad_scaler = torch.amp.GradScaler("cuda")
        self.optimizer = optimizer

    def step(self, closure=None):
        self.grad_scaler.step(self.optimizer)
"""
    result = _check(source, {"AMP021"}, fix=True)
    assert result.diagnostics == [] and result.fixed_source is None


def test_a_visible_caller_that_never_updates_is_still_reported():
    # Principle 3: when every caller is visible and none supplies update(), it is a finding.
    source = """
def apply_step(s, opt):
    s.step(opt)

def run(batches, net, opt, grad_scaler):
    for b in batches:
        grad_scaler.scale(net(b).mean()).backward()
        apply_step(grad_scaler, opt)
"""
    assert [code for code, _ in _found(source, "AMP021")] == ["AMP021"]


def test_a_project_helper_reading_gradients_before_unscale_is_amp030():
    # Principle 3: a helper of the project that reads gradients (a norm) between the scaled backward and
    # unscale_ is AMP030, as clip_grad_norm_ is.
    source = """
import torch
def total_norm(net):
    acc = 0.0
    for w in net.parameters():
        if w.grad is not None:
            acc += float(w.grad.norm()) ** 2  # `float`, `log`: calls that make no training loop
    return acc

scaler = torch.amp.GradScaler("cuda")
for b in batches:
    scaler.scale(net(b).mean()).backward()
    log(total_norm(net))
    scaler.step(opt)
    scaler.update()
"""
    assert [code for code, _ in _found(source, "AMP030")] == ["AMP030"]


# --- Principle 4: values followed everywhere they go ----------------------------------------------------


@pytest.mark.parametrize(
    "backward",
    [
        "torch.autograd.backward([scaler.scale(o) for o in outs])",
        "torch.autograd.backward(list(map(scaler.scale, outs)))",
        "parts = (scaler.scale(outs[0]), scaler.scale(outs[1]))\n    torch.autograd.backward(parts)",
        "terms = {'main': scaler.scale(outs[0])}\n    terms['main'].backward()",
        "if weighted:\n        total = scaler.scale(outs[0] * w)\n    else:\n        total = scaler.scale(outs[0])\n    total.backward()",
    ],
)
def test_scaled_tensors_through_containers_and_higher_order_calls(backward):
    # Principle 4: the backward runs on scaled tensors: no AMP011; a clip before unscale_ is AMP030.
    source = f"""
import torch
scaler = torch.amp.GradScaler("cuda")
for b in batches:
    with torch.autocast("cuda", dtype=torch.float16):
        outs = net(b)
    {backward}
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
"""
    assert [code for code, _ in _found(source, "AMP011", "AMP030")] == ["AMP030"]


def test_a_threshold_that_carries_the_scale_is_correct():
    # Principle 4: clipping scaled gradients to max_norm * scaler.get_scale() is right.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for b in batches:
    scaler.scale(net(b).mean()).backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm * scaler.get_scale())
    scaler.step(opt)
    scaler.update()
"""
    assert _found(source, "AMP030") == []


def test_zero_grad_and_return_on_a_skip_branch_never_reaches_the_step():
    # Principle 4: exceptions and early returns are paths; the skip branch clears and returns.
    source = """
import torch
class T:
    def train_step(self, b):
        loss = self.net(b).mean()
        if not torch.isfinite(loss):
            self.opt.zero_grad()
            return
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
"""
    assert _found(source, "AMP043", "AMP021", "AMP022", "AMP024", show_assumed=True) == []


# --- Issue 27: fixes respect guards, boundaries and callers -----------------------------------------------


def test_the_inserted_unscale_carries_the_backwards_guard():
    # Issue 27, item 1: the scaler is None when fp16 is off; the inserted unscale_ is under `if self.fp16:`.
    source = _GUARDED_CLASS.replace("self.model(batch).sum() / self.accum", "self.model(batch).sum()")
    result = _check(source, {"AMP030"}, fix=True)
    assert "        if self.fp16:\n            self.scaler.unscale_(self.optimizer)\n        torch.nn.utils.clip" in result.fixed_source
    assert not result.errors


def test_no_unscale_before_a_clip_that_runs_on_every_micro_batch():
    # Issue 27, item 2: the step waits for the accumulation boundary; an unscale_ inserted before the clip
    # would run on every micro-batch. AMP030 offers no fix; AMP041 moves the clip into the boundary.
    source = """
import torch
class Trainer:
    def train_step(self, i, batch):
        self.scaler.scale(self.model(batch).sum() / self.accum).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if (i + 1) % self.accum == 0:
            self.scaler.step(self.optimizer)
            self.scaler.update()
"""
    [amp030] = [d for d in _check(source, {"AMP030"}).diagnostics]
    assert amp030.fix is None
    fixed = _check(source, {"AMP030", "AMP041"}, fix=True).fixed_source
    assert "if (i + 1) % self.accum == 0:\n            self.scaler.unscale_(self.optimizer)\n            torch.nn" in fixed


def test_amp020s_fix_adds_the_update_it_needs_and_passes_the_fix_check():
    # Issue 27, item 4: replacing opt.step() with scaler.step(opt) needs the update() after it.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for b in batches:
    scaler.scale(net(b).mean()).backward()
    opt.step()
    opt.zero_grad()
"""
    result = _check(source, {"AMP020"}, fix=True)
    assert not result.errors
    assert "    scaler.step(opt)\n    scaler.update()\n    opt.zero_grad()\n" in result.fixed_source


def test_amp030_names_the_optimizer_whose_parameters_are_clipped():
    # Issue 27, item 8.
    source = """
import torch
enc_opt = torch.optim.Adam(encoder.parameters())
dec_opt = torch.optim.Adam(decoder.parameters())
scaler = torch.amp.GradScaler("cuda")
for b in batches:
    scaler.scale(decoder(encoder(b)).mean()).backward()
    torch.nn.utils.clip_grad_norm_(decoder.parameters(), 1.0)
    scaler.step(enc_opt)
    scaler.step(dec_opt)
    scaler.update()
"""
    [diagnostic] = _check(source, {"AMP030"}).diagnostics
    assert "`scaler.unscale_(dec_opt)`" in diagnostic.message and "enc_opt)`" not in diagnostic.message


FIXABLE_INVALID = [
    (rule, i, example)
    for rule in ALL_RULES
    if rule.fix_applicability is not None
    for i, example in enumerate(rule.invalid)
]


@pytest.mark.parametrize("item", FIXABLE_INVALID, ids=[f"{r.code}-{i}" for r, i, _ in FIXABLE_INVALID])
def test_every_fix_offered_on_an_invalid_example_passes_the_fix_check(item):
    # Issue 27, item 4: a finding marked fixable has a fix that the fix check accepts.
    rule, _, example = item
    source = textwrap.dedent(example.code)
    # As a user sees it: findings that rest on an assumption are fixed only where they are shown.
    assumed = not Checker(frozenset({rule.code})).check(source, "example.py").diagnostics
    result = Checker(frozenset({rule.code}), fix=True, unsafe_fixes=True, show_assumed=assumed).check(source, "example.py")
    assert not [e.message for e in result.errors if "not fixed" in e.message]


def test_the_fix_check_sees_a_return_after_unscale_as_a_double_unscale_on_the_next_call():
    # Issue 27, item 2: the function updates its scaler itself, and a path returns after unscale_ with
    # neither step nor update: the next call's unscale_ raises. A helper that only unscales does not.
    from amp_lint.fixes.verify_fix import hazards

    step = """
def train_step(self, batch):
    self.scaler.scale(self.loss(batch)).backward()
    self.scaler.unscale_(self.opt)
    if skip:
        return
    self.scaler.step(self.opt)
    self.scaler.update()
"""
    assert [h.kind for h in hazards(step)] == ["unscale-twice"]
    assert hazards(step.replace("        return\n", "        pass\n")) == ()
    assert hazards("def clip(self):\n    self.scaler.unscale_(self.opt)\n    clip(self.p)\n") == ()


def test_a_clip_that_raises_inside_try_is_the_skip_branch():
    # Principle 4: exceptions are paths. error_if_nonfinite=True inside `try`, the step skipped in
    # `except`, update() after both: correct. Without the try it is AMP031.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for b in batches:
    scaler.scale(net(b).mean()).backward()
    scaler.unscale_(opt)
    try:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, error_if_nonfinite=True)
        scaler.step(opt)
    except RuntimeError:
        skipped += 1
    scaler.update()
"""
    assert _found(source, "AMP031", "AMP022", "AMP024") == []
    plain = """
import torch
scaler = torch.amp.GradScaler("cuda")
for b in batches:
    scaler.scale(net(b).mean()).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, error_if_nonfinite=True)
    scaler.step(opt)
    scaler.update()
"""
    assert [code for code, _ in _found(plain, "AMP031")] == ["AMP031"]


def test_a_call_the_analysis_cannot_follow_may_complete_the_step():
    # Principle 3: an unresolved call on the early-return path may step and update: no AMP024.
    source = """
import torch
class Trainer:
    def train_step(self, batch):
        self.scaler.scale(self.model(batch).sum()).backward()
        self.scaler.unscale_(self.optimizer)
        if self.overflowed:
            finish_elsewhere(self.scaler, self.optimizer)
            return None
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""
    assert _found(source, "AMP024", show_assumed=True) == []
