"""Tests for `amp-lint verify`: the bootstrap's step recording, the runner's verdicts, and the command line.

The runner tests feed hand-written AMP programs through `--amp-script` or `verify_scripts(converter=...)`; the
judgement tests use synthetic loss curves. Training runs are tiny (a 16-64-1 network, 40 steps) to stay cheap.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from amp_lint.verify import (
    BUNDLED_SCRIPTS,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_EQUIVALENT,
    NOT_RUN,
    RunRecord,
    ScriptResult,
    VerifyReport,
    local_imports,
    reporting,
    runner,
    verify_scripts,
)
from amp_lint.verify import cli as verify_cli

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
    assert record.autocast == [{"device_type": "cpu", "dtype": "float16", "enabled": True, "site": {
        "file": str(script), "line": 13, "code": 'with torch.autocast("cpu", dtype=torch.float16):'}}]  # fmt: skip
    assert record.device == "cpu"
    assert record.grad_scalers == 1 and record.optimizers == 2  # one scaler for the run, two optimizers
    assert record.seconds_per_step is not None and record.seconds_per_step > 0
    assert record.peak_memory_bytes and record.memory_source == "peak RSS"
    assert "step 12/12 seed 0" in child.stderr


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
    [entry] = record.autocast
    assert entry["site"]["line"] == 4 and entry["site"]["code"].startswith('with torch.autocast("cpu"')
    assert {key: entry[key] for key in ("device_type", "dtype", "enabled")} == {
        "device_type": "cpu", "dtype": "float32", "enabled": False}  # fmt: skip
    assert len(record.disabling_warnings) == 1 and "Disabling autocast" in record.disabling_warnings[0]
    assert record.disabling_sites == [entry["site"]]  # the line that asked for it
    assert record.losses == [] and not record.reached_step_limit



@needs_torch
def test_bootstrap_runs_from_the_origin_folder_seeds_everything_and_hooks_autograd(tmp_path):
    """`__file__`, the working directory and imports are the original's; numpy/random/torch seeds are offset per
    run; `torch.autograd.backward` and `torch.autograd.grad` record losses; a converted module replaces the local one."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "data.txt").write_text("3\n")
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "helper.py").write_text("SOURCE = 'original'\n")
    converted_helper = tmp_path / "converted_helper.py"
    converted_helper.write_text("SOURCE = 'converted'\n")
    (project / "train.py").write_text(
        "import os, random, sys, torch\n"
        "from pkg.helper import SOURCE\n"
        "steps = int(open(os.path.join(os.path.dirname(__file__), 'data.txt')).read())\n"
        "torch.manual_seed(1)\n"
        "print('INFO', os.getcwd(), SOURCE, random.random(), torch.rand(1).item(), file=open(sys.argv[1], 'a'))\n"
        "w = torch.nn.Parameter(torch.ones(2))\n"
        "opt = torch.optim.SGD([w], lr=0.1)\n"
        "for step in range(steps):\n"
        "    loss = (w ** 2).sum()\n"
        "    if step % 2:\n"
        "        torch.autograd.backward(loss)\n"
        "    else:\n"
        "        (w.grad,) = torch.autograd.grad(loss, [w])\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    log = tmp_path / "log.txt"
    out = tmp_path / "out.json"
    command = [sys.executable, "-m", "amp_lint.verify.bootstrap", "--script", str(project / "train.py"),
               "--origin", str(project / "train.py"), "--seeds", "0,1", "--steps", "10", "--warmup", "1",
               "--module", f"pkg.helper={converted_helper}", "--out", str(out), "--", str(log)]  # fmt: skip
    child = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=runner.child_environment("cpu"))

    assert child.returncode == 0, child.stderr
    records = runner.read_records(out)
    assert [record.seed for record in records] == [0, 1]
    assert [len(record.losses) for record in records] == [3, 3]  # the script read data.txt next to __file__
    assert records[0].losses == pytest.approx([2.0, 2.0 * 0.8**2, 2.0 * 0.8**4])  # both autograd entry points
    runs = [line.split() for line in log.read_text().splitlines()]
    assert [run[1:3] for run in runs] == [[str(project), "converted"]] * 2
    assert runs[0][3:] != runs[1][3:]  # the script's own seeds are offset per run: random and torch differ


