"""Gradient-effect summaries of project functions (issue 26, principle 3): what a function does to the
gradients, through the calls that can be resolved, and AMP030 on a helper that reads or clips them."""

from __future__ import annotations

import textwrap

import libcst as cst

from amp_lint.analysis.builder import build_model
from amp_lint.analysis.gradient_effects import GradientEffects, effects_of
from amp_lint.engine.checker import Checker


def _model(source: str):
    return build_model(cst.parse_module(textwrap.dedent(source)))


def _scope(model, name: str):
    (scope,) = [s for s in model.scopes if s.name == name]
    return scope


def _amp030(source: str):
    result = Checker(frozenset({"AMP030"})).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.location.row, d.message) for d in result.diagnostics]


HELPERS = """
import torch

def grad_norm(model):
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.norm().item() ** 2
    return total ** 0.5

def log_norm(model):
    print(grad_norm(model))

def clip_all(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

def unscale_and_clip(scaler, opt, model):
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

def reset(opt):
    opt.zero_grad()

def mystery(model, callback):
    callback(model)

class Clipper:
    def clip(self, model):
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)

class Trainer:
    def __init__(self, norm):
        self.clipper = Clipper()
        if norm:
            self.clip_func = torch.nn.utils.clip_grad_norm_
        else:
            self.clip_func = torch.nn.utils.clip_grad_value_

    def _clip_grad(self):
        self.clip_func(self.model.parameters(), 1.0)

    def via_holder(self):
        self.clipper.clip(self.model)

    def via_getattr(self):
        getattr(self, "_clip_grad")()

    def recursive(self):
        self.recursive()

    def hook(self):
        self.on_after_backward()
"""


def test_effects_of_reads_clips_zeroes_and_scaler_transitively():
    # Principle 3: every project function's effect on gradients, through the calls that can be resolved.
    model = _model(HELPERS)
    norm = effects_of(model, _scope(model, "grad_norm"))
    assert norm.reads and not norm.clips and norm.reads_scaled_values
    logged = effects_of(model, _scope(model, "log_norm"))  # through a module function
    assert logged.reads and not logged.unknown
    clip = effects_of(model, _scope(model, "clip_all"))
    assert clip.clips and clip.reads_gradients and clip.sites
    own = effects_of(model, _scope(model, "unscale_and_clip"))
    assert own.clips and own.scaler == frozenset({"unscale_"}) and not own.reads_scaled_values
    assert effects_of(model, _scope(model, "reset")) == GradientEffects(zeroes=True)


def test_effects_follow_attributes_getattr_and_held_objects():
    # Principle 3: a literal getattr, an attribute bound to a clip function, a method of an object the class builds.
    model = _model(HELPERS)
    for name in ("Trainer._clip_grad", "Trainer.via_holder", "Trainer.via_getattr"):
        effects = effects_of(model, _scope(model, name))
        assert effects.clips and effects.reads_scaled_values, name


def test_an_unresolvable_call_is_unknown_and_recursion_ends():
    # Principle 3: a call the analysis cannot resolve may clip or log gradients: unknown, never a read.
    model = _model(HELPERS)
    assert effects_of(model, _scope(model, "mystery")).unknown
    assert not effects_of(model, _scope(model, "mystery")).reads_scaled_values
    assert not effects_of(model, _scope(model, "Trainer.recursive")).reads_gradients
    assert effects_of(model, _scope(model, "Trainer.hook")).unknown


TRAINER = """
import torch

class Trainer:
    def __init__(self, model, opt, clip_type):
        self.model = model
        self.opt = opt
        self.scaler = torch.amp.GradScaler("cuda")
        if clip_type == "norm":
            self.clip_func = torch.nn.utils.clip_grad_norm_
        else:
            self.clip_func = torch.nn.utils.clip_grad_value_

    def _clip_grad(self):
        params = [p for p in self.model.parameters() if p.grad is not None]
        self.clip_func(params, 1.0)

    def train_step(self, batch):
        loss = self.model(batch).sum()
        self.scaler.scale(loss).backward()
        {before}
        self._clip_grad()
        self.scaler.step(self.opt)
        self.scaler.update()
"""


def test_a_helper_clipping_through_a_stored_clip_function_is_amp030():
    # Principle 3: a trainer's `_clip_grad` helper (mmengine's shape) clips as `clip_grad_norm_` does.
    found = _amp030(TRAINER.format(before="pass"))
    assert len(found) == 1 and "self.clip_func(params, 1.0)" in found[0][1] and "_clip_grad" in found[0][1]
    assert _amp030(TRAINER.format(before="self.scaler.unscale_(self.opt)")) == []


