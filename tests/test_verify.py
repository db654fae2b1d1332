"""Tests for `amp-lint verify`: the bootstrap's step recording, the runner's verdicts, and the command line.

The runner tests feed hand-written AMP programs through `verify_scripts(converter=...)`, so they do not depend on
`amp_lint.engine.convert`; only the end-to-end test over the bundled scripts needs it (and is skipped without it).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from amp_lint.verify import (
    BUNDLED_SCRIPTS,
    CRASHED,
    EQUIVALENT,
    NOT_EQUIVALENT,
    RunRecord,
    ScriptResult,
    VerifyReport,
    verify_scripts,
)
from amp_lint.verify import cli as verify_cli
from amp_lint.verify import runner

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="amp-lint verify runs training scripts, which needs torch"
)


@pytest.fixture(autouse=True)
def one_thread_per_child(monkeypatch):
    """The training runs here are tiny: one thread each is fastest, and steady on a busy machine."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


# Two optimizers stepped in turn (GAN-style), two losses per step, fp16 CPU autocast and a GradScaler whose
# initial scale is so large that the first steps overflow and are skipped. It logs its own losses so the test can
# check what the bootstrap recorded, and would run 1000 steps if not stopped.
TWO_OPTIMIZER_SCRIPT = """
import sys
import torch

log = open(sys.argv[1], "w")
torch.manual_seed(0)
net_a, net_b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
opt_a = torch.optim.SGD(net_a.parameters(), lr=0.01)
opt_b = torch.optim.SGD(net_b.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for step in range(1000):
    with torch.autocast("cpu", dtype=torch.float16):
        loss_a = torch.nn.functional.mse_loss(net_a(x), y)
    opt_a.zero_grad()
    scaler.scale(loss_a).backward()
    scaler.step(opt_a)
    with torch.autocast("cpu", dtype=torch.float16):
        loss_b = torch.nn.functional.mse_loss(net_b(x), y)
    opt_b.zero_grad()
    scaler.scale(loss_b).backward()
    print(loss_a.item(), loss_b.item(), file=log, flush=True)
    scaler.step(opt_b)
    scaler.update()
"""

# Autocast with a dtype CPU autocast does not support: it warns "... Disabling autocast." and runs in fp32.
# Then the script crashes.
DISABLED_AUTOCAST_SCRIPT = """
import torch

with torch.autocast("cpu", dtype=torch.float32):
    pass
raise ValueError("deliberate failure")
"""

# A regression whose loss is multiplied by 1e-5: Adam does not mind the scale, but in float16 such gradients
# underflow. {setup} and {step} are filled with the fp32 original's code or with an AMP version's.
TINY_SCRIPT_TEMPLATE = """
import torch

torch.manual_seed(0)
x = torch.randn(256, 16)
y = torch.sin(x @ torch.randn(16, 1))
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
{setup}for epoch in range(100):
    optimizer.zero_grad()
{step}"""

