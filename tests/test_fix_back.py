"""Issue 27, the injection benchmark's fix-back: the fixes that restore what an injected bug broke, on code
of this file's own (each shape comes from a real project's mutant that was not restored)."""

from __future__ import annotations

import ast
import textwrap

from amp_lint.engine.checker import Checker
from amp_lint.fixes.verify_fix import hazards


def fixed(code: str, *codes: str, unsafe: bool = False) -> str:
    result = Checker(frozenset(codes), fix=True, unsafe_fixes=unsafe).check(textwrap.dedent(code), "t.py")
    assert not result.errors, [e.message for e in result.errors]
    assert result.fixed_source is not None
    return result.fixed_source


def same(a: str, b: str) -> bool:
    return ast.dump(ast.parse(textwrap.dedent(a))) == ast.dump(ast.parse(textwrap.dedent(b)))


TRAINER = """\
import torch

class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def train(self, loader):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = self.model(x).sub(y).pow(2).mean()
            self.scaler.scale(loss).backward()
            self.apply_gradients()

    def apply_gradients(self):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
"""


def test_a_helper_that_unscales_twice_loses_the_second():
    """A method of the file unscales twice in a row, whoever calls it: removing the second is right for every
    caller (ultralytics' `optimizer_step`, super-gradients, allennlp's `rescale_gradients`)."""
    doubled = TRAINER.replace(
        "        self.scaler.unscale_(self.optimizer)\n", "        self.scaler.unscale_(self.optimizer)\n" * 2
    )
    assert same(fixed(doubled, "AMP024"), TRAINER)


def test_a_helper_that_clips_and_steps_gets_the_unscale_before_its_clip():
    """The helper clips and steps itself: the unscale_ goes before its clip, not before the caller's call."""
    dropped = TRAINER.replace("        self.scaler.unscale_(self.optimizer)\n", "")
    assert same(fixed(dropped, "AMP030"), TRAINER)


def test_a_clip_reached_through_a_helper_gets_the_unscale_before_the_call():
    code = """\
    import torch

    def clip(parameters, value):
        torch.nn.utils.clip_grad_norm_(parameters, value)

    def train(model, optimizer, loader, scaler):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).mean()
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            clip(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
    """
    code = textwrap.dedent(code)
    dropped = code.replace("        scaler.unscale_(optimizer)\n", "", 1)
    assert dropped != code
    assert same(fixed(dropped, "AMP030"), code)


def test_an_unscale_needs_no_guard_where_the_scaler_steps_on_every_path_through_the_clip():
    """open_clip: the backward is in a helper that guards it (`if scaler is not None`), the clip and the step
    are under the caller's own `if scaler is not None:`: the step calls the scaler whenever the clip runs."""
    code = """\
    import torch

    def backward(loss, scaler):
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()

    def train(model, optimizer, loader, scaler, max_norm):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).mean()
            backward(loss, scaler)
            if scaler is not None:
                if max_norm is not None:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
    """
    code = textwrap.dedent(code)
    dropped = code.replace("            scaler.unscale_(optimizer)\n", "")
    assert dropped != code
    assert same(fixed(dropped, "AMP030"), code)


def test_a_guarded_backward_moves_out_of_autocast_with_its_if():
    """ignite: `if scaler: scaler.scale(loss).backward() ... else: loss.backward() ...` written inside the
    autocast block: the `if`, whose branches open with the backward, moves out whole."""
    code = """\
    import torch

    def update(model, optimizer, scaler, x, y, loss_fn):
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.item()
    """
    lines = textwrap.dedent(code).splitlines(True)
    start = next(i for i, l in enumerate(lines) if l.startswith("    if scaler:"))
    end = next(i for i, l in enumerate(lines) if l.startswith("    return"))
    inside = lines[:start] + ["    " + l for l in lines[start:end]] + lines[end:]
    assert same(fixed("".join(inside), "AMP001"), code)
    # Forward work opening a branch would leave autocast with the `if`: not offered.
    forward = "".join(inside).replace("            scaler.scale(loss)", "            loss = loss * 2\n            scaler.scale(loss)")
    result = Checker(frozenset({"AMP001"}), fix=True).check(forward, "t.py")
    assert result.fixed_source is None


def test_the_fix_check_forgets_what_a_protocol_helper_may_have_done():
    """`unscale_` then `self.apply_gradients()` (a method of the file that steps and updates) on every
    iteration: no double unscale_ is seen; a call handed the scaler is as opaque."""
    code = TRAINER.replace(
        "            self.apply_gradients()\n",
        "            self.scaler.unscale_(self.optimizer)\n            self.apply_gradients()\n",
    ).replace("        self.scaler.unscale_(self.optimizer)\n        torch.nn", "        torch.nn")
    assert not [h for h in hazards(code) if h.kind == "unscale-twice"]
    handed = "def f(scaler, opt, loader, finish):\n    for x in loader:\n        scaler.unscale_(opt)\n        finish(scaler, opt)\n"
    assert not hazards(handed)
    plain = "def f(scaler, opt, loader, log):\n    for x in loader:\n        scaler.unscale_(opt)\n        log(opt)\n"
    assert [h.kind for h in hazards(plain)] == ["unscale-twice"]


