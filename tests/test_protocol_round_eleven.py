"""Issue 26, as met on held-out code in round eleven: the scaler reached through `super()` in a GradScaler
subclass (also one defined inside a function), a helper that unscales and then steps directly with the
update left to its caller, and a parameter declared a tensor. The shapes are our own.
"""

from __future__ import annotations

import libcst as cst

from amp_lint.analysis.builder import build_model
from tests.test_protocol_per_call import _found

# Principle 1: `super().unscale_(opt)` in a GradScaler subclass runs torch's unscale_ on the instance itself;
# twice, with no update between, raises "unscale_() has already been called on this optimizer".
_SUBCLASS = """
import torch


def build(enabled):
    try:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    except ImportError:
        return None

    class RankScaler(ShardedGradScaler):
        def unscale_(self, optimizer):
            super().unscale_(optimizer)
{again}            if not self.is_enabled():
                return
            self.found = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]

    return RankScaler(enabled=enabled)
"""


def test_super_in_a_scaler_subclass_is_the_scaler_itself():
    doubled = _SUBCLASS.replace("{again}", "            super().unscale_(optimizer)\n")
    assert _found(doubled, "AMP024") == [("AMP024", 14)]
    # One unscale_ in an override of unscale_ is the override's whole job: nothing to report.
    assert _found(_SUBCLASS.replace("{again}", ""), *_ORDER_RULES, show_assumed=True) == []


def test_super_with_explicit_arguments_is_the_instance_too():
    source = """
import torch

class Checked(torch.amp.GradScaler):
    def step(self, optimizer, *args, **kwargs):
        super(Checked, self).unscale_(optimizer)
        super(Checked, self).unscale_(optimizer)
        return super(Checked, self).step(optimizer, *args, **kwargs)
"""
    assert _found(source, "AMP024") == [("AMP024", 7)]


def test_a_method_of_a_class_defined_in_a_function_belongs_to_that_class():
    module = build_model(cst.parse_module(_SUBCLASS.replace("{again}", "")))
    methods = {s.name: s.class_name for s in module.scopes if s.is_function}
    assert methods == {"build": None, "RankScaler.unscale_": "RankScaler"}
    # A closure inside a method keeps the method's class.
    closure = build_model(cst.parse_module("class A:\n    def m(self):\n        def inner():\n            return self\n"))
    assert {s.name: s.class_name for s in closure.scopes if s.is_function}["A.inner"] == "A"


# Principles 2 and 3: a helper that unscales (so its gradients arrive scaled), clips and steps directly, and
# leaves the update to its caller. Whatever the caller does, the step already ran with no inf check.
_HELPER = """
import torch


class Optimizers:
    def __init__(self, groups):
        self.optimizers = {name: torch.optim.AdamW(params) for name, params in groups.items()}
        self.groups = groups

    def step_all(self, grad_scaler, max_norm=None):
        for name, optimizer in self.optimizers.items():
            if max_norm is not None:
                grad_scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(self.groups[name], max_norm)
            {step}
"""


def test_a_helper_that_unscales_then_steps_directly_skips_the_inf_check():
    assert _found(_HELPER.replace("{step}", "optimizer.step()"), *_ORDER_RULES) == [("AMP020", 15)]
    # Through the scaler: the helper's half of the protocol, the caller updates.
    assert _found(_HELPER.replace("{step}", "grad_scaler.step(optimizer)"), *_ORDER_RULES, show_assumed=True) == []
    # A manual inf check of its own guards the direct step.
    guarded = _HELPER.replace(
        "{step}",
        "norm = torch.nn.utils.clip_grad_norm_(self.groups[name], 1e9)\n"
        "            if torch.isfinite(norm):\n"
        "                optimizer.step()",
    )
    assert _found(guarded, "AMP020", show_assumed=True) == []


def test_the_helpers_direct_step_is_fixed_through_the_scaler_only_as_unsafe():
    from amp_lint.engine.checker import Checker

    source = _HELPER.replace("{step}", "optimizer.step()")
    safe = Checker(frozenset({"AMP020"}), fix=True).check(source, "train.py")
    assert safe.fixed_source in (None, source)
    unsafe = Checker(frozenset({"AMP020"}), fix=True, unsafe_fixes=True).check(source, "train.py")
    assert unsafe.fixed_source == _HELPER.replace("{step}", "grad_scaler.step(optimizer)")


