"""The training scripts behind verify's pairwise tests (tests/test_verify_pairs_sgd.py, ..._adamw.py) and
bench/verify_seed_bases.py: a small SGD regression and an AdamW classifier, fp32, each with hand-written AMP
versions (right, clip before `scaler.unscale_`, never updated), and the one verify run a test module shares.

The run is split by optimizer over two modules so that two xdist workers (`--dist loadfile`) share the work.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

import pytest

from amp_lint.verify import EQUIVALENT, NOT_EQUIVALENT, verify_scripts

# A small regression trained with SGD and gradient clipping, seeded by the script itself (the bootstrap offsets that
# seed per run). The AMP versions below are the user's own (`--amp-script`).
TINY_FP32_SCRIPT = """
import torch

torch.manual_seed(0)
x = torch.randn(256, 16)
y = torch.sin(x @ torch.randn(16, 1))
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(100):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""

_AMP_TEMPLATE = TINY_FP32_SCRIPT.replace("for epoch", 'scaler = torch.amp.GradScaler("cpu")\nfor epoch').replace(
    "    loss = torch.nn.functional.mse_loss(model(x), y)\n    loss.backward()\n",
    '    with torch.autocast("cpu", dtype=torch.float16):\n'
    "        loss = torch.nn.functional.mse_loss(model(x), y)\n    scaler.scale(loss).backward()\n{unscale}",
).replace("    optimizer.step()\n", "    scaler.step(optimizer)\n    scaler.update()\n")
AMP_VERSIONS = {
    # The canonical pattern: unscale_ before clipping.
    "correct": _AMP_TEMPLATE.format(unscale="    scaler.unscale_(optimizer)\n"),
    # Clipping the *scaled* gradients (65536x): they are cut to norm 1, then unscaled to almost nothing.
    "clip before unscale_": _AMP_TEMPLATE.format(unscale=""),
    # scaler.update() never called: the second iteration's unscale_() raises.
    "never updated": _AMP_TEMPLATE.format(unscale="    scaler.unscale_(optimizer)\n").replace(
        "    scaler.update()\n", ""
    ),
}


# The same regression trained with AdamW on a classification task (the optimizer the trials used): Adam
# normalises the gradients, so clipping the scaled ones before unscale_ hides well; only the pairing shows it.
ADAMW_FP32_SCRIPT = """
import torch

torch.manual_seed(0)
x = torch.randn(512, 20)
y = (x @ torch.randn(20, 4)).argmax(1)
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for epoch in range(100):
    for i in range(0, 512, 64):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""
_ADAMW_TEMPLATE = ADAMW_FP32_SCRIPT.replace("for epoch", 'scaler = torch.amp.GradScaler("cpu")\nfor epoch').replace(
    "        loss = torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])\n        loss.backward()\n",
    '        with torch.autocast("cpu", dtype=torch.float16):\n'
    "            loss = torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])\n"
    "        scaler.scale(loss).backward()\n{unscale}",
).replace("        optimizer.step()\n", "        scaler.step(optimizer)\n        scaler.update()\n")
ADAMW_VERSIONS = {
    "correct": _ADAMW_TEMPLATE.format(unscale="        scaler.unscale_(optimizer)\n"),
    "clip before unscale_": _ADAMW_TEMPLATE.format(unscale=""),
}

#: (fp32 script, AMP version) per case; the fp32 scripts carry their case's name, so one conversion maps each.
CASES = {
    "sgd_correct": (TINY_FP32_SCRIPT, AMP_VERSIONS["correct"]),
    "sgd_clip_before_unscale": (TINY_FP32_SCRIPT, AMP_VERSIONS["clip before unscale_"]),
    "sgd_never_updated": (TINY_FP32_SCRIPT, AMP_VERSIONS["never updated"]),
    "adamw_correct": (ADAMW_FP32_SCRIPT, ADAMW_VERSIONS["correct"]),
    "adamw_clip_before_unscale": (ADAMW_FP32_SCRIPT, ADAMW_VERSIONS["clip before unscale_"]),
}


def run_cases(folder: Path, names: Iterable[str], *, first_seed: int = 0, seeds: int = 3, steps: int = 40):
    """One verify run (``seeds`` seeds, ``steps`` steps, CPU) over the named cases, the AMP side given by a converter
    that maps each case's fp32 script to its hand-written AMP version. Returns (results by case, report, progress)."""
    names = list(names)
    for name in names:
        (folder / f"{name}.py").write_text(f"# case: {name}\n{CASES[name][0]}")

    def convert(source, **options):
        name = source.splitlines()[0].removeprefix("# case: ")
        return SimpleNamespace(code=CASES[name][1], converted=True, reasons=[])

    progress: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        report = verify_scripts([folder / f"{name}.py" for name in names], device="cpu", steps=steps, warmup=5,
                                seeds=seeds, first_seed=first_seed, converter=convert, progress=progress.append,
                                progress_steps=False, output_dir=folder / "out")  # fmt: skip
    results: dict[str, object] = {result.script.stem: result for result in report.results}
    return results, report, progress


def check_pairwise(results, folder: Path, case: str, status: str) -> None:
    """The right AMP version is equivalent, a clip before unscale_ is not, with SGD and with AdamW: AdamW's gap
    (a fraction of a percent) sits far inside fp32's seed-to-seed spread, and outside the paired band. The runtime
    guard names the rule that was broken, first among the reasons."""
    result = results[case]

    assert result.status == status, result.reasons
    assert [record.seed for record in result.fp32] == [0, 1, 2]
    assert [record.seed for record in result.amp] == ([0] if case == "sgd_never_updated" else [0, 1, 2])
    judgement = result.judgement
    if status == EQUIVALENT:
        assert result.reasons == [] and result.guard == []
        assert judgement.gap <= judgement.allowed and judgement.parted_at is None
    elif case.endswith("clip_before_unscale"):
        assert judgement.gap > judgement.allowed and judgement.parted_at is not None
        assert result.reasons[0].startswith("the runtime guard saw AMP030 at ") and "clips gradients before `scaler.unscale_(optimizer)`" in (
            result.reasons[0]
        )
        assert any("the same seed" in reason and "beyond the allowed band" in reason for reason in result.reasons)
        if case.startswith("adamw"):
            assert judgement.gap < judgement.spread  # what the unpaired judgement called equivalent
    else:
        assert status == NOT_EQUIVALENT
        assert "unscale_() is being called after step()" in result.crash
        assert result.reasons[0].startswith("the runtime guard saw AMP021")
        assert result.reasons[-1] == "the AMP run crashed after 1 training step(s); the fp32 run did not"
    csv_lines = (folder / "out" / case / "losses.csv").read_text().splitlines()
    assert csv_lines[0].startswith("step,fp32_seed0,fp32_seed1,fp32_seed2,amp_seed0")
    assert len(csv_lines) == 41
