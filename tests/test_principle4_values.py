"""Issue 26, principle 4: values the rules care about, followed everywhere they go (scaled tensors
through containers and higher-order calls, thresholds that carry the scale, exceptions as paths, device
strings, deprecated names wherever referenced). One test per bullet; each names its principle."""

from __future__ import annotations

import textwrap

import pytest

from amp_lint.engine.checker import Checker


def _codes(source: str, *codes: str, show_assumed: bool = False):
    options = {"show_assumed": True} if show_assumed else {}
    result = Checker(frozenset(codes), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return sorted(d.code for d in result.diagnostics)


CLIP_AFTER = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    outs = model(x)
    {backward}
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""

SCALED_CONTAINERS = {
    "comprehension": "scaled = [scaler.scale(o) for o in outs]\n    torch.autograd.backward(scaled)",
    "map": "scaled = list(map(scaler.scale, outs))\n    torch.autograd.backward(scaled)",
    "tuple": "a, b = scaler.scale(outs[0]), scaler.scale(outs[1])\n    a.backward()",
    "dict": "d = {'loss': scaler.scale(outs.sum())}\n    d['loss'].backward()",
}


@pytest.mark.parametrize("name", sorted(SCALED_CONTAINERS))
def test_scaled_tensors_through_containers_and_higher_order_calls(name):
    # Principle 4: a tensor scaled inside a list, map, tuple or dict is still scaled where it is backpropagated:
    # the clip after it reads scaled gradients (AMP030), and the backward is not an unscaled one (AMP011).
    source = CLIP_AFTER.format(backward=SCALED_CONTAINERS[name])
    assert _codes(source, "AMP030", "AMP011") == ["AMP030"]


def test_a_scaled_tensor_bound_on_one_branch():
    # Principle 4: `l` is scaled on the amp branch only; the clip after its backward reads scaled
    # gradients on that path.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).sum()
        if use_amp:
            l = scaler.scale(loss)
        else:
            l = loss
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
    assert _codes(source, "AMP030", "AMP011", show_assumed=True) == ["AMP030"]


def test_thresholds_that_carry_the_scale_are_correct():
    # Principle 4: scaled gradients clipped against a scaled threshold; autograd.grad results divided
    # by the scale before the penalty: both correct (no AMP030, no AMP032).
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).sum()
        grads = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
        inv_scale = 1.0 / scaler.get_scale()
        grads = [g * inv_scale for g in grads]
        penalty = sum(g.pow(2).sum() for g in grads)
        loss = loss + penalty
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 * scaler.get_scale())
        scaler.step(optimizer)
        scaler.update()
    """
    assert _codes(source, "AMP030", "AMP032") == []


def test_gradients_divided_by_the_scale_inline_are_correct():
    # Principle 4: `g / scaler.get_scale()` on each autograd.grad result.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        loss = model(x).sum()
        grads = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
        grads = [g / scaler.get_scale() for g in grads]
        penalty = sum(g.pow(2).sum() for g in grads)
        scaler.scale(loss + penalty).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert _codes(source, "AMP032") == []


def test_exceptions_are_paths_error_if_nonfinite_in_try():
    # Principle 4: the raise of `error_if_nonfinite=True` is the skip branch; update after both: correct.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(optimizer)
        try:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            scaler.step(optimizer)
        except RuntimeError:
            pass
        scaler.update()
        optimizer.zero_grad()
    """
    assert _codes(source, "AMP031", "AMP021", "AMP022", "AMP024", "AMP043", show_assumed=True) == []


def test_zero_grad_then_return_on_a_skip_branch_never_reaches_the_step():
    # Principle 4: `zero_grad(); return` on the skip branch: the step is not after it on any path.
    source = """
    import torch
    class Trainer:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")

        def train_step(self, batch):
            self.scaler.scale(self.model(batch).sum()).backward()
            self.scaler.unscale_(self.opt)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            if not torch.isfinite(norm):
                self.opt.zero_grad()
                self.scaler.update()
                return
            self.scaler.step(self.opt)
            self.scaler.update()
            self.opt.zero_grad()
    """
    assert _codes(source, "AMP043", show_assumed=True) == []


@pytest.mark.parametrize("device", ['str(x.device)', 'f"cuda:{rank}"'])
def test_device_strings_with_an_index_are_proved(device):
    # Principle 4: `str(t.device)` of a CUDA tensor and `f"cuda:{rank}"` carry an index: reported by default.
    source = f"""
    import torch
    def step(model, x, rank):
        x = x.float()
        with torch.autocast({device}, dtype=torch.float16):
            return model(x)
    """
    assert _codes(source, "AMP075") == ["AMP075"]


