#!/usr/bin/env python3
"""Issue 45, items 7 and 8: time and peak memory of one file's check as a scope grows.

    python bench/faults_scaling.py [SHAPE ...] [--sizes 1000,2000,...] [--timeout 300] [--code CHECKOUT]

Shapes (`SHAPES`): `blocks`, N `with torch.autocast('cuda'): y_i = m(x)` blocks in one function;
`module-blocks`, the same at module level; `steps`, N `scaler.step(o_i)` calls in one training loop
(scaled backward before them, one `update()` after); `loops`, N complete training loops in one function;
`scaled-blocks`, N autocast blocks in one loop, each followed by its scaled backward; `clips`, N
`clip_grad_norm_` calls on scaled gradients in one loop (N findings with fixes). Each size is checked in a fresh process (the
checker of a CLI run, default rules, no cache), which prints its CPU seconds, its peak RSS and its
findings and notes; a process still running after `--timeout` seconds is killed and reported so.
`--code`: another checkout (or an export of one) whose amp_lint the children import (they run in it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def blocks(n: int, in_function: bool = True) -> str:
    indent = "    " if in_function else ""
    lines = ["import torch", ""] + (["def forward_many(m, x):"] if in_function else [])
    for i in range(n):
        lines += [f"{indent}with torch.autocast('cuda'):", f"{indent}    y_{i} = m(x)"]
    return "\n".join(lines) + "\n"


def steps(n: int) -> str:
    lines = [
        "import torch",
        "",
        "def train(model, data, loss_fn, optimizers):",
        "    scaler = torch.amp.GradScaler('cuda')",
        "    for x, y in data:",
        "        with torch.autocast('cuda'):",
        "            loss = loss_fn(model(x), y)",
        "        scaler.scale(loss).backward()",
    ]
    lines += [f"        scaler.step(o_{i})" for i in range(n)]
    lines.append("        scaler.update()")
    return "\n".join(lines) + "\n"


def loops(n: int) -> str:
    """N training loops in one function, each a complete small step."""
    lines = ["import torch", "", "def train(model, data, loss_fn, opt):", "    scaler = torch.amp.GradScaler('cuda')"]
    for i in range(n):
        lines += [
            f"    for x_{i}, y_{i} in data:",
            "        with torch.autocast('cuda'):",
            f"            loss_{i} = loss_fn(model(x_{i}), y_{i})",
            f"        scaler.scale(loss_{i}).backward()",
            "        scaler.step(opt)",
            "        scaler.update()",
            "        opt.zero_grad()",
        ]
    return "\n".join(lines) + "\n"


def scaled_blocks(n: int) -> str:
    """N autocast blocks in one training loop, each with its own scaled backward."""
    lines = ["import torch", "", "def train(model, data, loss_fn, opt):", "    scaler = torch.amp.GradScaler('cuda')",
             "    for x, y in data:"]  # fmt: skip
    for i in range(n):
        lines += ["        with torch.autocast('cuda'):", f"            loss_{i} = loss_fn(model(x), y)",
                  f"        scaler.scale(loss_{i}).backward()"]  # fmt: skip
    lines += ["        scaler.step(opt)", "        scaler.update()", "        opt.zero_grad()"]
    return "\n".join(lines) + "\n"


def clips(n: int) -> str:
    """N clips of scaled gradients in one training loop (N findings, each with a fix)."""
    lines = ["import torch", "", "def train(model, data, loss_fn, opt):", "    scaler = torch.amp.GradScaler('cuda')",
             "    for x, y in data:", "        with torch.autocast('cuda'):", "            loss = loss_fn(model(x), y)",
             "        scaler.scale(loss).backward()"]  # fmt: skip
    lines += [f"        torch.nn.utils.clip_grad_norm_(model.parameters(), {i + 1}.0)" for i in range(n)]
    lines += ["        scaler.step(opt)", "        scaler.update()", "        opt.zero_grad()"]
    return "\n".join(lines) + "\n"


SHAPES = {
    "blocks": blocks,
    "module-blocks": lambda n: blocks(n, in_function=False),
    "steps": steps,
    "loops": loops,
    "scaled-blocks": scaled_blocks,
    "clips": clips,
}

_CHILD = r"""
import json, resource, sys, time
sys.setrecursionlimit(60000)
from amp_lint import rules as registry
from amp_lint.engine.checker import Checker
path = sys.argv[1]
source = open(path, encoding="utf-8").read()
checker = Checker(frozenset(registry.default_codes()))
start = time.process_time()
result = checker.check(source, path)
seconds = time.process_time() - start
print(json.dumps({
    "cpu_s": round(seconds, 2),
    "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "findings": {code: [d.code for d in result.diagnostics].count(code) for code in sorted({d.code for d in result.diagnostics})},
    "notes": [e.message for e in result.errors],
}))
"""


def measure(shape: str, n: int, timeout: float, code: Path = REPO_ROOT) -> dict:
    source = SHAPES[shape](n)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"{shape}_{n}.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(source)
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, path], capture_output=True, text=True, timeout=timeout, cwd=code
            )
        except subprocess.TimeoutExpired:
            return {"shape": shape, "n": n, "kb": len(source) // 1024, "killed_after_s": timeout}
        if done.returncode != 0:
            return {"shape": shape, "n": n, "error": done.stderr.strip().splitlines()[-1:]}
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row.update(shape=shape, n=n, kb=len(source) // 1024, wall_s=round(time.monotonic() - started, 1))
        return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--sizes", default="1000,2000,4000,8000,16000")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--code", type=Path, default=REPO_ROOT)
    args = parser.parse_args()
    for shape in args.shapes:
        for n in (int(s) for s in args.sizes.split(",")):
            print(json.dumps(measure(shape, n, args.timeout, args.code.resolve())), flush=True)


if __name__ == "__main__":
    main()