def test_held_object_getattr_and_passed_in_function_are_amp030():
    # Principle 3: `self.clipper.clip(...)`, `getattr(self, "clip_gradient")()`, a function passed in.
    source = """
    import torch

    def clip_all(model):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    def step(model, x, opt, scaler, clip_fn):
        scaler.scale(model(x).sum()).backward()
        clip_fn(model)
        scaler.step(opt)
        scaler.update()

    def train(loader, model, opt):
        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            step(model, x, opt, scaler, clip_all)

    class Clipper:
        def clip(self, model):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    class T:
        def __init__(self):
            self.clipper = Clipper()
            self.scaler = torch.amp.GradScaler("cuda")

        def clip_gradient(self):
            torch.nn.utils.clip_grad_value_(self.model.parameters(), 0.5)

        def run(self, loader):
            for x in loader:
                self.scaler.scale(self.model(x).sum()).backward()
                getattr(self, "clip_gradient")()
                self.clipper.clip(self.model)
                self.scaler.step(self.opt)
                self.scaler.update()
    """
    messages = " | ".join(m for _, m in _amp030(source))
    assert "clip_fn(model)" in messages
    assert 'getattr(self, "clip_gradient")()' in messages
    assert "self.clipper.clip(self.model)" in messages


def test_helpers_that_unscale_take_the_scaler_or_cannot_be_resolved_are_silent():
    # Principle 3: stay silent when the helper may unscale, rescale its threshold, or is unknown.
    source = """
    import torch

    class Clipper:
        def __init__(self, scaler):
            self.scaler = scaler
        def clip(self, model, opt):
            self.scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    def scaled_clip(model, scaler):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 * scaler.get_scale())

    class T:
        def __init__(self):
            self.clipper = Clipper(None)
            self.scaler = torch.amp.GradScaler("cuda")
            self.clip_func = make_clipper()

        def run(self, loader):
            for x in loader:
                self.scaler.scale(self.model(x).sum()).backward()
                self.clipper.clip(self.model, self.opt)
                scaled_clip(self.model, self.scaler)
                self.clip_func(self.model.parameters())
                self.hooks.on_after_backward()
                self.scaler.step(self.opt)
                self.scaler.update()
    """
    assert _amp030(source) == []


def test_a_models_own_clip_grad_norm_method_is_amp030():
    # Principle 3: `model.clip_grad_norm_(max_norm)`, a method of the project's model class (FSDP-style),
    # clips the gradients it is given; between the scaled backward and unscale_ it reads scaled ones.
    source = """
    import torch

    class Net(torch.nn.Module):
        def clip_grad_norm_(self, max_norm):
            return torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)

    def train(loader, opt):
        model = Net()
        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            {before}
            model.clip_grad_norm_(1.0)
            scaler.step(opt)
            scaler.update()
    """
    found = _amp030(source.replace("{before}", "pass"))
    assert [row for row, _ in found] == [14] and "model.clip_grad_norm_(1.0)" in found[0][1]
    assert _amp030(source.replace("{before}", "scaler.unscale_(opt)")) == []


def test_a_base_class_helper_of_another_module_clipping_through_an_attribute(tmp_path):
    # Principle 3 across modules (mmengine's AmpOptimWrapper): `step()` calls the base class's
    # `_clip_grad()`, which clips through `self.clip_func` bound to a torch clip in the base's __init__;
    # the class builds its scaler through a local alias and scales in its sibling `backward()`.
    import json
    import subprocess
    import sys

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text(
        textwrap.dedent(
            """
            import torch

            class OptimWrapper:
                def __init__(self, optimizer, clip_type="norm"):
                    self.optimizer = optimizer
                    if clip_type == "norm":
                        self.clip_func = torch.nn.utils.clip_grad_norm_
                    else:
                        self.clip_func = torch.nn.utils.clip_grad_value_

                def _clip_grad(self):
                    params = []
                    for group in self.optimizer.param_groups:
                        params.extend(group["params"])
                    self.clip_func(params, 1.0)
            """
        )
    )
    amp = textwrap.dedent(
        """
        import torch
        from torch.amp import GradScaler
        from pkg.base import OptimWrapper

        class AmpOptimWrapper(OptimWrapper):
            def __init__(self, optimizer, use_fsdp=False):
                super().__init__(optimizer)
                if use_fsdp:
                    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
                    scaler_type = ShardedGradScaler
                else:
                    scaler_type = GradScaler
                self.loss_scaler = scaler_type()

            def backward(self, loss):
                self.loss_scaler.scale(loss).backward()

            def step(self):
                {unscale}
                self._clip_grad()
                self.loss_scaler.step(self.optimizer)
                self.loss_scaler.update()
        """
    )

    def run(unscale: str):
        (package / "amp.py").write_text(amp.replace("{unscale}", unscale))
        result = subprocess.run(
            [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--select", "AMP030", "--output-format", "json", "pkg/amp.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in result.stderr, result.stderr
        return [(f["code"], f["location"]["row"]) for f in json.loads(result.stdout)]

    assert run("pass") == [("AMP030", 21)]
    assert run("self.loss_scaler.unscale_(self.optimizer)") == []


def test_setting_a_gradient_to_none_reads_no_value():
    # Principle 3 (what a function does to gradients): `p.grad = None` writes, it reads no scaled value.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        for p in model.parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                p.grad = None
        scaler.step(optimizer)
        scaler.update()
    """
    assert _amp030(source) == []
    assert len(_amp030(source.replace("p.grad = None", "print(p.grad.norm())"))) == 1
