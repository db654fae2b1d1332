"""Issue 46: the AMP bugs people reported, by principle. Each test names the principle it holds, with shapes in
our own words (the held-out cases stay in bench/realbugs). Where a shape is correct code, the test says why the
rule must stay silent."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from amp_lint.engine.checker import Checker


def _findings(source: str, *codes: str, show_assumed: bool = False):
    options = {"show_assumed": True} if show_assumed else {}
    result = Checker(frozenset(codes), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return result.diagnostics


def _codes(source: str, *codes: str, show_assumed: bool = False):
    return sorted(d.code for d in _findings(source, *codes, show_assumed=show_assumed))


# --- Principle 1: values that travel to autocast and the scaler -------------------------------------------

FALLBACK_IMPORT = """
import torch
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast

def forward(model, x):
    with autocast({args}):
        return model(x)
"""


def test_principle_1_a_fallback_import_means_the_try_bodys_name():
    # Principle 1: `try: from torch.amp import autocast` / `except ImportError: from torch.cuda.amp import
    # autocast`: on any torch that has torch.amp the name is torch.amp's, whose device_type is required, so the
    # old call without a device is a TypeError (the handler runs only where the import failed).
    assert _codes(FALLBACK_IMPORT.format(args=""), "AMP075") == ["AMP075"]
    assert _codes(FALLBACK_IMPORT.format(args="dtype=torch.float16"), "AMP075") == ["AMP075"]
    # Written for the modern API: nothing to say, and no deprecation either (the old name is the fallback).
    assert _codes(FALLBACK_IMPORT.format(args='"cuda", dtype=torch.float16'), "AMP075", "AMP070") == []


def test_principle_1_the_old_import_in_the_try_body_is_the_one_in_effect():
    # Principle 1: the other order, `try: from torch.cuda.amp import autocast`, keeps the old class (which
    # takes no device): no AMP075.
    source = FALLBACK_IMPORT.replace("from torch.amp import autocast", "from torch.cuda.amp import KEEP").replace(
        "    from torch.cuda.amp import autocast", "    from torch.amp import autocast"
    ).replace("KEEP", "autocast")
    assert "try:\n    from torch.cuda.amp import autocast" in source
    assert _codes(source.format(args=""), "AMP075") == []


KWARGS = """
import torch
{define}

def forward(model, x):
    with torch.autocast(**AMP_KWARGS):
        return model(x)
"""


@pytest.mark.parametrize(
    "define, message",
    [
        ('AMP_KWARGS = {"device": "cuda", "dtype": torch.float16}', "`device=`, which autocast does not take"),
        ('AMP_KWARGS = dict(dtype=torch.float16)', "no device_type"),
        ('AMP_KWARGS = {"device_type": "cuda:0"}', "carries a device index"),
    ],
)
def test_principle_1_a_kwargs_dict_carries_the_device(define, message):
    # Principle 1: `autocast(**amp_kwargs)` passes what the dict holds; a `device` key where `device_type` is
    # meant is a TypeError at the first call, and so is a dict without a device; an indexed device_type is AMP075's
    # usual finding. None has a fix: the dict may be splatted into other calls too.
    (finding,) = _findings(KWARGS.format(define=define), "AMP075")
    assert message in finding.message
    assert finding.fix is None


@pytest.mark.parametrize(
    "define",
    [
        'AMP_KWARGS = {"device_type": "cuda", "dtype": torch.float16}',
        'AMP_KWARGS = {"device": "cuda"}\nAMP_KWARGS.update(load_settings())',
        'AMP_KWARGS = {"device": "cuda"}\nAMP_KWARGS[key] = value',
        'AMP_KWARGS = make_kwargs()',
        'AMP_KWARGS = {"device": "cuda"}\nconfigure(AMP_KWARGS)',
    ],
)
def test_principle_1_a_kwargs_dict_nobody_can_read_is_left_alone(define):
    # Principle 1, the silent side: a right dict, or one that is changed, handed on or built elsewhere.
    assert _codes(KWARGS.format(define=define), "AMP075") == []


def test_principle_1_str_of_a_device_string_constant_gets_torch_device_type(tmp_path):
    # Principle 1: a module constant a device helper sets (`"cuda:0"` or `"cpu"`), through `str()`: str() of a
    # string is the string, which has no `.type`; the fix is `torch.device(X).type`, right for every value.
    source = textwrap.dedent(
        """
        import torch

        def pick_device():
            return "cuda:0" if torch.cuda.is_available() else "cpu"

        DEVICE = pick_device()

        def forward(model, x):
            with torch.autocast(str(DEVICE)):
                return model(x)

        print(forward(torch.nn.Linear(2, 2), torch.ones(1, 2)).shape)
        """
    )
    (finding,) = _findings(source, "AMP075")
    assert "torch.device(DEVICE).type" in finding.message
    path = tmp_path / "example.py"
    path.write_text(source)
    fixed = subprocess.run(
        [sys.executable, "-m", "amp_lint", "--no-cache", "--isolated", "--select", "AMP075", "--fix", str(path)],
        capture_output=True, text=True,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "torch.autocast(torch.device(DEVICE).type)" in path.read_text()
    ran = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)  # runs on CPU
    assert ran.returncode == 0, ran.stderr


# --- Principle 5: reached through calls -------------------------------------------------------------------

BCE_HELPER = """
import torch
import torch.nn.functional as F

