"""Issue 26, principles 1 to 3 for the GradScaler order rules: a per-call function is one iteration, a
class whose methods run the protocol on one `self.<scaler>` is a protocol object, and the open world
(report what one call proves, or what nothing in the whole project can complete). The shapes are our own.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from amp_lint.engine.checker import Checker


def _found(source: str, *codes: str, show_assumed: bool = False):
    result = Checker(frozenset(codes), show_assumed=show_assumed).check(textwrap.dedent(source), "train.py")
    return [(d.code, d.location.row) for d in result.diagnostics]


# A protocol object: the scaled backward in one method, the step in a sibling the framework calls next.
_MANAGER = '''
import torch


class AmpManager:
    def __init__(self, enabled):
        self.enabled = enabled
        self.grad_scaler = torch.amp.GradScaler("cuda", enabled=enabled)

    def backward(self, loss):
        self.grad_scaler.scale(loss).backward()

    def step(self, net, opt):
        {body}
        opt.zero_grad()
'''


def _manager(*lines: str) -> str:
    return _MANAGER.replace("{body}", "\n        ".join(lines))


def test_unscale_update_step_inside_one_call_is_proved_whatever_the_callers():
    # Principles 1 and 2: the step function of a protocol object runs once per call; `unscale_(); update();
    # step()` there divides the gradients twice (step() finds the optimizer READY again), whoever calls it.
    source = _manager(
        "self.grad_scaler.unscale_(opt)",
        "torch.nn.utils.clip_grad_value_(net.parameters(), 0.5)",
        "self.grad_scaler.update()",
        "self.grad_scaler.step(opt)",
    )
    assert _found(source, "AMP022") == [("AMP022", 16)]
    correct = _manager(
        "self.grad_scaler.unscale_(opt)",
        "torch.nn.utils.clip_grad_value_(net.parameters(), 0.5)",
        "self.grad_scaler.step(opt)",
        "self.grad_scaler.update()",
    )
    assert _found(correct, "AMP020", "AMP021", "AMP022", "AMP023", "AMP024") == []


def test_a_doubled_unscale_in_a_per_call_function_over_optimizers_is_reported():
    # Principle 2: a function with no loop of iterations of its own (its loop runs over optimizers) is one
    # iteration: its second unscale_ raises on the first call.
    source = """
class Engine:
    def unscale_all(self, optimizers):
        for o in optimizers:
            self.amp_scaler.unscale_(o)
            self.amp_scaler.unscale_(o)
"""
    assert _found(source, "AMP024") == [("AMP024", 6)]
    once = source.replace("            self.amp_scaler.unscale_(o)\n", "", 1)
    assert _found(once, "AMP024") == []


def test_a_direct_step_closed_by_update_in_one_call_is_amp020():
    # Principles 2 and 3: `opt.step()` then `update()` in the step method, with no scaler step or unscale_
    # of that scaler in the call: the update finds no inf checks (or, after a caller's unscale_, an
    # overflowing step is never skipped), whatever the callers did.
    source = _manager("opt.step()", "self.grad_scaler.update()")
    assert _found(source, "AMP020") == [("AMP020", 14)]
    # The fp32 branch steps directly, the AMP branch through the scaler: nothing to report.
    branches = _manager(
        "if self.enabled:",
        "    self.grad_scaler.step(opt)",
        "    self.grad_scaler.update()",
        "else:",
        "    opt.step()",
    )
    assert _found(branches, "AMP020", "AMP022") == []
    # An update alone (the step lives in another method) is a step part, not a finding.
    alone = """
class Trainer:
    def end_of_iteration(self):
        self.scaler.update()
"""
    assert _found(alone, "AMP020", "AMP022") == []


def test_an_update_that_breaks_on_every_path_is_proved_not_assumed():
    # Principle 1: `if clip: unscale_(); clip()` then `update(); step()`: without the clip, update() finds
    # no inf checks; with it, step() unscales a second time. Every path breaks: a default finding. The
    # protocol keys an optimizer by its code (`optimizers[0]`, `self.optimizers()[0]`), a name or not:
    # whether every path breaks must not depend on how the optimizer is spelled.
    template = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if max_norm is not None:
        scaler.unscale_(OPT)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(OPT)
"""
    for optimizer in ("optimizer", "optimizers[0]", "self.optimizers()[0]", "opts[i % 2]"):
        assert _found(template.replace("OPT", optimizer), "AMP022") == [("AMP022", 9)], optimizer
    # The step only under the same `if`: the path without it is fine when nothing runs; an assumption.
    source = template.replace("OPT", "optimizer")
    assumed = source.replace("    scaler.update()\n    scaler.step(optimizer)\n", "        scaler.step(optimizer)\n    scaler.update()\n")
    assert _found(assumed, "AMP022") == []
    assert _found(assumed, "AMP022", show_assumed=True) == [("AMP022", 10)]


