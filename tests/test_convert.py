"""The fp32 -> AMP conversion (rule AMP100): golden fixtures through the real command line, then the
converted scripts run.

- `fixtures/convert/NAME.in.py` + `NAME.out.py`: the first line, `# amp-lint-fix: --select AMP100
  --unsafe-fixes [--amp-dtype bfloat16] [--amp-device cpu]`, gives the flags; the test runs
  `amp-lint --isolated --no-cache --fix FLAGS` on a copy and compares the bytes with `NAME.out.py`. It then
  checks that the output parses, that a second conversion changes nothing, that AMP100 no longer fires and
  that every default rule is silent on it. A `refuse_*` fixture must come out unchanged, still reported by
  AMP100 with the reason.
- A fixture with an `# amp-lint-run[: LABEL]` line is a complete script. It is converted for the CPU in
  both modes (bfloat16 autocast; float16 autocast with `GradScaler("cpu")`) and run; the values it prints
  after LABEL (default `loss`) must fall, autocast must have run with the requested dtype, and no autocast
  or GradScaler warning may say it disabled itself. The bundled `amp-lint verify` scripts run the same way
  for one epoch.

`AMP_LINT_UPDATE_SNAPSHOTS=1 pytest tests/test_convert.py` rewrites the `.out.py` files of the fixtures
that are not refusals.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Tuple

import libcst as cst
import pytest
from click.testing import CliRunner

from amp_lint.cli import main
from amp_lint.engine.convert import convert_source

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "convert"
CONVERT_FIXTURES = sorted(FIXTURES.glob("*.in.py"))
VERIFY_SCRIPTS = sorted((ROOT / "amp_lint" / "verify" / "scripts").glob("*.py"))

UPDATE = os.environ.get("AMP_LINT_UPDATE_SNAPSHOTS") == "1"
BASE_OPTIONS = ["--isolated", "--no-cache", "--color", "never"]
_FIX_HEADER = re.compile(r"^# amp-lint-fix: (?P<flags>.+?)\r?$", re.M)
_RUN_HEADER = re.compile(r"^# amp-lint-run(?::[ \t]*(?P<label>\S+))?\r?$", re.M)
MODES = ("bfloat16", "float16")
SCRIPT_DEVICE = "float16-script-device"
_LITERAL_SCALER = re.compile(r"GradScaler\((['\"])")


def amp_lint(*args: str) -> Tuple[int, str]:
    """The real command line, in-process (the same entry point as `python -m amp_lint`)."""
    result = CliRunner().invoke(main, [*BASE_OPTIONS, *args], catch_exceptions=False)
    return result.exit_code, result.output


def fix_flags(source: str) -> List[str]:
    match = _FIX_HEADER.search("\n".join(source.splitlines()[:3]))
    assert match, "no `# amp-lint-fix: FLAGS` line at the top"
    return shlex.split(match.group("flags"))


def select_flags(flags: List[str]) -> List[str]:
    """The flags without --unsafe-fixes (for a plain check)."""
    return [f for f in flags if f != "--unsafe-fixes"]


def byte_diff(expected: bytes, actual: bytes) -> str:
    show = lambda data: [repr(line)[2:-1] + "\n" for line in data.splitlines(keepends=True)]  # noqa: E731
    return "".join(difflib.unified_diff(show(expected), show(actual), "expected", "actual"))


def findings(path: Path, *flags: str) -> List[str]:
    code, out = amp_lint("--output-format", "concise", *flags, str(path))
    assert code in (0, 1), f"amp-lint failed (exit {code}):\n{out}"
    prefix = f"{path}:"
    return [line[len(prefix) :] for line in out.splitlines() if line.startswith(prefix)]


# --- golden fixtures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", CONVERT_FIXTURES, ids=[p.name[: -len(".in.py")] for p in CONVERT_FIXTURES])
def test_conversion_matches_golden_output(path: Path, tmp_path: Path):
    source = path.read_bytes()
    flags = fix_flags(source.decode("utf-8"))
    refusal = path.name.startswith("refuse_")
    expected_path = path.with_name(path.name[: -len(".in.py")] + ".out.py")
    target = tmp_path / (path.name[: -len(".in.py")] + ".py")
    shutil.copyfile(path, target)

    code, out = amp_lint("--fix", *flags, str(target))
    assert code in (0, 1), f"amp-lint --fix failed (exit {code}):\n{out}"
    converted = target.read_bytes()
    if UPDATE and not refusal:
        expected_path.write_bytes(converted)
    assert expected_path.exists(), f"{expected_path.name} is missing (AMP_LINT_UPDATE_SNAPSHOTS=1 writes it)"
    expected = expected_path.read_bytes()
    assert converted == expected, byte_diff(expected, converted)
    cst.parse_module(converted)

    remaining = [line for line in findings(target, *select_flags(flags)) if " AMP100 " in line]
    if refusal:
        assert expected == source, f"{expected_path.name} must equal its input: a refusal changes nothing"
        assert remaining and all("not converted: " in line for line in remaining), remaining
        assert all(" [*] " not in line for line in remaining), "a refusal must not offer a fix"
    else:
        assert converted != source, "nothing was converted"
        assert remaining == [], "AMP100 still fires after the conversion:\n" + "\n".join(remaining)

    # Idempotent: a second conversion changes nothing.
    code, out = amp_lint("--fix", *flags, str(target))
    assert code in (0, 1), out
    assert target.read_bytes() == converted, "a second conversion changed the file again"

    # Every default rule is silent on the result.
    assert findings(target) == [], "default rules fire on the converted code"


@pytest.mark.parametrize("path", CONVERT_FIXTURES, ids=[p.name[: -len(".in.py")] for p in CONVERT_FIXTURES])
def test_fixture_input_is_plain_fp32_python(path: Path):
    source = path.read_text(encoding="utf-8")
    fix_flags(source)
    names = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

    cst.parse_module(source).visit(Names())
    assert not names & {"autocast", "GradScaler"}, "an input fixture must be fp32 code"


def test_python_dash_m_entry_point(tmp_path: Path):
    """The same conversion through `python -m amp_lint`, in a real subprocess."""
    path = FIXTURES / "typical.in.py"
    target = tmp_path / "typical.py"
    shutil.copyfile(path, target)
    flags = fix_flags(path.read_text(encoding="utf-8"))
    run = subprocess.run(
        [sys.executable, "-m", "amp_lint", *BASE_OPTIONS, "--fix", *flags, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert target.read_bytes() == (FIXTURES / "typical.out.py").read_bytes()


# --- the library function -----------------------------------------------------------------------------


def test_convert_source_converts_and_reports():
    source = (FIXTURES / "typical.in.py").read_text(encoding="utf-8")
    result = convert_source(source)
    assert result.converted and result.reasons == []
    assert result.code == (FIXTURES / "typical.out.py").read_text(encoding="utf-8")
    again = convert_source(result.code)
    assert not again.converted and again.code == result.code


def test_convert_source_explains_a_refusal():
    source = (FIXTURES / "refuse_float64.in.py").read_text(encoding="utf-8")
    result = convert_source(source)
    assert not result.converted and result.code == source
    assert len(result.reasons) == 1 and "float64 on purpose" in result.reasons[0]


def test_convert_source_without_a_training_loop():
    result = convert_source("import torch\nprint(torch.__version__)\n")
    assert not result.converted and result.reasons


def test_convert_source_bfloat16_cpu_has_no_scaler():
    source = textwrap.dedent(
        """
        import torch
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        """
    )
    result = convert_source(source, amp_dtype="bfloat16", amp_device="cpu")
    assert result.converted
    assert 'torch.amp.autocast("cpu", dtype=torch.bfloat16)' in result.code
    assert "GradScaler" not in result.code and "loss.backward()" in result.code


def test_convert_source_rejects_unknown_dtype():
    with pytest.raises(ValueError):
        convert_source("", amp_dtype="float8")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=[p.name for p in VERIFY_SCRIPTS])
def test_verify_scripts_convert_cleanly(script: Path, mode: str, tmp_path: Path):
    """`amp-lint verify` converts its bundled scripts with `convert_source`: each must convert, cleanly."""
    result = convert_source(script.read_text(encoding="utf-8"), amp_dtype=mode, amp_device="cpu")
    assert result.converted, result.reasons
    assert result.reasons == []
    cst.parse_module(result.code)
    target = tmp_path / script.name
    target.write_text(result.code, encoding="utf-8")
    assert findings(target) == []
    assert ("GradScaler" in result.code) == (mode == "float16")


# --- silent on code that is not fp32 training --------------------------------------------------------

# A plain fp32 loop (the same in every case below), after the lines that make the file mixed or low precision.
_FP32_LOOP = """
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""
NOT_FP32 = {
    # Half-precision models: the weights are float16 or bfloat16 already.
    "model.half()": "import torch\nmodel = Net().cuda()\nmodel.half()\n",
    "Net().half().cuda()": "import torch\nmodel = Net().half().cuda()\n",
    ".to(torch.float16)": "import torch\nmodel = Net().to(torch.float16)\n",
    ".to(device, torch.half)": "import torch\nmodel = Net().to('cuda', torch.half)\n",
    ".to(dtype=torch.bfloat16)": "import torch\nmodel = Net().to(dtype=torch.bfloat16)\n",
    ".bfloat16()": "import torch\nmodel = Net().bfloat16()\n",
    "from torch import float16": "import torch\nfrom torch import float16 as f16\nmodel = Net().to(f16)\n",
    ".type(torch.cuda.HalfTensor)": "import torch\nmodel = Net().type(torch.cuda.HalfTensor)\n",
    # Another library's mixed precision.
    "apex amp.scale_loss": (
        "import torch\nfrom apex import amp\nmodel, optimizer = amp.initialize(model, optimizer, opt_level='O2')\n"
    ),
    "DeepSpeed fp16": (
        "import torch\nimport deepspeed\n"
        "model, optimizer, _, _ = deepspeed.initialize(model=model, config={'fp16': {'enabled': True}})\n"
    ),
    "ColossalAI": (
        "import torch\nfrom colossalai.booster import Booster\nfrom colossalai.booster.plugin import TorchDDPPlugin\n"
        "booster = Booster(plugin=TorchDDPPlugin(), mixed_precision='fp16')\n"
        "model, optimizer, loss_fn, loader, _ = booster.boost(model, optimizer, loss_fn, loader)\n"
    ),
    "Megatron Float16Optimizer": (
        "import torch\nfrom megatron.core.optimizer import Float16OptimizerWithFloat16Params\n"
        "optimizer = Float16OptimizerWithFloat16Params(torch.optim.Adam(model.parameters()), config, None, None)\n"
    ),
    "FP16_Optimizer wrapper": (
        "import torch\noptimizer = FP16_Optimizer(torch.optim.Adam(model.parameters()), dynamic_loss_scale=True)\n"
    ),
    "FSDP MixedPrecision": (
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision\n"
        "model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))\n"
    ),
    "FSDP2 MixedPrecisionPolicy": (
        "import torch\nfrom torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy\n"
        "fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))\n"
    ),
    "int8 model": (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', load_in_8bit=True)\n"
    ),
    "dynamic quantization": (
        "import torch\nmodel = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)\n"
    ),
}
# Autocast entered where AMP100 cannot follow it: the loop itself is written differently.
NOT_FP32_LOOPS = {
    "TransformerEngine fp8_autocast": """
import torch
import transformer_engine.pytorch as te
for x, y in loader:
    optimizer.zero_grad()
    with te.fp8_autocast(enabled=True):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
    "autocast in a helper method": """
import torch
class Trainer:
    def step(self, x, y):
        self.optimizer.zero_grad()
        with self.autocast_ctx():
            loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
""",
    "autocast context built elsewhere": """
import contextlib
import torch
amp_ctx = contextlib.nullcontext() if args.fp32 else torch.autocast("cuda", dtype=torch.bfloat16)
for x, y in loader:
    optimizer.zero_grad()
    with amp_ctx:
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
    "autocast in a wrapper function": """
import torch
from utils import maybe_autocast
for x, y in loader:
    optimizer.zero_grad()
    with maybe_autocast(args):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
    "pytest unit test taking one step": """
import torch
def test_one_step_changes_the_weights():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.clone()
    model(torch.ones(3, 2)).sum().backward()
    optimizer.step()
    assert not torch.equal(before, model.weight)
""",
    "unittest TestCase helper": """
import unittest
import torch
class TestOptimizer(unittest.TestCase):
    def _train(self, model, optimizer, x, y):
        for _ in range(3):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
""",
}


def _not_fp32_sources():
    cases = [(name, prelude + _FP32_LOOP) for name, prelude in NOT_FP32.items()]
    return cases + list(NOT_FP32_LOOPS.items())


@pytest.mark.parametrize(("name", "source"), _not_fp32_sources(), ids=[name for name, _ in _not_fp32_sources()])
def test_silent_on_code_that_does_not_train_in_fp32(name: str, source: str, tmp_path: Path):
    """The issue's "Not fp32 at all" list: AMP100 says nothing (no "runs in full fp32", no refusal) and converts
    nothing, although the file has a training step it would otherwise convert (the iteration is found)."""
    from amp_lint.analysis.builder import build_model
    from amp_lint.conversion.training_steps import find_iterations

    assert find_iterations(build_model(cst.parse_module(source))), "the case must hold a training step"
    target = tmp_path / "train.py"
    target.write_text(source, encoding="utf-8")
    assert [line for line in findings(target, "--select", "AMP100") if " AMP100 " in line] == []
    result = convert_source(source)
    assert not result.converted and result.code == source


def test_the_fp32_loop_of_the_silence_cases_is_reported_on_its_own(tmp_path: Path):
    """The control: without the lines that make it mixed precision, the same loop is reported and converted."""
    target = tmp_path / "train.py"
    target.write_text("import torch\nmodel = Net().cuda()\n" + _FP32_LOOP, encoding="utf-8")
    assert [line for line in findings(target, "--select", "AMP100") if " AMP100 " in line]
    assert convert_source(target.read_text(encoding="utf-8")).converted


# --- the converted scripts run ------------------------------------------------------------------------

RUNNABLE = [p for p in CONVERT_FIXTURES if _RUN_HEADER.search(p.read_text(encoding="utf-8"))]
# The verify scripts train for 32 steps an epoch (tens of seconds on a CPU): run them on request only.
RUN_VERIFY_SCRIPTS = os.environ.get("AMP_LINT_RUN_VERIFY_SCRIPTS") == "1"
# oneDNN has no float16 LSTM kernel on most CPUs: CPU float16 autocast cannot run an LSTM there (CUDA can).
_NO_CPU_FP16_KERNEL = "could not create a primitive descriptor for the LSTM"

# Runs every converted script in one interpreter (importing torch once), each with its own argv, working
# directory, captured output and warnings; records which autocast configurations were entered.
_RUNNER = r'''
import contextlib, io, json, os, runpy, sys, time, traceback, warnings
import torch

torch.set_num_threads(2)
entered = []
_original_enter = torch.amp.autocast_mode.autocast.__enter__

def _enter(self):
    entered.append([str(self.device), str(self.fast_dtype).replace("torch.", ""), bool(self._enabled)])
    return _original_enter(self)

torch.amp.autocast_mode.autocast.__enter__ = _enter
scalers = []
_original_scaler_init = torch.amp.GradScaler.__init__

def _scaler_init(self, *args, **kwargs):
    scalers.append(self)
    return _original_scaler_init(self, *args, **kwargs)

torch.amp.GradScaler.__init__ = _scaler_init
jobs_path, results_path = sys.argv[1], sys.argv[2]
jobs = json.load(open(jobs_path))
results = {}
for job in jobs:
    entered.clear()
    scalers.clear()
    started = time.perf_counter()
    out = io.StringIO()
    error = None
    os.chdir(job["cwd"])
    sys.argv = [job["script"], *job["args"]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(job["script"], run_name="__main__")
        except SystemExit as exit:
            if exit.code not in (None, 0):
                error = f"SystemExit({exit.code})"
        except BaseException:
            error = traceback.format_exc()
    results[job["key"]] = {
        "stdout": out.getvalue(),
        "error": error,
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "autocast": [list(e) for e in {tuple(e) for e in entered}],
        "seconds": time.perf_counter() - started,
        "scalers": len(scalers),
    }
json.dump(results, open(results_path, "w"))
'''


def _run_label(path: Path) -> str:
    match = _RUN_HEADER.search(path.read_text(encoding="utf-8"))
    assert match
    return match.group("label") or "loss"


def _values(stdout: str, label: str) -> List[float]:
    number = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
    pattern = re.compile(rf"(?<![\w]){re.escape(label)}[ =:]+(?P<value>{number})", re.I)
    return [float(m.group("value")) for m in pattern.finditer(stdout)]


@pytest.fixture(scope="module")
def script_runs(tmp_path_factory) -> Dict[str, dict]:
    """Convert every runnable fixture (and the verify scripts) in both modes, then run them all at once."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    work = tmp_path_factory.mktemp("converted")
    jobs = []
    sources = [(p.name[: -len(".in.py")], p, []) for p in RUNNABLE]
    if RUN_VERIFY_SCRIPTS:
        sources += [(f"verify-{p.stem}", p, ["--epochs", "1"]) for p in VERIFY_SCRIPTS]
    for name, path, args in sources:
        for mode in (*MODES, SCRIPT_DEVICE) if path in RUNNABLE else MODES:
            if mode == SCRIPT_DEVICE:  # float16 and the script's own device expression, as --fix writes it
                result = convert_source(path.read_text(encoding="utf-8"))
                if _LITERAL_SCALER.search(result.code):
                    continue
            else:
                result = convert_source(path.read_text(encoding="utf-8"), amp_dtype=mode, amp_device="cpu")
            assert result.converted, (name, result.reasons)
            folder = work / f"{name}-{mode}"
            folder.mkdir()
            script = folder / f"{name}.py"
            script.write_text(result.code, encoding="utf-8")
            jobs.append({"key": f"{name}-{mode}", "script": str(script), "cwd": str(folder), "args": args})
    (work / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    (work / "runner.py").write_text(_RUNNER, encoding="utf-8")
    env = {**os.environ, "AMP_LINT_VERIFY_DEVICE": "cpu", "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "0"}
    run = subprocess.run(
        [sys.executable, str(work / "runner.py"), str(work / "jobs.json"), str(work / "results.json")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=work,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((work / "results.json").read_text(encoding="utf-8"))


def _check_run(record: dict, mode: str) -> None:
    if mode in ("float16", "bfloat16") and record["error"] and _NO_CPU_FP16_KERNEL in record["error"]:
        # The kernel is the CPU's (oneDNN builds a low-precision LSTM only where the instruction set has it;
        # this AMD EPYC machine has no bfloat16 one), not the conversion's: the code is the same on any CPU.
        pytest.skip(f"this CPU has no {mode} LSTM kernel (oneDNN): CPU {mode} autocast cannot run an LSTM")
    assert record["error"] is None, record["stdout"][-2000:] + "\n" + record["error"]
    disabling = [w for w in record["warnings"] if "Disabling" in w or "disabling" in w]
    assert disabling == [], disabling
    enabled = [entry for entry in record["autocast"] if entry[2]]
    assert enabled, "the converted script never entered an enabled autocast region"
    assert {tuple(entry[:2]) for entry in enabled} == {("cpu", mode)}, record["autocast"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", RUNNABLE, ids=[p.name[: -len(".in.py")] for p in RUNNABLE])
def test_converted_script_runs_and_learns(script_runs, path: Path, mode: str):
    name = path.name[: -len(".in.py")]
    record = script_runs[f"{name}-{mode}"]
    _check_run(record, mode)
    label = _run_label(path)
    values = _values(record["stdout"], label)
    assert len(values) >= 4, f"too few `{label}` values printed:\n{record['stdout']}"
    assert all(math.isfinite(v) for v in values), values
    first, last = sum(values[:2]) / 2, sum(values[-2:]) / 2
    assert last < first, f"`{label}` did not fall: {values}"


@pytest.mark.skipif(not RUN_VERIFY_SCRIPTS, reason="set AMP_LINT_RUN_VERIFY_SCRIPTS=1 to run the verify scripts")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("script", VERIFY_SCRIPTS, ids=[p.name for p in VERIFY_SCRIPTS])
def test_converted_verify_script_runs(script_runs, script: Path, mode: str):
    record = script_runs[f"verify-{script.stem}-{mode}"]
    _check_run(record, mode)
    assert record["stdout"].strip(), "the script printed nothing"


SCRIPT_DEVICE_RUNS = [
    p for p in RUNNABLE if not _LITERAL_SCALER.search(convert_source(p.read_text(encoding="utf-8")).code)
]


@pytest.mark.parametrize("path", SCRIPT_DEVICE_RUNS, ids=[p.name[: -len(".in.py")] for p in SCRIPT_DEVICE_RUNS])
def test_converted_run_keeps_the_device_expression_and_builds_one_scaler(script_runs, path: Path):
    """Converted as `--fix` writes it (no `amp-device`): the script's own device choice, CPU on this machine, and
    one GradScaler for the whole run however often the epoch function is called (counted at run time)."""
    name = path.name[: -len(".in.py")]
    record = script_runs[f"{name}-{SCRIPT_DEVICE}"]
    _check_run(record, "float16")
    assert record["scalers"] == 1, f"{record['scalers']} GradScalers built in one run"
    values = _values(record["stdout"], _run_label(path))
    assert len(values) >= 4 and values[-1] < values[0], values


def test_the_script_device_runs_cover_the_real_shapes():
    names = {p.name[: -len(".in.py")] for p in SCRIPT_DEVICE_RUNS}
    assert {"per_epoch_train_accelerator", "global_optimizer_train_epoch", "checkpoint_resume",
            "trainer_factory_closure"} <= names  # fmt: skip