def test_a_device_built_from_index_free_literals_is_fine():
    # Principle 4: `torch.device("cuda" if ... else "cpu")` never carries an index.
    source = """
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    def step(model, x):
        with torch.autocast(str(device)):
            return model(x)
    """
    assert _codes(source, "AMP075") == []


DEPRECATED_REFERENCES = {
    "base class": """
        import torch
        class S(torch.cuda.amp.GradScaler):
            def __init__(self):
                super().__init__()
    """,
    "uncalled factory": """
        from contextlib import nullcontext
        from torch.cuda import amp
        ctx = amp.autocast if fp16 else nullcontext
        with ctx():
            out = model(x)
    """,
    "alias": """
        import torch
        cuda_autocast = torch.cuda.amp.autocast
        with cuda_autocast():
            out = model(x)
    """,
    "import alias": """
        from torch.cuda.amp import autocast as ac
        with ac():
            out = model(x)
    """,
    "bare decorator": """
        import torch
        @torch.cuda.amp.custom_fwd
        def forward(ctx, x):
            return x
    """,
}


@pytest.mark.parametrize("name", sorted(DEPRECATED_REFERENCES))
def test_deprecated_names_wherever_referenced(name):
    # Principle 4: a deprecated name is deprecated where it is referenced, not only where it is called.
    codes = _codes(DEPRECATED_REFERENCES[name], "AMP070", "AMP071", "AMP072", "AMP073", "AMP074", "AMP079")
    assert codes, name


WRAPPER = """
import torch

def autocast(enabled, device="cuda"):
    if hasattr(torch, "amp"):
        return torch.amp.autocast(device, enabled=enabled)
    return torch.cuda.amp.autocast(enabled)

def train(model, loader, opt, amp):
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    for x in loader:
        with autocast(amp):
            loss = model(x).sum()
            {inside}
        {after}
        scaler.step(opt)
        scaler.update()
"""


def test_a_projects_own_autocast_factory_is_an_autocast():
    # Principle 4: a function of the project returning `torch.amp.autocast(...)` is an autocast: the
    # backward inside the block it opens is AMP001; after the block it is fine.
    inside = WRAPPER.format(inside="scaler.scale(loss).backward()", after="pass")
    assert _codes(inside, "AMP001") == ["AMP001"]
    after = WRAPPER.format(inside="pass", after="scaler.scale(loss).backward()")
    assert _codes(after, "AMP001") == []


def test_a_function_that_only_sometimes_returns_an_autocast_is_not_one():
    # Principle 4 (and stay silent when unsure): a factory returning nullcontext on one path is unknown.
    source = """
    import contextlib
    import torch

    def maybe_autocast(enabled):
        if enabled:
            return torch.autocast("cuda")
        return contextlib.nullcontext()

    def train(model, loader, opt, scaler):
        for x in loader:
            with maybe_autocast(True):
                loss = model(x).sum()
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    """
    assert _codes(source, "AMP001") == []


def test_an_autocast_factory_of_another_project_module(tmp_path):
    # Principle 4: the factory lives in another module of the project (ultralytics' `utils.autocast`),
    # one path returning a vendor's `torch_npu.npu.amp.autocast`: still an autocast where it is entered.
    import json
    import subprocess
    import sys

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(
        textwrap.dedent(
            """
            import torch

            def autocast(enabled: bool, device: str = "cuda"):
                if device == "npu":
                    import torch_npu
                    return torch_npu.npu.amp.autocast(enabled=enabled)
                return torch.amp.autocast(device, enabled=enabled)
            """
        )
    )
    (package / "train.py").write_text(
        textwrap.dedent(
            """
            import torch
            from pkg.utils import autocast

            def train(model, loader, opt, amp):
                scaler = torch.amp.GradScaler("cuda", enabled=amp)
                for x in loader:
                    with autocast(amp):
                        loss = model(x).sum()
                        scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--select", "AMP001", "--output-format", "json", "pkg/train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert [(f["code"], f["location"]["row"]) for f in json.loads(result.stdout)] == [("AMP001", 10)]


def test_a_scaler_stored_on_another_object_by_tuple_assignment_is_not_claimed_never_stepped():
    # Principle 4 (tuple targets bound element-wise) with principle 3: fastai's callback stores the scaler
    # on the learner (`self.learn.scaler`) and steps it through a delegating `self.scaler`: whatever holds
    # the learner may step it, so "never stepped" is not proved.
    source = """
    import torch
    from torch.amp import GradScaler, autocast

    class MixedPrecision:
        def before_fit(self):
            self.autocast, self.learn.scaler, self.scales = autocast("cuda"), GradScaler("cuda"), []

        def before_step(self):
            self.scaler.step(self)

        def after_step(self):
            self.learn.scaler.update()
    """
    assert _codes(source, "AMP022", show_assumed=True) == []