_OWNER = '''import torch


class Mixed:
    def __init__(self):
        self.loss_scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.loss_scaler.scale(loss).backward()

    def step(self, opt):
        self.loss_scaler.step(opt)
'''


def _check_project(tmp_path: Path, files: dict):
    from amp_lint.analysis.project import ProjectIndex

    package = tmp_path / "amppkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, text in files.items():
        (package / name).write_text(text)
    path = package / "mixed.py"
    checker = Checker(frozenset({"AMP021"}), project=ProjectIndex())
    result = checker.check(path.read_text(), path.name, path=str(path))
    return [(d.code, d.location.row) for d in result.diagnostics]


def test_a_protocol_object_whose_scaler_nothing_in_the_project_updates_is_amp021(tmp_path):
    # Principle 3: a step helper may leave update() to its caller, but when the class builds the scaler,
    # runs its scaled backward, and no file of the project updates it or hands it on, nothing can.
    assert _check_project(tmp_path, {"mixed.py": _OWNER, "loop.py": "def fit(m, o):\n    m.step(o)\n"}) == [("AMP021", 12)]


def test_a_scaler_updated_or_handed_on_elsewhere_in_the_project_is_left_to_it(tmp_path):
    # Principle 3: another module updates the attribute, or receives the scaler: silent.
    updated = "def fit(m, o):\n    m.step(o)\n    m.loss_scaler.update()\n"
    assert _check_project(tmp_path / "a", {"mixed.py": _OWNER, "loop.py": updated}) == []
    handed = "def fit(m, o, finish):\n    m.step(o)\n    finish(m.loss_scaler)\n"
    assert _check_project(tmp_path / "b", {"mixed.py": _OWNER, "loop.py": handed}) == []
    # A library step with no backward of its own in the class is a step part: its users update.
    library = _OWNER.replace("    def backward(self, loss):\n        self.loss_scaler.scale(loss).backward()\n\n", "")
    assert _check_project(tmp_path / "c", {"mixed.py": library}) == []


def test_a_scaler_state_guard_does_not_cover_a_second_unscale_inside_it():
    # Principle 2: a guard that asks the scaler's stage protects an unscale_ against a caller's earlier one,
    # not against a second unscale_ inside the same guarded block (the test ran before the first).
    source = """
from torch.amp.grad_scaler import OptState
class Trainer:
    def clip(self):
        if self.scaler._per_optimizer_states[id(self.opt)]["stage"] is not OptState.UNSCALED:
            self.scaler.unscale_(self.opt)
            self.scaler.unscale_(self.opt)
        clip_grad_norm_(self.params, 1.0)
"""
    assert _found(source, "AMP024") == [("AMP024", 7)]
    once = source.replace("            self.scaler.unscale_(self.opt)\n", "", 1)
    assert _found(once, "AMP024") == []


def test_a_direct_step_after_unscale_on_one_branch_is_amp020():
    # Principle 1: on the branch that unscales and steps directly, the protocol reaches `optimizer.step()`
    # with the optimizer UNSCALED and the update follows: an overflowing step is never skipped.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if distributed:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    else:
        scaler.step(optimizer)
    scaler.update()
"""
    assert _found(source, "AMP020") == [("AMP020", 9)]
    through = source.replace("        optimizer.step()\n", "        scaler.step(optimizer)\n")
    assert _found(through, "AMP020") == []


def test_a_direct_step_that_breaks_on_every_path_is_proved():
    # Principle 1: with the clip, the direct step follows an unscale_ (an overflow never skipped); without
    # it, the update finds no inf checks. Every path breaks: a default finding, not an assumption.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if clip is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    scaler.update()
"""
    assert _found(source, "AMP020") == [("AMP020", 9)]


