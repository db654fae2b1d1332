"""The cases `bench/lsp_latency.py` runs beside its generated scripts: real class-based trainers (an edit inside
the method their class calls most), and the server run from a wheel installed in a fresh venv, with the floor
of its interpreter's start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

REAL_SRC = Path.home() / ".cache" / "amp-lint-realworld" / "src"
# Class-based trainers of the pinned real-world corpus (`/work/shared/realworld.sh`), where one method calls most
# of the others (issue 31): an edit inside a method the others call.
REAL_FILES = ("monai/monai/engines/trainer.py", "flair/flair/trainers/trainer.py", "speechbrain/speechbrain/core.py")


def called_method_line(text: str):
    """In a real file: the method its class calls most (`self.name(` counted; `__init__` aside) that has a body
    of four statements or more; the 0-based line before which a statement is typed, and its indentation."""
    import ast
    import re

    tree = ast.parse(text)
    best = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for method in node.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or method.name.startswith("__"):
                continue
            body = method.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]  # after the docstring
            if len(body) < 4:
                continue
            calls = len(re.findall(rf"\bself\.{re.escape(method.name)}\(", text))
            if best is None or calls > best[0]:
                best = (calls, body[0].lineno - 1, " " * body[0].col_offset, method.name)
    if best is None:
        raise ValueError("no method with a body of four statements")
    return best[1], best[2], best[3]


def wheel_venv(folder: Path) -> Path:
    """Build this checkout's wheel and install it, with pygls, in a fresh venv at `folder` (the way users
    install it; no editable-install hook in `site`); the venv's `amp-lint` command."""
    wheels = folder / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", str(REPO_ROOT), "-w", str(wheels), "--no-deps"], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder / "venv")], check=True)
    python = folder / "venv" / "bin" / "python"
    wheel = sorted(wheels.glob("amp_lint-*.whl"))[-1]
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--force-reinstall", str(wheel), "pygls>=2.1,<3"], check=True)
    return folder / "venv" / "bin" / "amp-lint"


def interpreter_floor(python: str, runs: int = 10) -> dict:
    """The fastest of `runs` starts of the interpreter that runs the server: `python -c pass` (with `site`:
    the venv's .pth files, an editable install's import hook) and `python -I -S -c pass` (the bare floor)."""
    found = {}
    for label, flags in (("python", ["-c", "pass"]), ("python bare", ["-I", "-S", "-c", "pass"])):
        starts = []
        for _ in range(runs):
            begun = time.perf_counter()
            subprocess.run([python, *flags], check=False)
            starts.append(time.perf_counter() - begun)
        found[label] = min(starts)
    return found


def python_of(command) -> str:
    """The interpreter that runs a server command (`python -m amp_lint ...`, or a venv's `amp-lint`)."""
    if command[1:2] == ["-m"]:
        return command[0]
    return str(Path(command[0]).parent / "python")