# The pairwise verdicts on hand-written AMP versions (SGD, AdamW) run in tests/test_verify_pairs_sgd.py and
# tests/test_verify_pairs_adamw.py (tests/verify_cases.py): one shared verify run each, so two xdist workers share them.


# A training function called once per epoch, with the device chosen at run time: the shape of pytorch/examples'
# mnist, quickstart and imagenet. 8 batches an epoch: 40 steps run 5 epochs.
PER_EPOCH_SCRIPT = """
import torch


def train(model, loader, optimizer, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = 0.5 * x @ torch.randn(16, 1)
    loader = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 256, 32)]
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(100):
        train(model, loader, optimizer, device)


main()
"""


@needs_torch
def test_converted_run_keeps_the_device_expression_and_builds_one_grad_scaler(tmp_path):
    """amp-lint's own conversion, as `--fix` writes it (no --amp-device): the converted code names the script's
    `device.type`, and the AMP runs build one GradScaler each (counted at run time), over 5 epochs."""
    script = tmp_path / "train.py"
    script.write_text(PER_EPOCH_SCRIPT)
    kept = tmp_path / "converted"

    report = verify_scripts([script], device="cpu", steps=40, warmup=5, seeds=2, keep_converted=kept,
                            output_dir=tmp_path / "out")  # fmt: skip

    [result] = report.results
    code = (kept / "train.py").read_text()
    assert "torch.amp.autocast(device.type, dtype=torch.float16)" in code
    assert code.count("GradScaler(") == 1 and "torch.amp.GradScaler(device.type)" in code
    assert [record.grad_scalers for record in result.amp] == [1, 1]
    assert all(record.optimizers == 1 for record in result.amp)
    assert [warning for warning in result.warnings if not warning.startswith("the speed-up varied")] == []
    assert result.status == EQUIVALENT, result.reasons
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "out" / "train" / "losses.png").read_bytes().startswith(b"\x89PNG")


@needs_torch
def test_a_grad_scaler_re_created_every_epoch_is_reported(tmp_path):
    """A user's AMP version that builds its scaler inside the per-epoch function: 5 scalers in 40 steps, said so."""
    script = tmp_path / "train.py"
    script.write_text(PER_EPOCH_SCRIPT)
    amp_script = tmp_path / "train_amp.py"
    amp_script.write_text(
        PER_EPOCH_SCRIPT.replace("    model.train()\n", "    model.train()\n    scaler = torch.amp.GradScaler(device.type)\n")
        .replace("        loss = torch.nn", "        with torch.autocast(device.type, dtype=torch.float16):\n            loss = torch.nn")
        .replace("        loss.backward()\n        optimizer.step()\n",
                 "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n")
    )  # fmt: skip

    report = verify_scripts([script], device="cpu", steps=40, warmup=5, seeds=1, amp_script=amp_script)

    [result] = report.results
    assert [record.grad_scalers for record in result.amp] == [5]
    assert any(warning.startswith("5 GradScalers were built in one AMP run (seed 0)") for warning in result.warnings)
    assert "! 5 GradScalers were built" in runner.format_text(report)


def test_the_missing_plot_says_how_to_get_it(tmp_path, monkeypatch):
    refused = SimpleNamespace(code="", converted=False, reasons=["no training loop"])
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setattr(reporting, "importlib_missing", lambda name: name == "matplotlib")

    report = verify_scripts([script], device="cpu", steps=20, warmup=2, converter=lambda *a, **k: refused,
                            output_dir=tmp_path / "out")  # fmt: skip

    assert reporting.MATPLOTLIB_MISSING in report.notes
    assert "pip install matplotlib" in runner.format_text(report)  # works however amp-lint was installed


def _record(losses, **fields):
    autocast = fields.pop("autocast", [{"device_type": "cpu", "dtype": "float16", "enabled": True}])
    fields.setdefault("device", "cpu")
    return RunRecord("ok", losses=list(losses), autocast=autocast, **fields)