def test_update_with_a_new_scale_between_unscale_and_step_divides_twice():
    # Principle 1 (torch's update(new_scale) resets every optimizer as update() does): step() then finds
    # the optimizer READY and unscales the gradients a second time.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    scaler.update(2.0 ** 12)
    scaler.step(optimizer)
"""
    assert _found(source, "AMP022") == [("AMP022", 7)]
    after = source.replace("    scaler.update(2.0 ** 12)\n    scaler.step(optimizer)\n", "    scaler.step(optimizer)\n    scaler.update(2.0 ** 12)\n")
    assert _found(after, "AMP022") == []


def test_the_cached_result_follows_an_update_added_in_another_module(tmp_path):
    # Principle 3 with the result cache: the finding rests on every file of the package, so a later
    # `update()` written in another module must clear it (the cache key names those files).
    import json
    import os
    import subprocess
    import sys

    package = tmp_path / "amppkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mixed.py").write_text(_OWNER)
    (package / "loop.py").write_text("def fit(m, o):\n    m.step(o)\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "amp_lint", "check", "--select", "AMP021", "--output-format", "json"]
    command += ["--cache-dir", str(tmp_path / "cache"), "amppkg/mixed.py"]

    def codes():
        run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
        assert run.returncode in (0, 1), run.stderr
        return [d["code"] for d in json.loads(run.stdout)]

    assert codes() == ["AMP021"]
    (package / "loop.py").write_text("def fit(m, o):\n    m.step(o)\n    m.loss_scaler.update()\n")
    assert codes() == []


# Principle 1 (the gradients' scale in the protocol state): a direct step whose gradients come from this
# iteration's own unscaled backward (the fp32 branch of a two-scaler GAN step) applies no scaled gradients,
# even when a later update of another scaler finds no inf checks. The bypass is the other branch's step.
_TWO_SCALERS = '''
import torch


def train_pair(engine, g_loss, d_loss):
    if engine.amp and engine.g_scaler is not None:
        engine.g_scaler.scale(g_loss).backward()
        engine.g_scaler.step(engine.g_opt)
        engine.g_scaler.update()
    else:
        g_loss.backward()
        engine.g_opt.step()
    if engine.amp and engine.d_scaler is not None:
        engine.d_scaler.scale(d_loss).backward()
        {d_step}
        engine.d_scaler.update()
    else:
        d_loss.backward()
        engine.d_opt.step()
'''


def test_a_direct_step_after_an_unscaled_backward_is_not_a_bypass_of_another_scaler():
    right = _TWO_SCALERS.replace("{d_step}", "engine.d_scaler.step(engine.d_opt)")
    assert _found(right, "AMP020", "AMP022") == []
    bypass = _TWO_SCALERS.replace("{d_step}", "engine.d_opt.step()")
    assert _found(bypass, "AMP020") == [("AMP020", 15)]
    result = Checker(frozenset({"AMP020"}), show_assumed=False).check(textwrap.dedent(bypass), "train.py")
    (fix,) = [d.fix for d in result.diagnostics]
    assert fix is not None


def test_a_scaler_handed_to_a_call_is_not_claimed_never_stepped():
    # Principle 3 (open world): the scaler goes to a method of an object this file does not show
    # (nerfstudio's `self.optimizers.optimizer_scaler_step_some(self.grad_scaler, groups)` steps it); what
    # that call does is unknown, so "update() but never stepped" is not proved. Kept only here: reported.
    source = """
import torch
from torch.amp import GradScaler


class Trainer:
    def __init__(self, config):
        self.grad_scaler = GradScaler("cuda", enabled=config.fp16)
        self.optimizers = self.setup_optimizers()

    def train_iteration(self, step):
        with torch.autocast("cuda"):
            loss = self.pipeline.get_train_loss(step)
        self.grad_scaler.scale(loss).backward()
        self.optimizers.scaler_step_all(STEPPED)
        self.grad_scaler.update()