{helper}

def train(model, loader, opt, scaler):
    for x, y in loader:
        with torch.autocast("{device}", dtype=torch.float16):
            out = model(x)
            loss = {call}
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""

HELPERS = {
    "function": ("def bce_term(p, y):\n    return F.binary_cross_entropy(torch.sigmoid(p), y)", "bce_term(out, y)"),
    "loss class": (
        "class Criterion(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.bce = torch.nn.BCELoss()\n\n    def forward(self, p, y):\n        return self.bce(p.sigmoid(), y)\n\n"
        "crit = Criterion()",
        "crit(out, y)",
    ),
    "two calls deep": (
        "def bce_term(p, y):\n    return F.binary_cross_entropy(p, y)\n\ndef total(p, y):\n    return bce_term(p.sigmoid(), y) + p.mean()",
        "total(out, y)",
    ),
}


@pytest.mark.parametrize("shape", sorted(HELPERS))
def test_principle_5_bce_in_a_helper_called_under_cuda_autocast(shape):
    # Principle 5: the ban is on the op wherever it is written; a loss helper of the file called inside the
    # CUDA autocast runs its BCE under it (RuntimeError on the first step).
    helper, call = HELPERS[shape]
    findings = _findings(BCE_HELPER.format(helper=helper, call=call, device="cuda"), "AMP052")
    assert [f.code for f in findings] == ["AMP052"]
    assert findings[0].related, "the finding points at the BCE inside the helper"


def test_principle_5_bce_helpers_that_are_safe_stay_silent():
    # Principle 5, the silent side: CPU autocast runs BCE in float32; a helper that turns autocast off around
    # its BCE is the documented way; a helper the file cannot see into is unknown.
    helper, call = HELPERS["function"]
    assert _codes(BCE_HELPER.format(helper=helper, call=call, device="cpu"), "AMP052") == []
    guarded = (
        "def bce_term(p, y):\n    with torch.autocast('cuda', enabled=False):\n"
        "        return F.binary_cross_entropy(torch.sigmoid(p.float()), y.float())"
    )
    assert _codes(BCE_HELPER.format(helper=guarded, call=call, device="cuda"), "AMP052") == []
    imported = "from losses import bce_term"
    assert _codes(BCE_HELPER.format(helper=imported, call=call, device="cuda"), "AMP052") == []


# --- Principle 2: lifetimes set by calls ------------------------------------------------------------------

PER_EPOCH = """
import torch

class Trainer:
    def __init__(self, model, opt, use_amp):
        self.model, self.opt, self.use_amp = model, opt, use_amp
        self.scaler = None

    def train_epoch(self, loader):
{build}
        for x in loader:
            with torch.autocast("cuda", enabled=self.use_amp):
                loss = self.model(x).sum()
            {key}.scale(loss).backward()
            {key}.step(self.opt)
            {key}.update()
            self.opt.zero_grad()

    def fit(self, loader, epochs):
        for {target} in range({count}):
            self.train_epoch(loader)
"""