def test_a_helper_that_steps_directly_and_updates_steps_through_the_scaler():
    """ultralytics' `optimizer_step`: the helper unscales, clips, steps and updates itself; its direct
    `optimizer.step()` is wrong for every caller and is stepped through the scaler there."""
    direct = TRAINER.replace("self.scaler.step(self.optimizer)", "self.optimizer.step()")
    # After an explicit unscale_ a direct step may be deliberate (issue 46): the rewrite is an unsafe fix.
    assert Checker(frozenset({"AMP020"}), fix=True).check(direct, "t.py").fixed_source is None
    assert same(fixed(direct, "AMP020", unsafe=True), TRAINER)


def test_the_update_goes_after_the_if_whose_branches_each_step():
    """open_clip: `if horovod: ... step() else: ... step()` then `update()`: the update follows the `if`,
    not one branch's step (the other branch would then step twice without an update)."""
    code = textwrap.dedent(
        """\
        import torch

        def train(model, optimizer, loader, scaler, distributed):
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                scaler.scale(loss).backward()
                if distributed:
                    optimizer.synchronize()
                    with optimizer.skip_synchronize():
                        scaler.step(optimizer)
                else:
                    scaler.step(optimizer)
                scaler.update()
        """
    )
    dropped = code.replace("        scaler.update()\n", "")
    assert same(fixed(dropped, "AMP021"), code)
    # A way through the `if` with no step (`elif` and no `else`): an update after it would run without a
    # step ("No inf checks were recorded"); no fix is offered.
    no_else = dropped.replace("        else:\n", "        elif x is not None:\n")
    assert no_else != dropped
    result = Checker(frozenset({"AMP021"}), fix=True).check(no_else, "t.py")
    assert [d.code for d in result.diagnostics] == ["AMP021"] and result.diagnostics[0].fix is None
    assert result.fixed_source is None


def test_a_method_named_like_a_protocol_helper_on_another_object_stays_plain():
    """Only `helper()` / `self.helper()` stand for the file's own function: `optimizer.step()` is not the
    file's `step` method that drives the scaler."""
    code = textwrap.dedent(
        """\
        class Trainer:
            def step(self):
                self.scaler.step(self.optimizer)
                self.scaler.update()

            def train(self, loader, optimizer):
                for x in loader:
                    self.scaler.unscale_(optimizer)
                    optimizer.step()
        """
    )
    assert [h.kind for h in hazards(code)] == ["unscale-twice"]
    assert not hazards(code.replace("optimizer.step()", "self.step()"))


def test_a_direct_step_after_a_flagged_unscale_goes_through_the_scaler():
    """A precision plugin whose `scaler.step(optimizer, ...)` became `optimizer.step(...)`: only the flagged
    unscale_ records inf checks before the update. The step goes through the scaler (an unsafe fix: after an
    explicit unscale_ a direct step may be deliberate, issue 46); moving the update next to the unscale_ would leave the
    optimizer stepping on inf gradients."""
    code = textwrap.dedent(
        """\
        import torch

        class Plugin:
            def __init__(self):
                self.scaler = torch.amp.GradScaler("cuda")

            def optimizer_step(self, optimizer, closure, skip, clip):
                closure_result = closure()
                if clip and not skip:
                    self.scaler.unscale_(optimizer)
                if not skip:
                    out = self.scaler.step(optimizer)
                    self.scaler.update()
                    return out
                return closure_result
        """
    )
    direct = code.replace("self.scaler.step(optimizer)", "optimizer.step()")
    assert same(fixed(direct, "AMP020", unsafe=True), code)  # unsafe after an explicit unscale_ (issue 46)
    # AMP022's update without inf checks needs `clip` false (a parameter, not a varying test, once `clip and
    # not skip` is read operand by operand): assumed, so its fix, the same step through the scaler (never a
    # move of the update), is unsafe.
    (finding,) = Checker(frozenset({"AMP022"}), show_assumed=True).check(direct, "t.py").diagnostics
    assert finding.fix is not None and finding.fix.message.startswith("Step through")
    assert same(Checker(frozenset({"AMP022"}), fix=True, unsafe_fixes=True, show_assumed=True).check(direct, "t.py").fixed_source, code)
    with_kwargs = code.replace("clip):", "clip, **kwargs):").replace("step(optimizer)", "step(optimizer, **kwargs)")
    direct = with_kwargs.replace("self.scaler.step(optimizer, **kwargs)", "optimizer.step(**kwargs)")
    (finding,) = Checker(frozenset({"AMP020"})).check(direct, "t.py").diagnostics
    assert finding.fix is not None and finding.fix.applicability.value == "unsafe"
    result = Checker(frozenset({"AMP020"}), fix=True, unsafe_fixes=True).check(direct, "t.py")
    assert same(result.fixed_source, with_kwargs)