"""
    assert _found(source.replace("STEPPED", "self.grad_scaler"), "AMP022") == []
    assert _found(source.replace("STEPPED", "grad_scaler=self.grad_scaler"), "AMP022") == []
    assert _found(source.replace("STEPPED", "self.grad_scaler.get_scale()"), "AMP022") == [("AMP022", 16)]


def test_an_update_in_a_loop_that_picks_one_optimizer_runs_once():
    # Principle 1: "update() once per optimizer" needs the update to run on two passes of the loop. A test
    # of the loop variable against a value the loop does not bind holds on one pass at most; where it is
    # one alternative (`optim_idx is None` lets every optimizer through, espnet's trainers), the second
    # pass rests on that condition: assumed, not proved.
    loop = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for iopt, optimizer in enumerate(optimizers):
        GUARD
        scaler.step(optimizer)
        scaler.update()
"""
    picked = loop.replace("GUARD", "if iopt != optim_idx:\n            continue")
    assert _found(picked, "AMP023", show_assumed=True) == []
    maybe = loop.replace("GUARD", "if optim_idx is not None and iopt != optim_idx:\n            continue")
    assert _found(maybe, "AMP023") == []
    assert _found(maybe, "AMP023", show_assumed=True) == [("AMP023", 10)]
    every = loop.replace("GUARD", "if optimizer is None:\n            continue")
    assert _found(every, "AMP023") == [("AMP023", 10)]
    pairs = loop.replace("GUARD", "if iopt == other_iopt:\n            continue")
    assert _found(pairs, "AMP023") == [("AMP023", 10)]


def test_an_unscale_in_an_optimizer_loop_at_the_boundary_meets_the_next_iteration():
    # Principle 2: the next iteration's `unscale_` raises when a path of this one skips every update; an
    # unscale_ inside `for opt in optimizers:`, inside the accumulation boundary (espnet's trainer), is
    # asked the same question as one in the iteration's own body (the inner loop's next pass is another
    # optimizer, and on every micro-batch it would be AMP041's).
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, batch in enumerate(loader):
    scaler.scale(model(batch).sum() / accum).backward()
    if (i + 1) % accum == 0:
        for optimizer in optimizers:
            scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if not torch.isfinite(norm):
            for optimizer in optimizers:
                scaler.step(optimizer)
                SKIPPED
        else:
            for optimizer in optimizers:
                scaler.step(optimizer)
            scaler.update()
        for optimizer in optimizers:
            optimizer.zero_grad()
"""
    # The path that skips the update passes the step: the iteration ends STEPPED, not UNSCALED (principle
    # 1, the protocol's end state): the next iteration's step (or unscale_) raises, and AMP021 names the
    # step that left it so; AMP024 is for an iteration that ends UNSCALED (below).
    assert _found(source.replace("SKIPPED", "pass"), "AMP024") == []
    assert _found(source.replace("SKIPPED", "pass"), "AMP021") == [("AMP021", 12)]
    assert _found(source.replace("SKIPPED", "scaler.update()"), "AMP024") == []
    assert _found(source.replace("SKIPPED", "scaler.update()"), "AMP021") == []
    ends_unscaled = source.replace("            for optimizer in optimizers:\n                scaler.step(optimizer)\n                SKIPPED\n", "            continue\n")
    assert "continue" in ends_unscaled
    assert _found(ends_unscaled, "AMP024") == [("AMP024", 8)]


def test_a_helper_handed_none_for_its_scaler_drives_no_scaler_at_that_call():
    # Principle 3: `self._grad_clipping(..., scaler=None)` on the apex path (coqui's trainer) runs none of the
    # helper's calls on that scaler (they would raise on None); the apex backward is not "unscaled while
    # None.unscale_(...)" with a safe fix writing `None.scale(...)`. The other call, handed the real
    # scaler, still makes the unscaled backward beside it a finding.
    source = '''
import torch


class Trainer:
    def _grad_clipping(self, grad_clip, optimizer, scaler):
        if grad_clip is not None and grad_clip > 0:
            if scaler:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), grad_clip)

    def optimize(self, loss, optimizer, scaler, grad_clip):
        if self.use_apex:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            self._grad_clipping(grad_clip=grad_clip, optimizer=optimizer, scaler=None)
            optimizer.step()
        else:
            loss.backward()
            self._grad_clipping(grad_clip=grad_clip, optimizer=optimizer, scaler=scaler)
            scaler.step(optimizer)
            scaler.update()
'''
    result = Checker(frozenset({"AMP011"})).check(textwrap.dedent(source), "train.py")
    assert [(d.code, d.location.row) for d in result.diagnostics] == [("AMP011", 19)]
    assert all("None." not in d.message for d in result.diagnostics)