@pytest.mark.parametrize(
    "build, key",
    [
        ('        self.scaler = torch.amp.GradScaler("cuda")', "self.scaler"),
        ('        if self.use_amp:\n            self.scaler = torch.amp.GradScaler("cuda")', "self.scaler"),
        ('        scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)', "scaler"),
    ],
)
@pytest.mark.parametrize("target, count", [("epoch", "epochs"), ("_", "epochs"), ("i", "self.num_epochs")])
def test_principle_2_a_scaler_built_in_a_method_an_epoch_loop_calls(build, key, target, count):
    # Principle 2: the epoch loop calls `train_epoch`, which builds its scaler on every call (into an attribute
    # or not, under a flag that does not change between calls or not): the scale restarts every epoch. An
    # epoch loop says so in its target or in what it iterates (`for _ in range(epochs)`).
    source = PER_EPOCH.format(build=build, key=key, target=target, count=count)
    findings = _findings(source, "AMP013")
    assert [f.code for f in findings] == ["AMP013"]
    assert "once per epoch" in findings[0].message


@pytest.mark.parametrize(
    "build, target, count",
    [
        # Lazy: built on the first call only.
        ('        if self.scaler is None:\n            self.scaler = torch.amp.GradScaler("cuda")', "epoch", "epochs"),
        # Its state comes back on every call.
        ('        self.scaler = torch.amp.GradScaler("cuda")\n        self.scaler.load_state_dict(self.saved)', "epoch", "epochs"),
        # Not an epoch loop: folds of a cross-validation are fresh runs.
        ('        self.scaler = torch.amp.GradScaler("cuda")', "fold", "self.folds"),
    ],
)
def test_principle_2_scalers_that_do_not_restart_stay_silent(build, target, count):
    # Principle 2, the silent side.
    source = PER_EPOCH.format(build=build, key="self.scaler", target=target, count=count)
    assert _codes(source, "AMP013", show_assumed=True) == []


# --- Principle 1: a scaled value handed through a parameter ------------------------------------------------

SCALED_THROUGH_A_PARAMETER = """
import torch

class Runner:
    def __init__(self, net, opt, use_fp16):
        self.net, self.opt = net, opt
        self.grad_scaler = torch.amp.GradScaler("cuda") if use_fp16 else None

    def apply_gradients(self, objective):
        objective.backward()
        if self.grad_scaler is None:
            self.opt.step()
            return
        self.grad_scaler.step(self.opt)
        self.grad_scaler.update()

    def fit(self, batches):
        for inputs in batches:
            with torch.autocast("cuda", enabled=self.grad_scaler is not None):
                objective = self.net(inputs).mean()
            {hand}
"""


@pytest.mark.parametrize(
    "hand",
    [
        # the name bound to the scaled loss on one branch of a conditional
        "objective = self.grad_scaler.scale(objective) if self.grad_scaler else objective\n            self.apply_gradients(objective)",
        # by keyword, under another name
        "scaled = self.grad_scaler.scale(objective)\n            self.apply_gradients(objective=scaled)",
        # written as the argument
        "self.apply_gradients(self.grad_scaler.scale(objective))",
    ],
)
def test_principle_1_a_parameter_is_what_the_callers_hand_it(hand):
    # The backward in `apply_gradients` runs on whatever its caller hands it: here a scaled loss, so the step
    # next to it is right. A safe fix would have scaled it twice.
    source = SCALED_THROUGH_A_PARAMETER.format(hand=hand)
    assert _codes(source, "AMP011") == []


def test_principle_1_a_parameter_handed_an_unscaled_loss_is_still_reported():
    source = SCALED_THROUGH_A_PARAMETER.format(hand="self.apply_gradients(objective)")
    (finding,) = _findings(source, "AMP011")
    assert finding.code == "AMP011" and "objective.backward()" in finding.message


# --- Principle 6: correlated flags ---------------------------------------------------------------------------

DEEPSPEED_OR_SCALER = """
import deepspeed
import torch

def run_train(cfg, model, loader, ds_config, optimizer):
    use_deepspeed = cfg.use_deepspeed
    scaler = {scaler}
    if use_deepspeed:
        model, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config)
    elif cfg.mixed_precision:
        scaler = torch.amp.GradScaler("cuda")
    for data in loader:
        with torch.autocast("cuda", enabled={enabled}):
            loss = model.forward(data)
        if {deepspeed_test}:
            model.backward(loss)
            model.step()
        elif scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
"""


