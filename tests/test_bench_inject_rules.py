"""bench/inject_ops_rules.py and bench/inject_ops_frameworks.py (issue 46: "every default rule gets an operator").

Every default rule (on by default, not preview) is the expected rule of some operator; each new operator makes its
one documented mistake at the site of a small correct template, and amp-lint (this checkout, the CLI as users run
it) reports the expected rule on the mutant and not on the template.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import inject_ops  # noqa: E402
import inject_ops_frameworks  # noqa: E402
import inject_ops_rules  # noqa: E402

TRAIN = """\
import torch


def train(loader, loss_fn, epochs=1):
    model = torch.nn.Linear(2, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda"):
                out = model(x)
                loss = loss_fn(out, y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
"""
ACCUMULATE = """\
import torch


def train(loader, accum=4):
    model = torch.nn.Linear(2, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
"""
CUSTOM = """\
import torch


class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad.mm(b.t()), a.t().mm(grad)
"""
SPELLINGS = """\
import torch
from torch.amp.grad_scaler import OptState


def cpu_region(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
    return y


def autocast_dtype():
    return torch.get_autocast_dtype("cuda")


def stepped(state):
    return state is OptState.STEPPED
"""
ACCELERATE = """\
import torch
from accelerate import Accelerator


def train(model, optimizer, loader):
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
"""
FSDP = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


def train(model, loader):
    model = FSDP(model)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = ShardedGradScaler()
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
FSDP2 = """\
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def train(model, loader):
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    optimizer = torch.optim.AdamW(model.parameters())
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""
DEEPSPEED = """\
import deepspeed
import torch


def train(model, loader):
    config = {"train_batch_size": 8, "fp16": {"enabled": True}}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()
"""
GRAPHED = """\
import torch


def capture(model, sample):
    with torch.autocast("cuda", cache_enabled=False):
        graphed = torch.cuda.make_graphed_callables(model, (sample,))
    return graphed
"""

RESUME = """
import torch


def train(model, optimizer, loader, path):
    scaler = torch.amp.GradScaler("cuda")
    checkpoint = torch.load(path)
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""

# operator -> (template, a piece of text the mutant has)
CASES = {
    "scaler_state_not_restored": (RESUME, '    optimizer.load_state_dict(checkpoint["optimizer"])\n    for x in loader:'),
    "scaler_removed": (TRAIN, "            loss.backward()\n"),
    "scaler_disabled": (TRAIN, "GradScaler('cuda', enabled=False)"),
    "bf16_default_dtype": (TRAIN, "torch.autocast('cuda', dtype=torch.bfloat16)"),
    "closure_to_step": (TRAIN, "scaler.step(optimizer, amp_closure)"),
    "penalty_unscaled": (TRAIN, "torch.autograd.grad(scaler.scale(loss), penalty_params, create_graph=True"),
    "step_every_microbatch": (ACCUMULATE, "        scaler.step(optimizer)\n        if (i + 1) % accum == 0:"),
    "unscale_every_microbatch": (ACCUMULATE, "        scaler.unscale_(optimizer)\n        if (i + 1) % accum == 0:"),
    "zero_grad_every_microbatch": (ACCUMULATE, "        optimizer.zero_grad()\n        if (i + 1) % accum == 0:"),
    "half_model": (TRAIN, "    model.half()\n    optimizer = "),
    "nested_other_device": (TRAIN, 'with torch.autocast("cpu", enabled=False):\n                    loss = loss_fn(out, y)'),
    "autocast_on_tensor": (ACCUMULATE, "loss = torch.autocast('cuda', dtype=torch.float16)(torch.nn.functional.mse_loss("),
    "custom_decorator_dropped": (CUSTOM, "    @staticmethod\n    def backward("),
    "custom_fwd_no_device": (CUSTOM, "    @torch.amp.custom_fwd\n"),
    "deprecated_custom_fwd": (CUSTOM, "    @torch.cuda.amp.custom_fwd\n"),
    "deprecated_cpu_autocast": (SPELLINGS, "with torch.cpu.amp.autocast(dtype=torch.bfloat16):"),
    "deprecated_grad_scaler": (TRAIN, "scaler = torch.cuda.amp.GradScaler()"),
    "deprecated_state_function": (SPELLINGS, "return torch.get_autocast_gpu_dtype()"),
    "legacy_private_name": (SPELLINGS, "from torch.cuda.amp.grad_scaler import OptState"),
    "accelerate_scaler": (ACCELERATE, "accelerator.backward(amp_scaler.scale(loss))"),
    "graphed_with_cache": (GRAPHED, "with torch.autocast('cuda'):"),
    "fsdp_plain_scaler": (FSDP, 'scaler = torch.amp.GradScaler("cuda")'),
    "deepspeed_under_autocast": (DEEPSPEED, '    with torch.autocast("cuda", dtype=torch.float16):\n            loss = engine(batch)'),
    "fsdp2_fp16_policy": (FSDP2, "MixedPrecisionPolicy(param_dtype=torch.float16)"),
    "apex_recipe": (TRAIN, "with apex_amp.scale_loss(loss, optimizer) as scaled_loss:"),
}
# Mutants amp-lint does not report yet (bench/results/inject-results-rules.md names the principle): the test
# flips to a failure (strict) when the tool learns them, so that this list stays true. (Empty since issue 46 made
# AMP080's findings proved: `scaler_state_not_restored` is a default finding now.)
MISSED: dict = {}


def test_every_default_rule_has_an_operator():
    from amp_lint import rules

    default = set(rules.default_codes()) - set(rules.preview_codes())
    measured = {code for codes in inject_ops.EXPECTED.values() for code in codes}
    assert default - measured == set()


def test_the_new_operators_are_registered_with_their_rule_and_principle():
    new = {**inject_ops_rules.OPERATORS_MORE, **inject_ops_frameworks.OPERATORS_MORE}
    assert sorted(new) == sorted(CASES)
    for op in new:
        assert inject_ops.OPERATORS[op] is new[op] and inject_ops.EXPECTED[op] and op in inject_ops.PRINCIPLE


def _mutant(op: str):
    template, piece = CASES[op]
    found = inject_ops.mutants(template, "pkg/train.py", [op])
    assert found, f"{op}: no site in its template"
    mutant = found[0]
    ast.parse(mutant.text)
    assert mutant.text != template and piece in mutant.text, mutant.text
    return template, mutant


@pytest.mark.parametrize("op", sorted(CASES))
def test_each_operator_makes_its_mistake_at_the_templates_site(op):
    _mutant(op)


def test_sites_the_rules_leave_alone_by_design_are_none():
    # A version fallback is left alone by the deprecation rules: no deprecated spelling is injected there.
    shim = "import torch\n\ntry:\n    S = torch.amp.GradScaler('cuda')\nexcept AttributeError:\n    S = None\n"
    assert not inject_ops.mutants(shim, "m.py", ["deprecated_grad_scaler"])
    # AMP077 is silent wherever torch's autocast runs beside apex: a file with another autocast gives no site.
    extra = TRAIN + "\n\n@torch.autocast('cuda')\ndef f(x):\n    return x\n"
    assert not inject_ops.mutants(extra, "m.py", ["apex_recipe"])
    # A float32 FSDP2 policy is another choice, and a file that never trains shows no AMP094 bug.
    assert not inject_ops.mutants(FSDP2.replace("torch.bfloat16", "torch.float32"), "m.py", ["fsdp2_fp16_policy"])
    assert not inject_ops.mutants(FSDP2.replace("loss.backward()", "pass"), "m.py", ["fsdp2_fp16_policy"])
    # A DeepSpeed config out of sight may enable torch_autocast, which tolerates an outer autocast.
    hidden = DEEPSPEED.replace('config = {"train_batch_size": 8, "fp16": {"enabled": True}}', "config = load()")
    assert not inject_ops.mutants(hidden, "m.py", ["deepspeed_under_autocast"])


def test_amp_lint_reports_each_operators_rule_on_its_mutant(tmp_path: Path):
    """One amp-lint run over every template and mutant, each in a folder of its own."""
    places = {}
    for op in sorted(CASES):
        template, mutant = _mutant(op)
        for kind, text in (("original", template), ("mutant", mutant.text)):
            folder = tmp_path / f"{op}-{kind}"
            folder.mkdir()
            (folder / "train.py").write_text(text)
            places[(op, kind)] = f"{op}-{kind}"
    run = subprocess.run(
        [sys.executable, "-m", "amp_lint", "--isolated", "--no-cache", "--output-format", "json", "--exit-zero", "."],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )
    findings = json.loads(run.stdout)

    def count(op: str, kind: str) -> int:
        return sum(
            1 for f in findings
            if Path(f["filename"]).parent.name == places[(op, kind)] and f["code"] in inject_ops.EXPECTED[op]
            and f.get("confidence", "high") == "high"
        )

    caught = {op for op in CASES if count(op, "mutant") > count(op, "original")}
    assert caught == set(CASES) - set(MISSED), {"missed": sorted(set(CASES) - caught), "now caught": sorted(caught & set(MISSED))}


def test_no_float32_island_is_injected_into_a_region_that_is_itself_off():
    off = TRAIN.replace('with torch.autocast("cuda"):', 'with torch.autocast("cuda", enabled=False):')
    assert not inject_ops.mutants(off, "m.py", ["nested_other_device"])
    assert inject_ops.mutants(TRAIN.replace('torch.autocast("cuda")', 'torch.autocast("cuda", enabled=flag)'), "m.py", ["nested_other_device"])


def test_a_catch_is_judged_in_the_definition_of_a_twice_defined_function_that_holds_the_site():
    """`def decode()` in an `if` and again in its `else` (one name, two spans): the site's own span counts."""
    import inject_compare

    text = "if a:\n    def decode():\n        x = 1\nelse:\n    def decode():\n        y = 2\n        z = 3\n"
    assert inject_compare._span(text, "decode", 6) == (5, 7)
    assert inject_compare._span(text, "decode", 3) == (2, 3)
