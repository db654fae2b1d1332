"""Issue 26, principle 4 (values followed everywhere) for the GradScaler itself: which values are scalers when no
`GradScaler(...)` is written where they are bound. A project function of another module that returns a
GradScaler construction on every path that returns (torch's, the sharded one, a vendor's `*.amp.GradScaler`)
builds a scaler; then the protocol rules apply to it as to any scaler the class builds. Each test names its
principle."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

FACTORY = """
import torch


def get_grad_scaler(kind=None, **kwargs):
    if kind == "fsdp":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(**kwargs)
    if kind == "xla":
        import torch_xla.amp as xamp

        return xamp.GradScaler(**kwargs)
    return torch.amp.GradScaler("cuda", **kwargs)
"""

NOT_A_FACTORY = """
import torch


def get_grad_scaler(enabled, **kwargs):
    if not enabled:
        return None
    return torch.amp.GradScaler("cuda", **kwargs)
"""

RUNNER = """
from pkg.utils import get_grad_scaler


class Runner:
    def __init__(self, kind, fp16):
        self.scaler = None
        if fp16:
            self.scaler = get_grad_scaler(kind)

    def backward(self, loss):
        if self.scaler is not None:
            {backward}
        else:
            loss.backward()

    def unscale_gradients(self, optimizers):
        if self.fp16:
            for opt in optimizers:
                {unscale}
"""


def _check(tmp_path, utils: str, backward: str, unscale: str):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(textwrap.dedent(utils))
    runner = RUNNER.replace("{backward}", backward).replace("{unscale}", unscale)
    (package / "runner.py").write_text(textwrap.dedent(runner))
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--output-format", "json", "pkg/runner.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return sorted((f["code"], f["location"]["row"]) for f in json.loads(result.stdout))


SCALED = "self.scaler.scale(loss).backward()"
ONE_UNSCALE = "self.scaler.unscale_(opt)"
TWO_UNSCALES = "self.scaler.unscale_(opt)\n                self.scaler.unscale_(opt)"


def test_a_project_scaler_factory_builds_a_scaler_and_a_doubled_unscale_is_found(tmp_path):
    # Principle 4 (which values are scalers) with principle 2 (per call): the factory returns a GradScaler on
    # every path, so `self.scaler.unscale_(opt)` twice in one call raises on its first call.
    assert _check(tmp_path, FACTORY, SCALED, TWO_UNSCALES) == [("AMP024", 21)]


def test_the_correct_class_with_a_factory_scaler_is_silent(tmp_path):
    assert _check(tmp_path, FACTORY, SCALED, ONE_UNSCALE) == []


def test_an_unscaled_backward_whose_gradients_the_class_scaler_unscales(tmp_path):
    # Principle 2/4: the class builds its scaler (through the factory) and unscales the gradients in a sibling
    # method; the backward on the unscaled loss under `if self.scaler is not None:` is AMP011. The `else:`
    # backward (the scaler is None there) is not: nothing of the scaler's consumes it.
    assert _check(tmp_path, FACTORY, "loss.backward()", ONE_UNSCALE) == [("AMP011", 13)]


def test_a_factory_that_may_return_something_else_is_not_a_scaler_builder(tmp_path):
    # Principle 3 (evidence): one path returns None (or anything but a GradScaler): not proved a builder,
    # so the per-call AMP011 (which needs a scaler the class builds) stays silent.
    assert _check(tmp_path, NOT_A_FACTORY, "loss.backward()", ONE_UNSCALE) == []


SUBCLASS = """
import torch
from torch.amp.grad_scaler import GradScaler, OptState


class {name}({base}):
    def unscale_and_check(self, optimizer):
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.READY:
            {unscale}
        return not sum(v.item() for v in state["found_inf_per_device"].values())
"""


def _codes(source: str):
    from amp_lint.engine.checker import Checker

    result = Checker(frozenset({"AMP024"})).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return [d.code for d in result.diagnostics]


def test_self_in_a_grad_scaler_subclass_is_a_scaler():
    # Principle 4: `self` inside a subclass of torch's GradScaler is a GradScaler; its unscale_ called twice
    # in one call raises (principle 2: per call).
    doubled = SUBCLASS.format(name="ClosureScaler", base="GradScaler", unscale="self.unscale_(optimizer)\n            self.unscale_(optimizer)")
    once = SUBCLASS.format(name="ClosureScaler", base="GradScaler", unscale="self.unscale_(optimizer)")
    other = SUBCLASS.format(name="Helper", base="object", unscale="self.unscale_(optimizer)\n            self.unscale_(optimizer)")
    assert _codes(doubled) == ["AMP024"]
    assert _codes(once) == []
    assert _codes(other) == []  # `self` of a class that is not a GradScaler: nothing known


def test_a_subclass_that_overrides_the_called_method_keeps_its_own_meaning():
    # Principle 3 (evidence): the subclass's own `unscale_` (idempotent here) is what `self.unscale_` runs.
    overriding = SUBCLASS.format(
        name="IdempotentScaler", base="GradScaler", unscale="self.unscale_(optimizer)\n            self.unscale_(optimizer)"
    ).replace(
        "    def unscale_and_check",
        "    def unscale_(self, optimizer):\n        if id(optimizer) not in self.done:\n            super().unscale_(optimizer)\n\n    def unscale_and_check",
    )
    assert _codes(overriding) == []