def test_principle_6_an_engine_bound_under_a_flag_meets_no_code_under_its_negation():
    # The DeepSpeed engine and its optimizer exist only where `use_deepspeed` holds; the GradScaler's step runs
    # on the `else` of another `if use_deepspeed:`, and autocast is on only where `use_deepspeed` is false
    # (h2o-llmstudio's trainer after its fix): nothing manual ever touches the engine.
    source = DEEPSPEED_OR_SCALER.format(
        scaler="None", enabled="cfg.mixed_precision and not use_deepspeed", deepspeed_test="use_deepspeed"
    )
    assert _codes(source, "AMP092", show_assumed=True) == []


def test_principle_6_flags_that_do_meet_are_still_reported():
    # Autocast stays on under DeepSpeed (the bug the fix removed), and a scaler built whatever the engine steps
    # its optimizer where the engine is not asked for the step: both findings stand.
    source = DEEPSPEED_OR_SCALER.format(
        scaler='torch.amp.GradScaler("cuda")', enabled="cfg.mixed_precision", deepspeed_test="cfg.engine_steps"
    )
    assert _codes(source, "AMP092", show_assumed=True) == ["AMP092", "AMP092"]


# --- Principle 3: gradient reads, however the parameters are reached ----------------------------------------

GRADIENT_READ = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
{read}
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
"""


@pytest.mark.parametrize(
    "read",
    [
        # a norm over the optimizer's groups, in a generator expression
        '    log(sum(p.grad.norm() ** 2 for g in optimizer.param_groups for p in g["params"] if p.grad is not None))',
        # a list comprehension over the model's parameters
        "    norms = [p.grad.norm() for p in model.parameters() if p.grad is not None]",
        # a dict comprehension over named parameters
        "    norms = {name: p.grad.abs().max() for name, p in model.named_parameters()}",
        # nested loops over the groups
        '    for group in optimizer.param_groups:\n        for p in group["params"]:\n            log(p.grad.norm())',
    ],
)
def test_principle_3_a_gradient_norm_read_before_unscale(read):
    assert _codes(GRADIENT_READ.format(read=read), "AMP030") == ["AMP030"]


@pytest.mark.parametrize(
    "read",
    [
        # whether there is a gradient is no read of its value
        "    have = [p.grad is not None for p in model.parameters()]",
        # `grad` of something that is no parameter
        '    log([g.grad.norm() for g in optimizer.param_groups])',
        # a group's own entries are no gradients
        '    lrs = [g["lr"] for g in optimizer.param_groups]',
    ],
)
def test_principle_3_what_is_no_gradient_read_stays_silent(read):
    assert _codes(GRADIENT_READ.format(read=read), "AMP030") == []


def test_principle_3_a_read_after_unscale_is_right():
    source = GRADIENT_READ.format(read="    pass").replace(
        "    scaler.step(optimizer)", "    log([p.grad.norm() for p in model.parameters()])\n    scaler.step(optimizer)"
    )
    assert _codes(source, "AMP030") == []


SCALER_AND_DTYPE = """
import torch

class Trainer:
    def __init__(self, model, optimizer, args, amp_dtype=torch.float16):
        self.model, self.optimizer = model, optimizer
        self.use_amp = args.fp16 or args.bf16
        self.amp_dtype = {dtype}
        self.scaler = torch.amp.GradScaler("cuda", enabled={scaler_on})

    def step(self, batch):
        with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.use_amp):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""


@pytest.mark.parametrize(
    "dtype,scaler_on",
    [
        # the scaler is on wherever autocast is, and the dtype may be bfloat16 (traiNNer-redux, transformers)
        ("torch.bfloat16 if args.bf16 else torch.float16", "self.use_amp"),
        # the same flag under another attribute that copies it
        ("torch.bfloat16 if args.bf16 else torch.float16", "args.fp16 or args.bf16"),
        # bfloat16 by a parameter's default (alf)
        ("amp_dtype if args.dtype else torch.bfloat16", "True"),
    ],
)
def test_principle_6_a_scaler_on_the_same_switch_as_a_bf16_autocast(dtype, scaler_on):
    source = SCALER_AND_DTYPE.format(dtype=dtype, scaler_on=scaler_on)
    assert _codes(source, "AMP012") == ["AMP012"]