def _curve(seed, *, level=1.0, rate=0.05, noise=0.02, steps=60, offset=0.0):
    """A falling loss curve with seed-dependent level and jitter (deterministic)."""
    return [
        (level + 0.1 * seed) * math.exp(-rate * step) + offset + noise * math.sin(7.3 * step + seed)
        for step in range(steps)
    ]


def _drifted(seed, direction, steps=60):
    """Seed ``seed``'s curve, drifting off by up to 0.15 (the seeds' own spread) in ``direction``."""
    return [loss + 0.15 * direction * (1 - math.exp(-0.1 * step)) for step, loss in enumerate(_curve(seed, steps=steps))]


def _judged(fp32, amp, warmup=5, dtype="float16"):
    result = ScriptResult(Path("s.py"), None, fp32=fp32, amp=amp)
    runner.judge(result, warmup=warmup, tolerance=3.0, dtype=dtype)
    return result


@pytest.mark.parametrize(
    ("amp", "status", "reason"),
    [
        # Chaotic drift: each seed's AMP run wanders from its fp32 run, as far as another seed, either way.
        (lambda seed: _drifted(seed, [1.0, -1.0, 0.3][seed]), EQUIVALENT, None),
        # Rounding: every pair a hair apart.
        (lambda seed: _curve(seed, offset=0.0001 * (-1) ** seed), EQUIVALENT, None),
        # Every seed moved the same way by 3% of the loss: well within fp32's seed-to-seed spread, which the
        # unpaired judgement allowed (a clip before unscale_ with AdamW looks like this), but the pairs stay
        # together: not equivalent.
        (lambda seed: _curve(seed, offset=0.01), NOT_EQUIVALENT, "the AMP curve is"),
        # The first steps skipped while the GradScaler calibrates: not counted.
        (lambda seed: [None, None, *_curve(seed)[2:]], EQUIVALENT, None),
        # AMP learns half as fast: beyond the noise.
        (lambda seed: _curve(seed, rate=0.025), NOT_EQUIVALENT, "the AMP curve is"),
        (lambda seed: [*_curve(seed)[:20], *[None] * 40], NOT_EQUIVALENT, "the AMP loss is non-finite in 40"),
        # Drifted by rounding, batch by batch: each pair's difference jitters by ~1% of the loss from one step to the
        # next, either way, and happens to lean one way over a short run (bundled cnn_classifier at seed base 2,
        # 20 compared steps). The seeds' own spread is ten times the pairs' (different batches), so the chaos weight
        # alone called these pairs "together"; the step-to-step jitter is noise the gap shows too.
        (lambda seed: [loss * (1 - 0.002 + 0.01 * math.sin(2.9 * step + 1.7 * seed)) for step, loss in enumerate(_curve(seed))],
         EQUIVALENT, None),
    ],
    ids=["chaotic-drift", "rounding", "same-way-within-spread", "calibration-skips", "slower", "nan", "jittered-drift"],
)
def test_judge_pairwise(amp, status, reason):
    result = _judged([_record(_curve(seed)) for seed in range(3)], [_record(amp(seed)) for seed in range(3)])

    assert result.status == status, result.reasons
    if reason is None:
        assert result.reasons == [] and result.judgement.gap <= result.judgement.allowed
    else:
        assert result.reasons[0].startswith(reason), result.reasons


def test_curves_that_agree_are_never_not_equivalent_even_when_they_do_not_fall():
    flat = [_record([1.0 + 0.001 * math.sin(step + seed) for step in range(60)]) for seed in range(3)]
    result = _judged(flat, [_record(r.losses) for r in flat])

    assert result.status == INCONCLUSIVE
    assert result.reasons[0].startswith("fp32 itself did not learn")


def test_a_non_finite_fp32_loss_is_inconclusive_not_an_amp_failure():
    """Found on pytorch/examples gat with a data set too small for its fixed split: both sides' losses NaN from the
    first step. The AMP side is not to blame: inconclusive, saying fp32's loss is not finite."""
    broken = [_record([None] * 60) for seed in range(3)]
    result = _judged(broken, [_record([None] * 60) for seed in range(3)])

    assert result.status == INCONCLUSIVE
    assert result.reasons == ["the fp32 run's own loss is non-finite in 60 of 60 steps (one seed): nothing to compare with"]


