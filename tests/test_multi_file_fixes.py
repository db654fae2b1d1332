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


# --- AMP100: the scaler of a trainer called per epoch from another module (issue 32, item 3) ---

ENGINE = """
import torch
import torch.nn as nn


def train_one_epoch(model, loader, optimizer, device, max_norm: float = 0):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
"""

MAIN = """
import os

import torch
import torch.nn as nn
from {package}.engine import train_one_epoch


def main(resume=False):
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if resume and os.path.exists("ckpt.pt"):
        checkpoint = torch.load("ckpt.pt")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    loader = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
    for epoch in range(3):
        train_one_epoch(model, loader, optimizer, device)
        torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict()}}, "ckpt.pt")
    print("done")


if __name__ == "__main__":
    main()
    main(resume=True)
"""


def trainer_project(tmp_path: Path, package: str) -> Tuple[Path, Path]:
    project(tmp_path, {f"{package}/__init__.py": "", f"{package}/engine.py": ENGINE, f"{package}/main.py": MAIN.format(package=package)})
    return tmp_path / package / "engine.py", tmp_path / package / "main.py"


CONVERT = ["--select", "AMP100", "--unsafe-fixes"]


def test_a_trainer_called_per_epoch_from_another_module_gets_the_scaler_beside_its_optimizer(tmp_path: Path):
    """Both files change in one fix: the trainer takes `scaler`, the caller creates it right after the optimizer,
    passes it, and saves and loads its state where the optimizer's is. The program runs (and resumes) on CPU, and
    a second --fix changes nothing."""
    engine, main_file = trainer_project(tmp_path, "mf_conv_a")
    code, output = cli([*CONVERT, "--diff", str(tmp_path / "mf_conv_a")])
    assert code == 1 and "+++ b/" in output and output.count("+++ b/") == 2, output
    assert "Would fix 1 error." in output
    assert engine.read_text() == textwrap.dedent(ENGINE).lstrip()  # --diff writes nothing
    code, output = cli([*CONVERT, "--fix", str(tmp_path / "mf_conv_a")])
    assert code == 0 and "Fixed 1 error" in output, output
    trainer, caller = engine.read_text(), main_file.read_text()
    assert "def train_one_epoch(model, loader, optimizer, device, max_norm: float = 0, *, scaler):" in trainer
    assert "scaler.scale(loss).backward()" in trainer and "GradScaler" not in trainer
    lines = [line.strip() for line in caller.splitlines()]
    assert lines[lines.index("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)") + 1] == \
        "scaler = torch.amp.GradScaler(torch.device(device).type)"  # fmt: skip
    assert "train_one_epoch(model, loader, optimizer, device, scaler=scaler)" in lines
    assert '"scaler": scaler.state_dict()' in caller  # saved ...
    assert lines[lines.index('optimizer.load_state_dict(checkpoint["optimizer"])') + 1:][:2] == \
        ['if "scaler" in checkpoint:', 'scaler.load_state_dict(checkpoint["scaler"])']  # ... and loaded  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "mf_conv_a.main"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["done", "done"], done.stderr[-3000:]
    code, output = cli([*CONVERT, "--fix", str(tmp_path / "mf_conv_a")])
    assert (engine.read_text(), main_file.read_text()) == (trainer, caller)  # a second --fix changes nothing


def test_a_fix_that_changes_a_file_the_run_does_not_check_is_refused(tmp_path: Path):
    """Only the trainer is named (or the caller is excluded): the caller's file is never written, and the trainer
    is not converted half-way (a scaler parameter nobody passes); the reason names the file."""
    engine, main_file = trainer_project(tmp_path, "mf_conv_b")
    before = (engine.read_text(), main_file.read_text())
    # Not marked fixable when the caller is not checked (what is marked fixable is what --fix applies) ...
    code, output = cli(["--select", "AMP100", str(engine)])
    assert code == 1 and "fixable" not in output, output
    code, output = cli(["--select", "AMP100", str(tmp_path / "mf_conv_b")])
    assert "1 fixable with --unsafe-fixes" in output, output  # ... and marked when it is
    code, output = cli([*CONVERT, "--fix", str(engine)])
    assert code == 1 and "the fix also changes `" in output and "main.py`, which is not among the files this run checks" in output  # a refused fix is a finding left (issue 44.9)
    assert (engine.read_text(), main_file.read_text()) == before
    code, output = cli([*CONVERT, "--fix", "--extend-exclude", "main.py", str(tmp_path / "mf_conv_b")])
    assert "which is not among the files this run checks" in output
    assert (engine.read_text(), main_file.read_text()) == before


def test_a_multi_file_fix_is_written_all_or_none(tmp_path: Path):
    """The caller's file is read-only: the trainer's file is not written either."""
    engine, main_file = trainer_project(tmp_path, "mf_conv_c")
    before = (engine.read_text(), main_file.read_text())
    main_file.chmod(0o444)
    try:
        code, output = cli([*CONVERT, "--fix", str(tmp_path / "mf_conv_c")])
    finally:
        main_file.chmod(0o644)
    assert code == 2 and "read-only" in output, output
    assert (engine.read_text(), main_file.read_text()) == before