# Principle 4: a parameter declared a tensor is a tensor; `str()` of its device is "cuda:0" on CUDA.
def test_a_parameter_declared_a_tensor_has_an_indexed_device():
    source = """
import torch
from typing import Optional
from torch import Tensor

def route(x: torch.Tensor, gate):
    with torch.autocast(device_type=str(x.device), dtype=torch.float32):
        return gate(x)

def maybe(x: Optional[Tensor], gate):
    with torch.autocast(device_type=str(x.device)):
        return gate(x)

def union(x: Tensor | None, gate):
    with torch.autocast(device_type=str(x.device)):
        return gate(x)

def settings(x: Config, gate):
    with torch.autocast(device_type=str(x.device)):
        return gate(x)
"""
    assert _found(source, "AMP075") == [("AMP075", 7), ("AMP075", 11), ("AMP075", 15)]


_ORDER_RULES = ("AMP020", "AMP021", "AMP022", "AMP023", "AMP024", "AMP030", "AMP043")


# Principle 1: a disabled scaler's unscale_, step and update pass through: on the branch where the scaler says
# it is disabled, stepping directly is what `scaler.step` would do (a probe on real shapes, round eleven).
def test_a_direct_step_where_the_scaler_says_it_is_disabled_is_right():
    helper = """
import torch
def step(scaler, opt, params):
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    if scaler.is_enabled():
        scaler.step(opt)
    else:
        opt.step()
"""
    assert _found(helper, "AMP020", show_assumed=True) == []
    loop = """
import torch
def train(scaler, opt, model, loader):
    for x in loader:
        scaler.scale(model(x)).backward()
        scaler.unscale_(opt)
        if not scaler.is_enabled():
            opt.step()
        else:
            scaler.step(opt)
        scaler.update()
"""
    assert _found(loop, "AMP020", show_assumed=True) == []
    # The enabled branch stepping directly is still wrong.
    wrong = helper.replace("        scaler.step(opt)\n    else:\n        opt.step()", "        opt.step()\n    else:\n        scaler.step(opt)")
    assert _found(wrong, "AMP020") == [("AMP020", 7)]


# Principle 3: a scaler declared a class that overrides a protocol method (hivemind's GradScaler, whose
# `unscale_` does nothing outside a global step) keeps that class's meaning: two `unscale_` calls on exclusive
# uses are not torch's "unscale_() has already been called".
def test_a_parameter_declared_a_scaler_class_with_its_own_unscale_is_not_torchs():
    source = """
import torch
from typing import Optional


class GradScaler(torch.amp.GradScaler):
    def unscale_(self, optimizer):
        if self.running_global_step:
            return super().unscale_(optimizer)
        return False


def step(opt, grad_scaler: Optional[GradScaler], averaging):
    if not averaging:
        grad_scaler.unscale_(opt)
    finish(opt, grad_scaler)
    grad_scaler.unscale_(opt)
"""
    assert _found(source, "AMP024", show_assumed=True) == []
    plain = source.replace("Optional[GradScaler]", "Optional[torch.amp.GradScaler]")
    assert _found(plain, "AMP024", show_assumed=True) != []


# Principle 3: `self.grad_scaler` that a base class in another module builds from a class of its own (torch's
# benchmark runner: `self.grad_scaler = DummyGradScaler()`, whose `scale` returns the loss) is no scaler.
def test_a_scaler_name_a_base_in_another_module_builds_from_a_plain_class_is_no_scaler(tmp_path):
    from amp_lint import rules as registry
    from amp_lint.analysis.project import ProjectIndex
    from amp_lint.engine.checker import Checker

    (tmp_path / "common.py").write_text(
        "class DummyGradScaler:\n    def scale(self, loss):\n        return loss\n\n\n"
        "class Runner:\n    def __init__(self):\n        self.grad_scaler = DummyGradScaler()\n        self.optimizer = None\n\n"
        "    def optimizer_step(self):\n        if self.optimizer is not None:\n            self.optimizer.step()\n"
    )
    runner = tmp_path / "bench.py"
    runner.write_text(
        "import torch\nfrom common import Runner\n\n\nclass TimmRunner(Runner):\n"
        "    def forward_and_backward_pass(self, mod, inputs):\n"
        "        with torch.autocast('cuda'):\n            loss = mod(inputs).sum()\n"
        "        self.grad_scaler.scale(loss).backward()\n        self.optimizer_step()\n"
    )

    def found():
        checker = Checker(frozenset(registry.default_codes()), show_assumed=True, project=ProjectIndex())
        return [d.code for d in checker.check(runner.read_text(), "bench.py", path=str(runner)).diagnostics]

    assert "AMP020" not in found()
    # Built from torch's GradScaler there instead: the direct step applies scaled gradients.
    (tmp_path / "common.py").write_text((tmp_path / "common.py").read_text().replace(
        "self.grad_scaler = DummyGradScaler()", "self.grad_scaler = torch.amp.GradScaler('cuda')").replace("class DummyGradScaler", "import torch\n\n\nclass DummyGradScaler"))
    assert "AMP020" in found()