@pytest.mark.parametrize(
    "dtype,scaler_on",
    [
        # the scaler has a switch of its own: the fp16 flag, or the documented dtype test
        ("torch.bfloat16 if args.bf16 else torch.float16", "args.fp16"),
        ("torch.bfloat16 if args.bf16 else torch.float16", "self.amp_dtype == torch.float16"),
        # float16 only
        ("torch.float16", "self.use_amp"),
        # out of sight: a dtype read from the config
        ("getattr(torch, args.dtype)", "self.use_amp"),
        # a parameter with no visible default
        ("amp_dtype", "self.use_amp"),
    ],
)
def test_principle_6_a_scaler_with_a_switch_of_its_own_or_a_float16_dtype_stays_silent(dtype, scaler_on):
    source = SCALER_AND_DTYPE.format(dtype=dtype, scaler_on=scaler_on)
    assert _codes(source, "AMP012") == []


BUILT_FLOAT16 = """
import torch
from torch import nn

class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3)
        {layer}

def train(loader):
    model = Backbone().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.mark.parametrize(
    "layer",
    [
        "self.act = nn.PReLU(64, dtype=torch.float16)",
        "self.weight = nn.Parameter(torch.HalfTensor(10, 64))",
        "self.weight = nn.Parameter(torch.randn(10, 64, dtype=torch.half))",
    ],
)
def test_principle_6_a_module_class_that_builds_float16_parameters(layer):
    # The model is born with a float16 parameter: the scaler's unscale_ raises "Attempting to unscale FP16
    # gradients" on the first step (AdaFace's PReLU, an ArcFace head's HalfTensor weight).
    (finding,) = _findings(BUILT_FLOAT16.format(layer=layer), "AMP050")
    assert finding.location.row == 9  # reported where the float16 parameter is made


@pytest.mark.parametrize(
    "layer",
    [
        "self.act = nn.PReLU(64, dtype=torch.bfloat16)",  # bfloat16 gradients unscale
        "self.act = nn.PReLU(64)",
        # a frozen float16 layer has no gradient to unscale
        "self.embed = nn.Embedding(10, 64, dtype=torch.float16)\n        self.embed.requires_grad_(False)",
    ],
)
def test_principle_6_module_classes_without_trained_float16_parameters_stay_silent(layer):
    assert _codes(BUILT_FLOAT16.format(layer=layer), "AMP050") == []


# --- Fixes on real bugs: the fix check follows the finding through callees -----------------------------------

UNSCALES_IN_A_HELPER = """
import torch

class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def clip_gradients(self):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)

    def train(self, loader):
        for x in loader:
            loss = self.model(x).sum()
            self.scaler.scale(loss).backward()
            print([p.grad.norm() for p in self.model.parameters()])
            self.clip_gradients()
            self.scaler.step(self.optimizer)
            self.scaler.update()
"""


def test_fix_check_an_unscale_before_a_helper_that_unscales_is_a_new_hazard():
    from amp_lint.fixes.verify_fix import new_hazards

    after = UNSCALES_IN_A_HELPER.replace(
        "            self.clip_gradients()", "            self.scaler.unscale_(self.optimizer)\n            self.clip_gradients()"
    )
    (hazard,) = new_hazards(UNSCALES_IN_A_HELPER, after)
    assert (hazard.kind, hazard.function, hazard.optimizer) == ("unscale-twice", "Trainer.train", "self.optimizer")
    # The helper unscales only on a branch the caller's unscale_ does not reach: still a hazard on that path.
    branchy = after.replace("        self.scaler.unscale_(self.optimizer)\n        torch.nn", "        if self.clip:\n            self.scaler.unscale_(self.optimizer)\n        torch.nn")
    assert [h.kind for h in new_hazards(UNSCALES_IN_A_HELPER, branchy)] == ["unscale-twice"]
    # A helper that steps and updates first leaves the optimizer ready: unscaling before it is right.
    ready = UNSCALES_IN_A_HELPER.replace(
        "        self.scaler.unscale_(self.optimizer)\n        torch.nn", "        self.scaler.step(self.optimizer)\n        self.scaler.update()\n        self.scaler.unscale_(self.optimizer)\n        torch.nn"
    )
    assert new_hazards(ready, ready.replace("            self.clip_gradients()", "            self.scaler.unscale_(self.optimizer)\n            self.clip_gradients()")) == []


def test_fix_check_refuses_the_fix_and_leaves_the_file(tmp_path):
    path = tmp_path / "trainer.py"
    path.write_text(UNSCALES_IN_A_HELPER)
    done = subprocess.run([sys.executable, "-m", "amp_lint", "--no-cache", "--fix", str(path)], capture_output=True, text=True)
    assert path.read_text() == UNSCALES_IN_A_HELPER
    assert "not fixed" in done.stderr + done.stdout


# --- Principle 6: a scaler built with enabled=False scales nothing ----------------------------------------------

DISABLED_SCALER = """
import torch
scaler = torch.amp.GradScaler("cuda", enabled={enabled})
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def test_principle_6_a_float16_loop_through_a_disabled_scaler_has_no_scaler():
    (finding,) = _findings(DISABLED_SCALER.format(enabled="False"), "AMP010")
    assert "enabled=False" in finding.message