def test_no_step_recorded_is_not_run():
    # autocast=[]: the script trains in subprocesses (mnist_hogwild), where neither side's steps nor autocast are seen.
    result = _judged([_record([]) for seed in range(3)], [_record([], autocast=[]) for seed in range(3)])

    assert result.status == NOT_RUN
    assert result.reasons[0].startswith("the fp32 run recorded no training step")


def test_too_few_steps_is_inconclusive():
    result = _judged([_record(_curve(seed, steps=12)) for seed in range(3)],
                     [_record(_curve(seed, steps=12)) for seed in range(3)])  # fmt: skip

    assert result.status == INCONCLUSIVE
    assert result.reasons == ["too few steps: 12 recorded, 7 after the warm-up of 5 (at least 10 are needed)"]


@pytest.mark.parametrize(
    ("autocast", "device", "warnings", "reason"),
    [
        ([], "cpu", [], "AMP did not run: the AMP script never entered an enabled autocast region"),
        ([{"device_type": "cpu", "dtype": "float16", "enabled": True}], "cuda:0", [],
         "AMP did not run: autocast was entered for cpu, but the parameters are on cuda"),
        ([{"device_type": "cpu", "dtype": "float16", "enabled": True}], "cpu", ["CUDA is not available. Disabling."],
         "AMP did not run: it switched itself off: CUDA is not available. Disabling."),
    ],
    ids=["no-autocast", "device-mismatch", "disabled"],
)
def test_amp_that_did_not_really_run_is_not_run(autocast, device, warnings, reason):
    fp32 = [_record(_curve(seed)) for seed in range(3)]
    amp = [RunRecord("ok", losses=_curve(s), autocast=autocast, device=device, disabling_warnings=warnings)
           for s in range(3)]  # fmt: skip

    result = _judged(fp32, amp)

    assert result.status == NOT_RUN
    assert result.reasons[0].startswith(reason), result.reasons


def test_not_run_when_the_conversion_refused_or_the_script_crashed_before_a_step(tmp_path):
    refused_script = tmp_path / "closure.py"
    refused_script.write_text("raise AssertionError('must not run')\n")
    refused = SimpleNamespace(code="", converted=False, reasons=["optimizer.step(closure) passes a closure"])

    report = verify_scripts([refused_script], device="cpu", steps=20, warmup=2, converter=lambda *a, **k: refused)

    [result] = report.results
    assert result.status == NOT_RUN and result.fp32 == [] and report.exit_code == 4
    assert result.reasons == ["the conversion converted nothing: closure.py: optimizer.step(closure) passes a closure"]

    crashing = tmp_path / "crash.py"
    crashing.write_text("import torch\nraise RuntimeError('no data')\n")
    converted = SimpleNamespace(code="import torch\nraise RuntimeError('no data')\n", converted=True, reasons=[])

    report = verify_scripts([crashing], device="cpu", steps=20, warmup=2, converter=lambda *a, **k: converted)

    [result] = report.results
    assert result.status == NOT_RUN and report.exit_code == 4
    assert result.reasons == ["the fp32 run crashed before its first training step"]
    assert "RuntimeError: no data" in result.crash


def test_verify_converts_the_local_modules_the_script_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "trainer.py").write_text("from pkg import utils\n")
    (tmp_path / "pkg" / "utils.py").write_text("")
    (tmp_path / "model.py").write_text("")
    script = tmp_path / "main.py"
    script.write_text("import os\nimport model\nfrom pkg.trainer import Trainer\n")

    assert [name for name, _ in local_imports(script)] == ["model", "pkg", "pkg.trainer", "pkg.utils"]


def test_child_environment_hides_cuda_on_cpu():
    assert runner.child_environment("cpu")["CUDA_VISIBLE_DEVICES"] == ""
    assert runner.child_environment("cpu")[runner.DEVICE_ENVIRONMENT_VARIABLE] == "cpu"


def _fake_report(*statuses: str) -> VerifyReport:
    results = [ScriptResult(Path(f"script_{index}.py"), status) for index, status in enumerate(statuses)]
    return VerifyReport("cpu", "float16", 20, 2, 3, 3.0, results, notes=[])


