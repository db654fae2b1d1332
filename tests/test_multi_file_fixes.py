"""Fixes that reach across the modules of a project (issue 27, issue 32 item 3).

A finding reached through a call into another module (a clip inside a helper of `utils.py`) keeps a fix that
edits the call site in the checked file; a fix that edits several files (`FileEdit`s) is fix-checked file by
file and written all or nothing, only to files the run checks.

Each test writes a small project of its own under tmp_path and runs the real command line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner

from amp_lint.cli import main


def project(tmp_path: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


def cli(args: List[str]) -> Tuple[int, str]:
    result = CliRunner().invoke(main, ["check", "--isolated", "--no-cache", "--color", "never", *args], catch_exceptions=False)
    return result.exit_code, result.output


CLIP_UTILS = """
import torch


def dispatch_clip(parameters, value, mode="norm"):
    if mode == "norm":
        torch.nn.utils.clip_grad_norm_(parameters, value)
    else:
        torch.nn.utils.clip_grad_value_(parameters, value)
"""

SCALED_STEP = """
import torch
import torch.nn as nn
from {package}.clipping import dispatch_clip


class Scaled:
    def __init__(self, device="cpu"):
        self.scaler = torch.amp.GradScaler(device)

    def __call__(self, loss, optimizer, parameters, clip=None):
        self.scaler.scale(loss).backward()
        if clip is not None:
            self.scaler.unscale_(optimizer)
            dispatch_clip(parameters, clip)
        self.scaler.step(optimizer)
        self.scaler.update()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = Scaled()
    for _ in range(3):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,)))
        step(loss, optimizer, model.parameters(), clip=1.0)
    print("done")
"""


def test_a_clip_in_another_module_gets_its_unscale_back_at_the_call_site(tmp_path: Path):
    """timm's `NativeScaler.__call__` with its `unscale_` dropped (the injection benchmark's unscale_dropped):
    the clip is in `clipping.py`, reached through `dispatch_clip(...)`; the fix puts `unscale_` back before
    that call, in the checked file, which is the original code."""
    package = "mf_clip_a"
    original = SCALED_STEP.format(package=package)
    mutant = original.replace("            self.scaler.unscale_(optimizer)\n", "")
    assert mutant != original
    project(tmp_path, {f"{package}/__init__.py": "", f"{package}/clipping.py": CLIP_UTILS, f"{package}/scaled.py": mutant})
    target = str(tmp_path / package / "scaled.py")
    code, output = cli(["--select", "AMP030", target])
    assert code == 1 and "reached through `dispatch_clip(" in output and "2 fixable" in output
    code, output = cli(["--select", "AMP030", "--diff", target])
    assert "+            self.scaler.unscale_(optimizer)" in output and "Would fix 2 errors." in output
    code, output = cli(["--select", "AMP030", "--fix", target])
    assert code == 0, output
    assert "Fixed 2 errors" in output
    fixed = (tmp_path / package / "scaled.py").read_text()
    assert ast.dump(ast.parse(fixed)) == ast.dump(ast.parse(textwrap.dedent(original)))
    assert (tmp_path / package / "clipping.py").read_text() == textwrap.dedent(CLIP_UTILS).lstrip()
    cli(["--select", "AMP030", "--fix", target])
    assert (tmp_path / package / "scaled.py").read_text() == fixed  # a second --fix changes nothing
    done = subprocess.run([sys.executable, "-m", f"{package}.scaled"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if "No module named 'torch'" not in done.stderr:
        assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