def test_a_direct_step_where_every_construction_reaching_it_is_disabled_is_right():
    # hivemind's benchmark: `GradScaler(enabled=args.use_amp)` where the step is direct only without AMP; the
    # other construction is under `if args.use_amp and ...:`, a path the direct step never shares.
    source = """
import torch
from torch.amp import GradScaler

def run(args, model, opt, loader):
    if args.use_amp and args.reuse_grad_buffers:
        grad_scaler = GradScaler()
    else:
        grad_scaler = GradScaler(enabled=args.use_amp)
    for x in loader:
        grad_scaler.scale(model(x)).backward()
        grad_scaler.unscale_(opt)
        if args.use_amp:
            grad_scaler.step(opt)
        else:
            opt.step()
        grad_scaler.update()
"""
    assert _found(source, "AMP020", show_assumed=True) == []
    # A construction that is enabled on the direct step's path: wrong there.
    enabled = source.replace("    if args.use_amp and args.reuse_grad_buffers:", "    if args.reuse_grad_buffers:")
    assert _found(enabled, "AMP020", show_assumed=True) == [("AMP020", 16)]


# Judged on 42 more repositories (round eleven): each shape a false positive there, now silent for its principle,
# and the same shape with the evidence turned around still reported.
def test_writing_inf_into_a_gradient_reads_only_its_shape():
    # Ascend's test_amp: `torch.full_like(p.grad, inf)` is the same at any scale (AMP030 with a safe fix).
    source = """
import torch
def poison(model):
    for p in model.parameters():
        if p.grad is not None:
            p.grad = torch.full_like(p.grad, float("inf"))
def run(model, opt, data, scaler):
    for x in data:
        scaler.scale(model(x).sum()).backward()
        poison(model)
        scaler.step(opt)
        scaler.update()
"""
    assert _found(source, "AMP030", show_assumed=True) == []
    assert _found(source.replace("torch.full_like(p.grad,", "torch.clamp(p.grad, max="), "AMP030") != []


def test_a_scaler_name_built_from_a_project_class_on_one_side_of_a_conditional_is_no_scaler():
    # metaseq's FP16 optimizer: `self.scaler = None if bf16 else DynamicLossScaler(...)` (AMP020 with a safe fix).
    source = """
class DynamicLossScaler:
    def update(self):
        pass

class FP16Optimizer:
    def __init__(self, cfg, fp32_optimizer):
        self.fp32_optimizer = fp32_optimizer
        self.scaler = None if cfg.bf16 else DynamicLossScaler()

    def step(self):
        self.fp32_optimizer.step()
        if self.scaler is not None:
            self.scaler.update()
"""
    assert _found(source, "AMP020", show_assumed=True) == []


def test_an_imported_librarys_own_autocast_is_not_torchs():
    # Transformer Engine's `te.autocast`: an FP8 recipe context, never torch's autocast (AMP001 with a safe fix).
    source = """
import transformer_engine.pytorch as te
def fwd_bwd(layer, x, recipe):
    with te.autocast(enabled=True, recipe=recipe):
        out = layer(x)
        out.sum().backward()
"""
    assert _found(source, "AMP001", show_assumed=True) == []
    framework = source.replace("import transformer_engine.pytorch as te\n", "").replace("def fwd_bwd(layer, x, recipe):", "def fwd_bwd(layer, x, recipe, te):")
    assert _found(framework, "AMP001") == [("AMP001", 5)]  # an object's autocast(): a framework's, entering torch's