@pytest.mark.parametrize(
    ("statuses", "exit_code"),
    [
        ((EQUIVALENT, EQUIVALENT), 0),
        ((EQUIVALENT, NOT_EQUIVALENT), 1),
        ((INCONCLUSIVE, EQUIVALENT), 3),
        ((NOT_RUN, INCONCLUSIVE), 4),
        ((NOT_RUN, NOT_EQUIVALENT), 1),
    ],
)
def test_cli_exit_code_follows_the_worst_verdict(monkeypatch, statuses, exit_code):
    calls = []

    def fake_verify_scripts(paths, **options):
        calls.append((paths, options))
        return _fake_report(*statuses)

    monkeypatch.setattr(runner, "verify_scripts", fake_verify_scripts)

    result = CliRunner().invoke(verify_cli.verify, ["--device", "cpu", "--steps", "20", "--no-files", "--", "--epochs", "3"])

    assert result.exit_code == exit_code, result.output
    [(paths, options)] = calls
    assert paths == () and options["script_args"] == ["--epochs", "3"] and options["steps"] == 20
    assert options["seeds"] == 3 and options["dtype"] == "float16" and options["amp_device"] is None
    assert "script_0.py" in result.output


def test_cli_json_output(monkeypatch):
    monkeypatch.setattr(runner, "verify_scripts", lambda paths, **options: _fake_report(EQUIVALENT))

    result = CliRunner().invoke(verify_cli.verify, ["--output-format", "json"])

    assert result.exit_code == 0
    assert json.loads(result.stdout)["scripts"][0]["status"] == EQUIVALENT


def test_cli_explains_a_missing_torch_and_exits_2(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name))
    monkeypatch.setattr(runner, "verify_scripts", lambda *a, **k: pytest.fail("must not run"))

    result = CliRunner().invoke(verify_cli.verify, [])

    assert result.exit_code == 2
    assert result.output.strip() == verify_cli.TORCH_MISSING


def test_result_files_and_the_plot_note(tmp_path, monkeypatch):
    ran = ScriptResult(Path("a/train.py"), EQUIVALENT, fp32=[_record([2.0, 1.0], seed=0)], amp=[_record([2.1, 1.1])])
    monkeypatch.setattr(reporting, "importlib_missing", lambda name: name == "matplotlib")

    written = runner.write_result_files(ran, tmp_path / "train", warmup=1)

    assert written == [str(tmp_path / "train" / "losses.csv")]
    assert (tmp_path / "train" / "losses.csv").read_text().splitlines() == [
        "step,fp32_seed0,amp_seed0", "0,2,2.1", "1,1,1.1"
    ]
    report = VerifyReport("cpu", "float16", 2, 1, 1, 3.0, [ran], ["a note"], output_dir=tmp_path)
    assert f"Per-step losses (CSV) and plots: {tmp_path}" in runner.format_text(report)


def test_loss_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    ran = ScriptResult(Path("a/train.py"), EQUIVALENT, fp32=[_record(_curve(0))], amp=[_record(_curve(0))])

    written = runner.write_result_files(ran, tmp_path, warmup=5)

    assert Path(written[1]).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--device", "cpu", "--steps", "20", "--warmup", "20"], "--warmup must be at least 1 and below --steps (20)"),
        (["--amp-script", "README.md", "amp_lint/verify/scripts"], "--amp-script compares one script"),
    ],
)
def test_cli_usage_error_exits_2(arguments, message):
    result = CliRunner().invoke(verify_cli.verify, [*arguments, "--no-files"])

    assert result.exit_code == 2
    assert message in result.output


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


