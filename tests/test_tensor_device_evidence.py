"""Issue 26, principle 4 (device strings: "`str(t.device)` passed to autocast is wrong whenever the code runs on
CUDA: proved, not assumed"). `X.device` is a torch.device, indexed on CUDA, when the code shows that `X` is a
tensor: a tensor-only use in the function, `X` passed as the first argument of a torch operator (not one that
takes anything: `torch.device`, `torch.save`, `torch.tensor`), or passed to a function of the same file that
shows its parameter a tensor. A name bound once to such a `.device` is proved the same. Where nothing shows
it (`cfg.device`, often a string), the finding stays at medium confidence."""

from __future__ import annotations

import textwrap

from amp_lint.engine.checker import Checker


def _findings(source: str, show_assumed: bool = False):
    options = {"show_assumed": True} if show_assumed else {}
    result = Checker(frozenset({"AMP075"}), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.code, d.confidence.value) for d in result.diagnostics]


def test_passed_to_a_torch_operator_is_a_tensor():
    source = """
    import torch

    class Fold(torch.nn.Module):
        def forward(self, w):
            with torch.autocast(device_type=str(w.device), enabled=False):
                return torch.addmm(w, self.a, self.b)
    """
    assert _findings(source) == [("AMP075", "high")]


def test_passed_to_a_functional_operator_through_an_alias_is_a_tensor():
    source = """
    import torch
    import torch.nn.functional as F

    def norm(x, groups):
        dev = x.device
        with torch.autocast(device_type=str(dev), enabled=False):
            return F.group_norm(x, groups)
    """
    assert _findings(source) == [("AMP075", "high")]


def test_passed_to_a_helper_of_the_file_that_uses_it_as_a_tensor():
    # the helper's parameter is cast with `.to(...)`: a tensor; the name bound to `x.device` is then proved
    source = """
    import torch

    def _downcast(t):
        return t.to(dtype=torch.float16)

    class LowPrecisionNorm(torch.nn.LayerNorm):
        def forward(self, x):
            module_device = x.device
            y = _downcast(x)
            with torch.autocast(enabled=False, device_type=str(module_device)):
                return self.inner(y)
    """
    assert _findings(source) == [("AMP075", "high")]


def test_a_config_device_stays_assumed():
    # `cfg` is passed to nothing that needs a tensor: its `.device` may be the string "cuda"
    source = """
    import torch

    def run(cfg, model, x):
        with torch.autocast(device_type=str(cfg.device)):
            return model(x)
    """
    assert _findings(source) == []
    assert _findings(source, show_assumed=True) == [("AMP075", "medium")]


def test_passed_to_a_torch_function_that_takes_anything_proves_nothing():
    # `torch.save(obj, ...)` takes any object; a numpy array (whose `.device` is the string "cpu") goes to
    # `torch.from_numpy`: neither shows a tensor
    source = """
    import torch

    def run(state, model, x, path):
        torch.save(state, path)
        with torch.autocast(device_type=str(state.device)):
            return model(x)

    def run2(arr, model):
        t = torch.from_numpy(arr)
        with torch.autocast(device_type=str(arr.device)):
            return model(t)
    """
    assert _findings(source) == []
    assert _findings(source, show_assumed=True) == [("AMP075", "medium"), ("AMP075", "medium")]
