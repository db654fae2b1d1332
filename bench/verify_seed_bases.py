"""Verify's must-show (issue 32): pairwise verdicts over several seed bases, and the bundled fixtures.

    python bench/verify_seed_bases.py pairs [--bases 0,1,2,3,4] [--steps 40] [--out bench/verify-seed-bases.md]
    python bench/verify_seed_bases.py fixtures [--bases 0] [--steps 30] [--scripts conditional_gan,cpu_only_no_device]

``pairs`` runs `verify_scripts` (3 seeds, 40 steps, warmup 5, CPU) on the SGD and AdamW regressions of
tests/test_verify.py, right and with the clip before ``scaler.unscale_`` (the user's AMP version given through a
converter, as the test does), once per seed base (``first_seed``). ``fixtures`` runs `amp-lint verify --device cpu
--steps 30` (amp-lint's own conversion) on every bundled script and on a CPU-only fp32 script with no device
anywhere. Each run appends one table row per script (seed base, verdict, gap, allowed band) and prints it.
Run it niced, alone: the runs are CPU-bound.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from amp_lint.verify import BUNDLED_SCRIPTS, verify_scripts

# A CPU-only fp32 script: no device anywhere (the shape that was converted to "cuda" and then "not run").
CPU_ONLY_SCRIPT = """
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(512, 10)
y = (x @ torch.randn(10, 3)).argmax(1)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(50):
    for i in range(0, 512, 64):
        outputs = model(x[i:i + 64])
        loss = criterion(outputs, y[i:i + 64])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.4g}%"


def _row(command: str, base: int, result) -> str:
    judgement = result.judgement
    gap = _pct(judgement.gap) if judgement is not None else "-"
    allowed = _pct(judgement.allowed) if judgement is not None else "-"
    reason = "; ".join(result.reasons)[:140].replace("|", "/")
    return f"| {command} | {result.script.name} | {base} | {result.status} | {gap} | {allowed} | {reason} |"


def pairs(bases: list[int], steps: int) -> list[str]:
    from verify_cases import CASES  # the cases the test modules run at seed base 0

    wanted = ("sgd_correct", "sgd_clip_before_unscale", "adamw_correct", "adamw_clip_before_unscale")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in wanted:
            (folder / f"{name}.py").write_text(f"# case: {name}\n{CASES[name][0]}")

        def convert(source, **options):
            name = source.splitlines()[0].removeprefix("# case: ")
            return SimpleNamespace(code=CASES[name][1], converted=True, reasons=[])

        for base in bases:
            began = time.perf_counter()
            report = verify_scripts([folder], device="cpu", steps=steps, warmup=5, seeds=3, first_seed=base,
                                    converter=convert, progress_steps=False)  # fmt: skip
            for result in report.results:
                rows.append(_row(f"pairs, {steps} steps, 3 seeds", base, result))
                print(rows[-1], flush=True)
            print(f"# base {base}: {time.perf_counter() - began:.0f} s", flush=True)
    return rows


def fixtures(bases: list[int], steps: int, only: list[str]) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cpu_only = Path(tmp) / "cpu_only_no_device.py"
        cpu_only.write_text(CPU_ONLY_SCRIPT)
        scripts = [*sorted(BUNDLED_SCRIPTS.glob("*.py")), cpu_only]
        if only:  # in the order given
            scripts = [next(s for s in scripts if s.stem == name) for name in only]
        for base in bases:
            for script in scripts:
                began = time.perf_counter()
                report = verify_scripts([script], device="cpu", steps=steps, warmup=10, seeds=3, first_seed=base,
                                        progress_steps=False)  # fmt: skip
                for result in report.results:
                    rows.append(_row(f"amp-lint verify --device cpu --steps {steps}", base, result))
                    print(rows[-1], f"({time.perf_counter() - began:.0f} s)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["pairs", "fixtures"])
    parser.add_argument("--bases", default="0,1,2,3,4")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--scripts", default="", help="fixtures: the script stems to run, in order (default: all)")
    options = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    bases = [int(base) for base in options.bases.split(",")]
    print("| command | script | seed base | verdict | gap | allowed | reasons |\n|---|---|---|---|---|---|---|")
    if options.what == "pairs":
        pairs(bases, options.steps or 40)
    else:
        fixtures(bases, options.steps or 30, [name for name in options.scripts.split(",") if name])


if __name__ == "__main__":
    main()