FAKE_TORCH = """
import os
__version__ = "fake"
class cuda:
    is_available = staticmethod(lambda: os.environ.get("FAKE_CUDA") == "1")
    is_bf16_supported = staticmethod(lambda: False)
    get_device_name = staticmethod(lambda: "Fake T4")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="a bash script")
@pytest.mark.parametrize(
    ("environment", "arguments", "exit_code", "expected"),
    [
        ({}, [], 2, "verify_gpu.sh: CUDA is not available to this Python"),
        ({"FAKE_CUDA": "1"}, ["missing.py"], 2, "verify_gpu.sh: no such file or folder: {caller}/missing.py"),
        ({"FAKE_CUDA": "1", "STEPS": "many"}, [], 2, "STEPS, WARMUP and SEEDS must be whole numbers"),
        ({"FAKE_CUDA": "1", "DTYPES": "float32"}, [], 2, "DTYPES may hold float16 and bfloat16, not float32"),
        ({"FAKE_CUDA": "1", "DTYPES": "bfloat16", "OUT": "results"}, [], 0,
         "Note: skipped: Fake T4 does not support bfloat16."),
    ],
    ids=["no-cuda", "missing-path", "bad-steps", "bad-dtype", "no-bf16"],
)
def test_verify_gpu_script_errors_exit_2_and_paths_resolve_against_the_caller(
    tmp_path, environment, arguments, exit_code, expected
):
    """bench/verify_gpu.sh without a GPU: a fake torch says whether CUDA and bfloat16 are there."""
    (tmp_path / "fake" / "torch").mkdir(parents=True)
    (tmp_path / "fake" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    caller = tmp_path / "caller"
    caller.mkdir()
    script = Path(__file__).resolve().parent.parent / "bench" / "verify_gpu.sh"
    env = {**runner.child_environment("cpu"), "PYTHON": sys.executable, **environment}
    env["PYTHONPATH"] = str(tmp_path / "fake")

    child = subprocess.run(["bash", str(script), *arguments], capture_output=True, text=True, cwd=caller, env=env)

    assert child.returncode == exit_code, child.stderr
    assert expected.format(caller=caller) in child.stdout + child.stderr
    if "OUT" in environment:
        assert (caller / "results").is_dir()  # OUT is relative to the caller's folder, not the repository's


def test_scripts_of_one_name_are_told_apart_in_the_report():
    scripts = [Path("/t/vae/main.py"), Path("/t/dcgan/main.py"), Path("/t/train.py")]
    report = VerifyReport("cpu", "float16", 20, 2, 3, 3.0, [ScriptResult(s, NOT_RUN, ["refused"]) for s in scripts], [])

    text = runner.format_text(report)

    assert reporting.display_names(scripts) == ["vae/main.py", "dcgan/main.py", "train.py"]
    assert "vae/main.py: not run (exit 4)" in text and "dcgan/main.py: not run (exit 4)" in text


def test_a_scaled_value_where_a_loss_is_expected_is_its_own_finding():
    site = {"file": "/t/train.py", "line": 14, "code": "scaler.scale(scaler.scale(loss)).backward()"}
    fp32 = [_record(_curve(seed), seed=seed) for seed in range(3)]
    amp = [_record([loss * 256 for loss in _curve(seed)], seed=seed, double_scaled=site) for seed in range(3)]

    result = _judged(fp32, amp)

    assert result.status == NOT_EQUIVALENT and result.judgement is None  # no 25,000% gap
    assert result.reasons == [
        "a scaled value where a loss is expected: `scaler.scale()` was given a tensor it had already scaled "
        "(train.py:14: `scaler.scale(scaler.scale(loss)).backward()`), so the loss and its gradients are scaled twice "
        "(the scale squared) and the steps overflow; scale the loss once"
    ]


def test_not_run_names_the_line_that_asked_for_a_device_the_run_lacks():
    """A conversion that wrote "cuda" for a run on the CPU: autocast and the GradScaler switch themselves off, and
    the reasons say where."""
    autocast_site = {"file": "/t/train.py", "line": 12, "code": 'with torch.autocast("cuda", dtype=torch.float16):'}
    scaler_site = {"file": "/t/train.py", "line": 8, "code": 'scaler = torch.amp.GradScaler("cuda")'}
    fp32 = [_record(_curve(seed), seed=seed) for seed in range(3)]
    amp = [
        _record(_curve(seed), seed=seed, autocast=[{"device_type": "cuda", "dtype": "float16", "enabled": False,
                                                    "site": autocast_site}],
                disabling_warnings=["torch.amp.GradScaler is enabled, but CUDA is not available.  Disabling."],
                disabling_sites=[scaler_site])
        for seed in range(3)
    ]  # fmt: skip

    result = _judged(fp32, amp)

    assert result.status == NOT_RUN
    assert result.reasons == [
        "AMP did not run: the AMP script never entered an enabled autocast region (autocast for cuda was off at "
        'train.py:12 (`with torch.autocast("cuda", dtype=torch.float16):`))',
        'AMP did not run: it switched itself off at train.py:8 (`scaler = torch.amp.GradScaler("cuda")`): '
        "torch.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
    ]


def test_a_speed_up_whose_windows_varied_widely_says_so():
    steady = [_record(_curve(seed), seed=seed, step_seconds=[0.010] * 20) for seed in range(3)]
    jumpy = [_record(_curve(seed), seed=seed, step_seconds=[0.005 * (1 + 1.5 * seed)] * 20) for seed in range(3)]
    result = ScriptResult(Path("s.py"), EQUIVALENT, fp32=steady, amp=jumpy)

    runner.measure_speed(result)

    assert result.speedup_varied and result.warnings[0].startswith("the speed-up varied widely between timed windows")
    report = VerifyReport("cpu", "float16", 60, 5, 3, 3.0, [result], [])
    assert " varied " in runner.format_text(report).splitlines()[2] + " "


def test_torch_is_probed_from_a_neutral_folder(tmp_path, monkeypatch):
    """A `torch.py` in the current folder is not imported, so not executed, when verify asks whether CUDA is there."""
    marker = tmp_path / "ran"
    (tmp_path / "torch.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)

    try:
        runner._cuda_available()
    except runner.VerifyError:
        pass  # no torch at all here: what matters is that the local file did not run

    assert not marker.exists()


def test_verify_help_says_that_it_runs_the_scripts():
    result = CliRunner().invoke(verify_cli.verify, ["--help"])

    assert "This RUNS the scripts it is given" in " ".join(result.output.split())


DOUBLE_SCALE_SCRIPT = """
import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(100):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    if step % 2:
        (scaler.scale(loss) / 2).backward()
    else:
        scaler.scale(scaler.scale(loss)).backward()
    scaler.step(opt)
    scaler.update()