def test_two_fixes_that_change_the_same_lines_of_one_file_go_in_one_after_the_other(tmp_path: Path):
    """Two trainers, each called per epoch from `main.py` beside one optimizer: the first fix puts `scaler` there;
    the second is made again on the new `main.py` and refused (the name is taken), never applied on stale text."""
    package = "mf_conv_d"
    main = MAIN.format(package=package).replace(
        f"from {package}.engine import train_one_epoch", f"from {package}.engine import train_one_epoch\nfrom {package}.other import train_other"
    ).replace("        train_one_epoch(model, loader, optimizer, device)\n",
              "        train_one_epoch(model, loader, optimizer, device)\n        train_other(model, loader, optimizer, device)\n")  # fmt: skip
    project(tmp_path, {f"{package}/__init__.py": "", f"{package}/engine.py": ENGINE,
                       f"{package}/other.py": ENGINE.replace("train_one_epoch", "train_other"), f"{package}/main.py": main})  # fmt: skip
    code, output = cli([*CONVERT, "--fix", str(tmp_path / package)])
    caller = (tmp_path / package / "main.py").read_text()
    ast.parse(caller)
    assert caller.count("GradScaler(") == 1 and "train_one_epoch(model, loader, optimizer, device, scaler=scaler)" in caller
    assert "train_other(model, loader, optimizer, device)\n" in caller  # the other one waits, said why
    assert "`scaler` is already a name" in output
    assert "GradScaler" not in (tmp_path / package / "other.py").read_text()
    assert "scaler" not in (tmp_path / package / "other.py").read_text()


# --- the pieces ---


def test_merged_text_combines_changes_of_different_lines_and_refuses_overlaps():
    from amp_lint.fixes.text_edits import merged_text

    base = "a\nb\nc\nd\n"
    assert merged_text(base, ["a\nX\nb\nc\nd\n", "a\nb\nc\nd\nY\n"]) == "a\nX\nb\nc\nd\nY\n"
    assert merged_text(base, ["a\nB\nc\nd\n", "a\nb\nC\nd\n"]) == "a\nB\nC\nd\n"
    assert merged_text(base, ["a\nX\nb\nc\nd\n", "a\nX\nb\nc\nd\n"]) == "a\nX\nb\nc\nd\n"  # made once
    assert merged_text(base, ["a\nX\nb\nc\nd\n", "a\nZ\nb\nc\nd\n"]) is None  # two insertions at one place
    assert merged_text(base, ["a\nB\nc\nd\n", "a\nQ\nc\nd\n"]) is None  # one line changed two ways


def test_write_all_or_none_puts_back_what_it_replaced_when_a_later_rename_fails(tmp_path: Path, monkeypatch):
    import os

    from amp_lint.files import writing
    from amp_lint.files.sources import read_source

    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("a = 1\n")
    second.write_text("b = 1\n")
    items = [(first, "a = 2\n", read_source(first)), (second, "b = 2\n", read_source(second))]
    real_replace, calls = os.replace, []

    def failing_replace(source, target):
        calls.append(target)
        if Path(target).name == "b.py":
            raise OSError(28, "No space left on device")
        return real_replace(source, target)

    monkeypatch.setattr(writing.os, "replace", failing_replace)
    with pytest.raises(OSError):
        writing.write_all_or_none(items)
    monkeypatch.setattr(writing.os, "replace", real_replace)
    assert (first.read_text(), second.read_text()) == ("a = 1\n", "b = 1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"]  # no temporary file left
    writing.write_all_or_none([(first, "a = 2\n", read_source(first)), (second, "b = 2\n", read_source(second))])
    assert (first.read_text(), second.read_text()) == ("a = 2\n", "b = 2\n")


def test_other_files_of_one_pass_are_combined_checked_and_refused_with_the_reason(tmp_path: Path):
    """`OtherFiles.combined`, which the fix loop runs on each group of fixes: changes of different lines of one
    file combine; the same lines changed two ways refuse the later fix; a file that does not parse after the fix,
    a file the run does not write, and a check with no file on disk refuse it, each saying why."""
    from amp_lint.diagnostics import Applicability
    from amp_lint.engine.file_edits import OtherFiles
    from amp_lint.fixes.types import FileEdit, Fix, with_file_edits

    path = str(tmp_path / "other.py")
    base = "import torch\n\nx = 1\ny = 2\n"

    def fix(after: str) -> Fix:
        return with_file_edits(Fix("f", Applicability.SAFE), [FileEdit(path, base, after)])

    def analyse(_path: str, text: str):
        return [], 0

    others = OtherFiles(analyse, {}, {}, True)
    first, second = fix("import torch\n\nx = 10\ny = 2\n"), fix("import torch\n\nx = 1\ny = 20\n")
    texts, why = others.combined({}, [first, second])
    assert why is None and texts[path] == (base, "import torch\n\nx = 10\ny = 20\n")
    texts, why = others.combined(texts, [fix("import torch\n\nx = 11\ny = 2\n")])
    assert "changes the same lines of" in why and "run --fix again" in why
    assert "does not parse" in others.combined({}, [fix("import torch\n\nx = (\n")])[1]
    assert "the fix also changes" in OtherFiles(analyse, {}, {path: "which is excluded"}, True).combined({}, [first])[1]
    assert "writes one text only" in OtherFiles(analyse, {}, {}, False).combined({}, [first])[1]
    assert with_file_edits(Fix("g", Applicability.SAFE), [FileEdit(path, base, base)]).files == ()  # no change: no edit