def test_a_vendor_backends_autocast_dtypes_are_its_own():
    # torch_npu registers "npu" as PrivateUse1 and lists float32 among its autocast dtypes (AMP054).
    source = """
import torch
with torch.autocast(device_type="npu", dtype=torch.float32):
    out = torch.mm(a, a)
"""
    assert _found(source, "AMP054") == []
    assert _found(source.replace('"npu"', '"cpu"'), "AMP054") == [("AMP054", 3)]


# One training run per pass of a sweep; `built`: how the pass makes its model and optimizer.
_SWEEP = """
import torch
{imports}def sweep(make_model, x):
    for dtype in (torch.float16, torch.bfloat16):
        {built}
        scaler = torch.amp.GradScaler("cuda", init_scale=1)
        with torch.autocast("cuda", dtype=dtype):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""


def test_a_sweep_that_builds_model_optimizer_and_scaler_each_pass_starts_each_run_afresh():
    # IPEX's tests: one fresh model, optimizer and scaler per configuration (AMP013 with a safe fix).
    source = _SWEEP.format(imports="", built="model = make_model()\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)")
    assert _found(source, "AMP013", show_assumed=True) == []
    hoisted = source.replace("        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "").replace(
        "    for dtype in", "    opt = torch.optim.SGD(make_model().parameters(), lr=0.1)\n    for dtype in")
    assert _found(hoisted, "AMP013") == [("AMP013", 7)]


def test_an_unscaled_backward_whose_gradients_a_plain_optimizer_steps_is_an_fp32_reference():
    # IPEX's parity tests: an fp32 reference model with its own optimizer beside the AMP one (AMP011, safe fix).
    source = """
import copy
import torch
def run(model, x):
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(2):
        ref_loss = ref(x).sum()
        ref_loss.backward()
        ref_opt.step()
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""
    assert _found(source, "AMP011", show_assumed=True) == []
    # The reference optimizer stepped through the scaler too: its backward must be scaled.
    through = source.replace("        ref_opt.step()\n", "        scaler.step(ref_opt)\n")
    assert _found(through, "AMP011") == [("AMP011", 11)]


def test_an_unscaled_penalty_on_the_other_side_of_a_scaled_one_is_the_fp32_path():
    # torch's and Ascend's test_amp: `if try_scaling_api: grad(scaler.scale(loss)) ... else: grad(loss)` (AMP032).
    source = """
import torch
def run(model, opt, data, loss_fn, use_scaler):
    scaler = torch.amp.GradScaler("cuda")
    for x in data:
        loss = loss_fn(model(x))
        if use_scaler:
            g = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
            g = [p / scaler.get_scale() for p in g]
        else:
            g = torch.autograd.grad(loss, model.parameters(), create_graph=True)
        loss = loss + sum(t.pow(2).sum() for t in g)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""
    assert _found(source, "AMP032", show_assumed=True) == []
    # Both on one path: the unscaled one underflows.
    both = source.replace("        else:\n            g = torch.autograd.grad(loss", "        if True:\n            g = torch.autograd.grad(loss")
    assert _found(both, "AMP032") == [("AMP032", 11)]


def test_an_optimizer_unpacked_from_a_call_in_each_pass_starts_each_run_afresh():
    # IPEX's `model, opt = ipex.optimize(model, optimizer=opt)` in each configuration's pass: the names it
    # binds are in the model (`unpacked_sites`), not read off the loop's statements by the rule.
    source = _SWEEP.format(
        imports="import intel_extension_for_pytorch as ipex\n",
        built="model, opt = ipex.optimize(make_model(), optimizer=torch.optim.SGD([], lr=0.1))",
    )
    assert _found(source, "AMP013", show_assumed=True) == []
    from amp_lint.analysis.builder import build_model
    import libcst as cst

    model = build_model(cst.parse_module(source))
    assert {site.target for site in model.unpacked_sites} == {"model", "opt"}
    assert not any(site.target in ("model", "opt") for site in model.assignment_sites)
    # An optimizer built once, before the sweep, is the same run's: the scaler built in the loop is AMP013.
    hoisted = source.replace("        model, opt = ipex.optimize(", "        model, _ = ipex.optimize(").replace(
        "    for dtype in", "    opt = torch.optim.SGD([], lr=0.1)\n    for dtype in")
    assert _found(hoisted, "AMP013") == [("AMP013", 8)]