"""


@needs_torch
def test_bootstrap_records_a_double_scale_and_not_a_scaled_loss(tmp_path):
    """`scaler.scale(loss) / 2` backpropagated: the loss recorded once, by scale(), not the scaled quotient too;
    `scaler.scale(scaler.scale(loss))`: recorded as a double scale, at its line. The guard runs (record mode)."""
    script = tmp_path / "train.py"
    script.write_text(DOUBLE_SCALE_SCRIPT)

    command = [sys.executable, "-m", "amp_lint.verify.bootstrap", "--script", str(script), "--steps", "6",
               "--warmup", "2", "--out", str(tmp_path / "out.json"), "--guard"]  # fmt: skip
    child = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=runner.child_environment("cpu"))

    assert child.returncode == 0, child.stderr
    record = RunRecord.read(tmp_path / "out.json")
    assert record.double_scaled["line"] == 15 and record.double_scaled["code"].startswith("scaler.scale(scaler.scale")
    assert all(loss is None or loss < 10 for loss in record.losses)  # never a scaled value
    assert record.guard == []


def test_steps_skipped_by_the_scaler_lag_the_amp_run_from_the_first_compared_point():
    """A GradScaler that skipped k steps leaves its run k steps behind fp32, all along (conditional_gan: two
    calibration skips and one overflow mid-run, in every seed). The band admits what fp32 moves in k steps at every
    compared point, the first ones included (read on fp32's whole curve, not only the compared part: there the first
    k points had no room and the bundled GAN passed by 0.2%). A run as far behind with no skip is not equivalent."""
    fast = dict(rate=0.12, noise=0.0)
    fp32 = [_record(_curve(seed, **fast)) for seed in range(3)]
    lagging = [[*_curve(seed, **fast)[:3], *_curve(seed, **fast)[:-3]] for seed in range(3)]  # 3 steps behind
    skipped = _judged(fp32, [_record(curve, skipped_steps=[0, 1, 2]) for curve in lagging], warmup=3)
    assert skipped.status == EQUIVALENT, skipped.reasons
    assert skipped.judgement.parted_at is None
    behind = _judged(fp32, [_record(curve) for curve in lagging], warmup=3)
    assert behind.status == NOT_EQUIVALENT