TINY_FP32_SCRIPT = TINY_SCRIPT_TEMPLATE.format(
    setup="",
    step="""\
    loss = 1e-5 * torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
)

_SCALER = 'scaler = torch.amp.GradScaler("cpu")\n'
_FP16_FORWARD = """\
    with torch.autocast("cpu", dtype=torch.float16):
        loss = 1e-5 * torch.nn.functional.mse_loss(model(x), y)
"""
AMP_VARIANTS = {
    # The canonical conversion: the scaler lifts the tiny gradients out of float16's underflow range.
    "correct": TINY_SCRIPT_TEMPLATE.format(
        setup=_SCALER,
        step=_FP16_FORWARD + "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n",
    ),
    # float16 autocast without a GradScaler: the gradients underflow to zero and training stalls.
    "no scaler": TINY_SCRIPT_TEMPLATE.format(
        setup="",
        step=_FP16_FORWARD + "    loss.backward()\n    optimizer.step()\n",
    ),
    # scaler.update() never called: the second scaler.step() raises.
    "never updated": TINY_SCRIPT_TEMPLATE.format(
        setup=_SCALER,
        step=_FP16_FORWARD + "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n",
    ),
}


def run_bootstrap(script: Path, out: Path, *args: str, steps: int = 12) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "amp_lint.verify.bootstrap", "--script", str(script), "--steps", str(steps),
               "--warmup", "2", "--out", str(out), "--", *args]  # fmt: skip
    environment = runner.child_environment("cpu")  # what the runner gives its children: amp_lint importable
    return subprocess.run(command, capture_output=True, text=True, cwd=script.parent, env=environment)


@needs_torch
def test_bootstrap_records_one_summed_loss_per_round_of_optimizers_and_stops_at_steps(tmp_path):
    script = tmp_path / "two_optimizers.py"
    script.write_text(TWO_OPTIMIZER_SCRIPT)
    log = tmp_path / "losses.log"

    child = run_bootstrap(script, tmp_path / "result.json", str(log), steps=12)

    assert child.returncode == 0, child.stderr
    record = RunRecord.read(tmp_path / "result.json")
    assert record.status == "ok" and record.error is None
    assert record.reached_step_limit
    assert record.optimizer_steps == 24  # both optimizers, skipped steps included
    assert len(record.losses) == 12
    logged = [sum(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(logged) == 12  # stopped inside the 12th step's second optimizer step, not later
    assert record.losses == pytest.approx(logged, rel=1e-6)
    assert record.skipped_steps[:2] == [0, 1]  # the scale starts at 2**20: float16 gradients overflow
    assert len(record.skipped_steps) < 12
    assert record.autocast == [{"device_type": "cpu", "dtype": "float16", "enabled": True}]
    assert record.device == "cpu"
    assert record.seconds_per_step is not None and record.seconds_per_step > 0
    assert record.peak_memory_bytes and record.memory_source == "peak RSS"
    assert "step 12/12" in child.stderr


@needs_torch
def test_bootstrap_reports_a_crash_and_autocast_disabling_itself(tmp_path):
    script = tmp_path / "crashes.py"
    script.write_text(DISABLED_AUTOCAST_SCRIPT)

    child = run_bootstrap(script, tmp_path / "result.json")

    assert child.returncode == 1
    record = RunRecord.read(tmp_path / "result.json")
    assert record.status == "crashed"
    assert record.error["type"] == "ValueError" and record.error["message"] == "deliberate failure"
    assert any("deliberate failure" in line for line in record.error["traceback_tail"])
    assert record.autocast == [{"device_type": "cpu", "dtype": "float32", "enabled": False}]
    assert len(record.disabling_warnings) == 1 and "Disabling autocast" in record.disabling_warnings[0]
    assert record.losses == [] and not record.reached_step_limit


@needs_torch
@pytest.mark.parametrize(
    ("variant", "status", "explanation"),
    [
        ("correct", EQUIVALENT, None),
        ("no scaler", NOT_EQUIVALENT, "the AMP loss did not fall clearly"),
        ("never updated", CRASHED, "step() has already been called since the last update()"),
    ],
)
def test_runner_judges_hand_converted_variants(tmp_path, variant, status, explanation):
    script = tmp_path / "tiny_regression.py"
    script.write_text(TINY_FP32_SCRIPT)
    requests, progress = [], []

    def converter(source, *, amp_dtype, amp_device):
        requests.append((source, amp_dtype, amp_device))
        return SimpleNamespace(code=AMP_VARIANTS[variant], converted=True, reasons=[])

    report = verify_scripts(
        [script],
        device="cpu",
        dtype="float16",
        steps=40,
        warmup=5,
        last_k=5,
        converter=converter,
        keep_converted=tmp_path / "converted",
        progress=progress.append,
    )

    assert requests == [(TINY_FP32_SCRIPT, "float16", "cpu")]
    assert (tmp_path / "converted" / "tiny_regression.py").read_text() == AMP_VARIANTS[variant]
    [result] = report.results
    assert result.status == status, result.reasons or result.crash
    assert report.exit_code == {EQUIVALENT: 0, NOT_EQUIVALENT: 1, CRASHED: 2}[status]
    text = runner.format_text(report)
    assert "Note: CPU runs use CPU autocast" in text
    assert "[1/1] tiny_regression.py: fp32 run, step 40/40" in progress
    if status == EQUIVALENT:
        assert result.relative_difference <= 0.05 and len(result.amp.losses) == 40
        assert "[1/1] tiny_regression.py: AMP run, step 40/40" in progress
    if status == NOT_EQUIVALENT:
        assert any(reason.startswith(explanation) for reason in result.reasons)
    if status == CRASHED:
        assert result.fp32.status == "ok" and result.amp.status == "crashed"
        assert explanation in result.crash and explanation in text


FALLING = [2.0] * 10 + [1.0] * 10  # first-10 mean 2.0, last-10 mean 1.0
BF16_AUTOCAST = [{"device_type": "cpu", "dtype": "bfloat16", "enabled": True}]


@pytest.mark.parametrize(
    ("amp_run", "reason"),
    [
        (dict(losses=FALLING, autocast=BF16_AUTOCAST), None),
        (dict(losses=[None, None, *FALLING[2:]], skipped_steps=[0, 1], autocast=BF16_AUTOCAST), None),
        (dict(losses=[x * 1.06 for x in FALLING], autocast=BF16_AUTOCAST), "AMP final loss 1.06 differs"),
        (dict(losses=[*FALLING[:12], None, *FALLING[13:]], autocast=BF16_AUTOCAST), "1 non-finite"),
        (dict(losses=[1.0] * 20, autocast=BF16_AUTOCAST), "the AMP loss did not fall clearly"),
        (dict(losses=FALLING), "the converted script never entered an enabled autocast region"),
        (dict(losses=FALLING, autocast=[{**BF16_AUTOCAST[0], "dtype": "float16"}]), "autocast ran with float16"),
        (
            dict(losses=FALLING, autocast=BF16_AUTOCAST, disabling_warnings=["CUDA is not available. Disabling."]),
            "AMP switched itself off: CUDA is not available. Disabling.",
        ),
    ],
    ids=["same", "skipped-at-start", "rtol", "nan-later", "flat", "no-autocast", "wrong-dtype", "disabled"],
)
def test_judge(amp_run, reason):
    result = ScriptResult(Path("s.py"), CRASHED, fp32=RunRecord("ok", losses=FALLING), amp=RunRecord("ok", **amp_run))

    runner.judge(result, rtol=0.05, last_k=10, dtype="bfloat16")

    if reason is None:
        assert (result.status, result.reasons) == (EQUIVALENT, [])
    else:
        assert result.status == NOT_EQUIVALENT
        assert any(line.startswith(reason) for line in result.reasons), result.reasons


def test_runner_does_not_run_a_script_the_conversion_refused(tmp_path):
    script = tmp_path / "closure.py"
    script.write_text("raise AssertionError('must not run')\n")
    refused = SimpleNamespace(code="", converted=False, reasons=["optimizer.step(closure) (LBFGS)"])

    report = verify_scripts([script], device="cpu", steps=20, warmup=2, last_k=5, converter=lambda *a, **k: refused)

    [result] = report.results
    assert result.status == NOT_EQUIVALENT and result.fp32 is None
    assert result.reasons == ["the conversion converted nothing: optimizer.step(closure) (LBFGS)"]


def _fake_report(*statuses: str) -> VerifyReport:
    results = [
        ScriptResult(Path(f"script_{index}.py"), status, crash="boom" if status == CRASHED else None)
        for index, status in enumerate(statuses)
    ]
    return VerifyReport("cpu", "bfloat16", 20, 2, 0.05, 5, results, notes=[])


@pytest.mark.parametrize(
    ("statuses", "exit_code"),
    [((EQUIVALENT, EQUIVALENT), 0), ((EQUIVALENT, NOT_EQUIVALENT), 1), ((NOT_EQUIVALENT, CRASHED), 2)],
)
def test_cli_exit_code_follows_the_worst_verdict(monkeypatch, statuses, exit_code):
    calls = []

    def fake_verify_scripts(paths, **options):
        calls.append((paths, options))
        return _fake_report(*statuses)

    monkeypatch.setattr(runner, "verify_scripts", fake_verify_scripts)

    result = CliRunner().invoke(verify_cli.verify, ["--device", "cpu", "--steps", "20", "--", "--epochs", "3"])

    assert result.exit_code == exit_code, result.output
    [(paths, options)] = calls
    assert paths == () and options["script_args"] == ["--epochs", "3"] and options["steps"] == 20
    assert "script_0.py" in result.output


def test_cli_json_output(monkeypatch):
    monkeypatch.setattr(runner, "verify_scripts", lambda paths, **options: _fake_report(EQUIVALENT))

    result = CliRunner().invoke(verify_cli.verify, ["--output-format", "json"])

    assert result.exit_code == 0
    assert json.loads(result.stdout)["scripts"][0]["status"] == EQUIVALENT


@pytest.mark.parametrize(
    ("missing", "arguments", "message"),
    [
        ("torch", [], verify_cli.TORCH_MISSING),
        ("matplotlib", ["--plot", "plots"], verify_cli.MATPLOTLIB_MISSING),
    ],
)
def test_cli_explains_a_missing_dependency_and_exits_2(monkeypatch, missing, arguments, message):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real_find_spec(name))
    monkeypatch.setattr(runner, "verify_scripts", lambda *a, **k: pytest.fail("must not run"))

    result = CliRunner().invoke(verify_cli.verify, arguments)

    assert result.exit_code == 2
    assert result.output.strip() == message


def test_loss_plots(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    ran = ScriptResult(Path("a/train.py"), EQUIVALENT, fp32=RunRecord("ok", losses=FALLING), amp=RunRecord("ok"))
    refused = ScriptResult(Path("b/train.py"), NOT_EQUIVALENT)
    same_name = ScriptResult(Path("c/train.py"), EQUIVALENT, fp32=RunRecord("ok", losses=FALLING))
    report = VerifyReport("cpu", "bfloat16", 20, 2, 0.05, 10, [ran, refused, same_name], notes=[])

    written = runner.write_loss_plots(report, tmp_path / "plots")

    assert written == [tmp_path / "plots" / "train.png", tmp_path / "plots" / "train-3.png"]
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in written)


def test_cli_usage_error_exits_2():
    result = CliRunner().invoke(verify_cli.verify, ["--device", "cpu", "--steps", "20", "--warmup", "20"])

    assert result.exit_code == 2
    assert "--warmup must be at least 1 and below --steps (20)" in result.output


def test_bundled_scripts_are_plain_fp32_training_scripts():
    scripts = sorted(BUNDLED_SCRIPTS.glob("*.py"))
    assert len(scripts) >= 6
    for script in scripts:
        source = script.read_text()
        assert source.startswith('"""README: ')
        tree = ast.parse(source)
        names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert not names & {"autocast", "GradScaler", "half", "bfloat16", "float16"}, script.name
        assert 'os.environ.get("AMP_LINT_VERIFY_DEVICE")' in source and "torch.manual_seed(" in source


@needs_torch
def test_verify_bundled_scripts_end_to_end():
    pytest.importorskip("amp_lint.engine.convert", reason="the fp32 -> AMP conversion (amp_lint.engine.convert) is not written yet")

    result = CliRunner().invoke(
        verify_cli.verify, ["--device", "cpu", "--steps", "60", "--warmup", "5", "--output-format", "json"]
    )

    report = json.loads(result.stdout)
    verdicts = {
        Path(entry["script"]).name: (entry["status"], entry["reasons"], entry["crash"]) for entry in report["scripts"]
    }
    assert len(verdicts) == len(list(BUNDLED_SCRIPTS.glob("*.py")))
    assert all(status == EQUIVALENT for status, _, _ in verdicts.values()), verdicts
    assert result.exit_code == 0
