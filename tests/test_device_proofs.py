"""Issue 26, principle 4 (device strings): `str(X)` passed to autocast is 'cuda:0' for an indexed device. It is
reported by default only where the code proves that X is a torch.device, not a string like "cuda" (for
which `str()` is harmless). What proves it, each a test: the code reads `X.type` / `X.index` (a str has
neither: duck typing) on the same value (a local in its function, `self.x` in its class, an imported
module's attribute in the file), or X is a property declared `-> torch.device` in the class or in a project
base class of another module. Where nothing proves it, the finding stays at medium confidence."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from amp_lint.engine.checker import Checker


def _findings(source: str, show_assumed: bool = False):
    options = {"show_assumed": True} if show_assumed else {}
    result = Checker(frozenset({"AMP075"}), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [(d.code, d.confidence.value) for d in result.diagnostics]


def test_a_local_whose_type_is_read_is_a_device():
    # Principle 4, duck typing: `v.device.type` is read in the function, so `v.device` is a torch.device.
    source = """
    import torch

    def attend(q, k, v, fn):
        if v.device.type != "meta":
            with torch.autocast(device_type=str(v.device), enabled=False):
                return fn(q, k, v)
    """
    assert _findings(source) == [("AMP075", "high")]


def test_an_attribute_whose_type_is_read_in_another_method_is_a_device():
    # Principle 4, duck typing across the methods of one class: `self.runner.device.type` in `generate`.
    source = """
    import torch

    class Trainer:
        def generate(self, model, x):
            with torch.autocast(self.runner.device.type):
                return model.generate(x)

        def evaluate(self, model, x):
            with torch.autocast(str(self.runner.device)):
                return model(x)
    """
    assert _findings(source) == [("AMP075", "high")]


def test_an_imported_modules_device_whose_type_is_read_is_a_device():
    # Principle 4: an imported module's attribute is one object file-wide; the scaler's `enabled=` reads
    # its `.type`, so `str(lib.device)` is str() of a torch.device.
    source = """
    import torch
    import mylib

    def train(model, loader, opt, use_amp):
        scaler = torch.amp.GradScaler(enabled=use_amp and mylib.device.type != "cpu")
        for x in loader:
            with torch.autocast(device_type=str(mylib.device), enabled=use_amp):
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    """
    assert _findings(source) == [("AMP075", "high")]


def test_a_property_declared_to_return_a_device_is_a_device():
    # Principle 4: `@property def device(self) -> torch.device` (sentence-transformers' models).
    source = """
    import torch
    from torch import device

    class Encoder(torch.nn.Module):
        @property
        def device(self) -> device:
            return next(self.parameters()).device

        def fit(self, x):
            with torch.autocast(device_type=str(self.device)):
                return self(x)
    """
    assert _findings(source) == [("AMP075", "high")]


def test_a_property_declared_in_a_project_base_class_of_another_module(tmp_path):
    # Principle 4 through the project model: the base class (another module) declares `-> torch.device`.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Utils:
                @property
                def device(self) -> torch.device:
                    return next(self.parameters()).device

            class Pretrained(torch.nn.Module, Utils):
                pass
            """
        )
    )
    (package / "model.py").write_text(
        textwrap.dedent(
            """
            import torch
            from pkg.base import Pretrained

            class Mid(Pretrained):
                pass

            class Folding(Mid):
                def hidden(self, x):
                    with torch.autocast(device_type=str(self.device), dtype=torch.bfloat16):
                        return self.lm(x)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--select", "AMP075", "--output-format", "json", "pkg/model.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert [(f["code"], f["location"]["row"]) for f in json.loads(result.stdout)] == [("AMP075", 10)]


def test_nothing_proves_a_device_stays_medium():
    # Principle 4, evidence rule: `self.device` could be the string "cuda" (str() harmless): medium only.
    source = """
    import torch

    class Trainer:
        def step(self, model, x):
            with torch.autocast(device_type=str(self.device)):
                return model(x)
    """
    assert _findings(source) == []
    assert _findings(source, show_assumed=True) == [("AMP075", "medium")]


def test_what_does_not_prove_a_device():
    # Principle 4, the limits of duck typing: a called `.type(...)` is a tensor's method; a property
    # declared `-> str`, or one with a setter, is not a declared device; a string definition of the same
    # name is a string.
    called = """
    import torch

    class Trainer:
        def cast(self, x):
            return self.device.type(torch.float16)

        def step(self, model, x):
            with torch.autocast(device_type=str(self.device)):
                return model(x)
    """
    declared_str = """
    import torch

    class Trainer:
        @property
        def device(self) -> str:
            return "cuda"

        def step(self, model, x):
            with torch.autocast(device_type=str(self.device)):
                return model(x)
    """
    with_setter = """
    import torch

    class Trainer:
        @property
        def device(self) -> torch.device:
            return self._device

        @device.setter
        def device(self, value):
            self._device = value

        def step(self, model, x):
            with torch.autocast(device_type=str(self.device)):
                return model(x)
    """
    for source in (called, declared_str, with_setter):
        assert _findings(source) == [], source