@pytest.mark.parametrize("enabled", ["True", "use_amp", "args.fp16"])
def test_principle_6_a_scaler_that_may_be_on_is_a_scaler(enabled):
    assert _codes(DISABLED_SCALER.format(enabled=enabled), "AMP010") == []


# --- principle 6: an Accelerator that may run fp16 owns a GradScaler ---------------------------------------

_ACCELERATE_LOOP = """
from accelerate import Accelerator

def train(args, model, optimizer, loader):
    accelerator = Accelerator({arguments})
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        {backward}
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.parametrize("arguments", ["", "mixed_precision=args.mixed_precision", 'mixed_precision="fp16"', "**kwargs"])
def test_a_plain_backward_before_a_prepared_step_skips_the_accelerators_scaling(arguments):
    # Under fp16 the prepared optimizer's step is the Accelerator's GradScaler's: it unscales gradients that
    # `loss.backward()` never scaled ("Attempted step but _scale is None"). The precision may come from an
    # argument or the accelerate config; `accelerator.backward(loss)` is right whatever it is.
    source = _ACCELERATE_LOOP.format(arguments=arguments, backward="loss.backward()")
    (finding,) = _findings(source, "AMP011")
    assert finding.location.row == 9 and "accelerator.backward(loss)" in finding.message


def test_the_same_on_an_accelerator_kept_on_the_trainer():
    source = """
from accelerate import Accelerator

class Solver:
    def __init__(self, model, optimizer, loader):
        self.accelerator = Accelerator()
        self.model, self.optimizer, self.loader = self.accelerator.prepare(model, optimizer, loader)

    def run_epoch(self, loss_fn):
        for x, y in self.loader:
            loss = loss_fn(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
"""
    assert [(f.code, f.location.row) for f in _findings(source, "AMP011")] == [("AMP011", 13)]


@pytest.mark.parametrize(
    "arguments, backward",
    [
        ('mixed_precision="no"', "loss.backward()"),  # no scaler: plain backward is what accelerate would run
        ('mixed_precision="bf16"', "loss.backward()"),
        ("", "accelerator.backward(loss)"),
        ("mixed_precision=args.mixed_precision", "accelerator.backward(loss)"),
    ],
)
def test_no_finding_where_the_accelerator_builds_no_scaler_or_scales_itself(arguments, backward):
    assert _codes(_ACCELERATE_LOOP.format(arguments=arguments, backward=backward), "AMP011") == []


def test_an_optimizer_the_accelerator_did_not_prepare_is_not_its_scalers():
    source = _ACCELERATE_LOOP.format(arguments="", backward="loss.backward()").replace(
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)", "model, loader = accelerator.prepare(model, loader)"
    )
    assert _codes(source, "AMP011") == []


def test_the_fix_backpropagates_through_the_accelerator_and_is_unsafe():
    # Unsafe: without fp16, accelerate's backward divides the loss by the accumulation steps, so the numbers of
    # an accumulating run change (to what the prepared optimizer expects). Keywords go along.
    source = textwrap.dedent(_ACCELERATE_LOOP.format(arguments="", backward="loss.backward(retain_graph=True)"))
    assert Checker(frozenset({"AMP011"}), fix=True).check(source, "example.py").fixed_source is None
    fixed = Checker(frozenset({"AMP011"}), fix=True, unsafe_fixes=True).check(source, "example.py")
    assert "accelerator.backward(loss, retain_graph=True)" in fixed.fixed_source and ".backward()" not in fixed.fixed_source
    again = Checker(frozenset({"AMP011"}), fix=True, unsafe_fixes=True).check(fixed.fixed_source, "example.py")
    assert again.fixed_source is None and again.diagnostics == []