def test_a_per_call_step_passes_its_callers_arguments_through_the_scaler():
    """Principle: `GradScaler.step(optimizer, *args, **kwargs)` forwards its arguments to `optimizer.step`
    (torch/amp/grad_scaler.py) and refuses only a `closure` keyword. A per-call step method whose
    `scaler.step(optimizer, **kwargs)` / `(optimizer, closure)` became `optimizer.step(...)` (lightning's and
    mmengine's precision plugins, accelerate's optimizer) steps through the scaler with the same arguments:
    unsafe, as they may carry a closure; a `closure=` keyword or a closure built here gets no fix (AMP025)."""
    code = textwrap.dedent(
        """\
        import torch

        class Precision:
            def __init__(self):
                self.scaler = torch.amp.GradScaler("cuda")

            def backward(self, loss):
                self.scaler.scale(loss).backward()

            def optimizer_step(self, optimizer, **kwargs):
                out = self.scaler.step(optimizer, **kwargs)
                self.scaler.update()
                return out

            def wrapped_step(self, optimizer, closure=None):
                self.scaler.step(optimizer, closure)
                self.scaler.update()
        """
    )
    for original, direct in (
        ("self.scaler.step(optimizer, **kwargs)", "optimizer.step(**kwargs)"),
        ("self.scaler.step(optimizer, closure)", "optimizer.step(closure)"),
    ):
        mutant = code.replace(original, direct)
        (finding,) = Checker(frozenset({"AMP020"})).check(mutant, "t.py").diagnostics
        assert finding.fix is not None and finding.fix.applicability.value == "unsafe", finding.message
        assert Checker(frozenset({"AMP020"}), fix=True).check(mutant, "t.py").fixed_source in (None, mutant)
        result = Checker(frozenset({"AMP020"}), fix=True, unsafe_fixes=True).check(mutant, "t.py")
        assert same(result.fixed_source, code)
    # A closure keyword (GradScaler raises on it) or a closure made here, not handed in: no fix.
    keyword = code.replace("self.scaler.step(optimizer, closure)", "optimizer.step(closure=closure)")
    local = code.replace("self.scaler.step(optimizer, closure)", "closure = lambda: None\n        optimizer.step(closure)")
    for mutant in (keyword, local):
        findings = Checker(frozenset({"AMP020"})).check(mutant, "t.py").diagnostics
        assert findings and all(f.fix is None for f in findings if "closure" in f.message)


def test_a_per_call_clip_gets_its_unscale_where_the_scaler_steps_on_every_path_through_it():
    """Principle: where `scaler.step` runs on every path through the clip, the scaler is called there anyway,
    so an `unscale_` before the clip needs no guard, and the backward's guard (in a sibling method, not known
    here: colbert's and mmengine's `backward()` / `step()` pairs) does not matter."""
    code = textwrap.dedent(
        """\
        import torch

        class MixedPrecision:
            def __init__(self, enabled):
                self.enabled = enabled
                if enabled:
                    self.scaler = torch.amp.GradScaler("cuda")

            def backward(self, loss):
                if self.enabled:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()

            def step(self, model, optimizer):
                if self.enabled:
                    self.scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    self.scaler.step(optimizer)
                    self.scaler.update()
                else:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                optimizer.zero_grad()
        """
    )
    dropped = code.replace("            self.scaler.unscale_(optimizer)\n", "")
    assert same(fixed(dropped, "AMP030"), code)


def test_a_helper_handed_the_scaler_scales_its_own_backward():
    """Principle: a helper that takes the scaler and backpropagates on the branch where it holds one
    (`if scaler is not None:`) means the protocol for every caller: its unscaled backward there scales with
    its own parameter (open_clip's `backward(total_loss, scaler)`), whatever the caller calls the scaler.
    Without that branch the helper may serve fp32 callers too: no fix."""
    code = textwrap.dedent(
        """\
        import torch

        def backward(total_loss, scaler):
            if scaler is not None:
                scaler.scale(total_loss).backward()
            else:
                total_loss.backward()

        def train(model, loader, optimizer, grad_scaler):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x).sub(y).pow(2).mean()
                backward(loss, grad_scaler)
                grad_scaler.step(optimizer)
                grad_scaler.update()
                optimizer.zero_grad()
        """
    )
    unscaled = code.replace("scaler.scale(total_loss).backward()", "total_loss.backward()")
    assert same(fixed(unscaled, "AMP011"), code)
    unguarded = unscaled.replace("    if scaler is not None:\n        total_loss.backward()\n    else:\n        total_loss.backward()\n", "    total_loss.backward()\n")
    assert "if scaler" not in unguarded
    findings = Checker(frozenset({"AMP011"})).check(unguarded, "t.py").diagnostics
    assert findings and all(f.fix is None for f in findings)
