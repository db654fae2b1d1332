"""Daily use as a Ruff user expects it (issue 18): each test runs the real command in a temporary folder.

Where Ruff has the same feature, the test runs Ruff on the same input when it is installed (the `test`
extra installs it) and compares; Ruff's output as observed with Ruff 0.17.6 is written beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import BACKWARD_IN_AUTOCAST, BACKWARD_OUTSIDE_AUTOCAST

BUGGY = BACKWARD_IN_AUTOCAST  # one AMP001 finding at 7:9, with a safe fix
CLEAN = BACKWARD_OUTSIDE_AUTOCAST
REPO = Path(__file__).resolve().parent.parent
RUFF = shutil.which("ruff") or (shutil.which("ruff", path=str(Path(sys.executable).parent)))
needs_ruff = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install '.[test]')")


def amp_lint(*args, cwd: Path, stdin: str = None, env: dict = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    for name in ("FORCE_COLOR", "NO_COLOR", "AMP_LINT_OUTPUT_FORMAT", "AMP_LINT_CACHE_DIR"):
        if name not in (env or {}):
            environment.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "amp_lint", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )


def ruff(*args, cwd: Path, stdin: str = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("FORCE_COLOR", "NO_COLOR")}
    return subprocess.run([RUFF, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, env=environment)


def write(folder: Path, files: dict) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def reported_files(result: subprocess.CompletedProcess) -> set:
    """The files named by `--output-format concise` findings."""
    return {line.split(":", 1)[0] for line in result.stdout.splitlines() if ": AMP" in line}


# --- 1, 2: the cache ---------------------------------------------------------------------------


def test_cache_replays_this_runs_paths(tmp_path):
    """Ruff prints the path of the current run whatever the cache holds; so do we."""
    write(tmp_path, {"pkg/train.py": BUGGY})
    cache = str(tmp_path / "cache")
    first = amp_lint("--cache-dir", cache, "--output-format", "concise", "pkg/train.py", cwd=tmp_path)
    assert reported_files(first) == {"pkg/train.py"}
    inside = amp_lint("--cache-dir", cache, "--output-format", "concise", "train.py", cwd=tmp_path / "pkg")
    assert reported_files(inside) == {"train.py"}, inside.stdout
    absolute = str(tmp_path / "pkg" / "train.py")
    again = amp_lint("--cache-dir", cache, "--output-format", "concise", absolute, cwd=tmp_path / "pkg")
    assert reported_files(again) == {absolute}, again.stdout
    assert list((tmp_path / "cache").rglob("*.json")), "the cache was used"


@pytest.mark.parametrize("output_format", ["json", "sarif", "json-lines"])
def test_warm_cache_keeps_fix_edits_byte_for_byte(tmp_path, output_format):
    write(tmp_path, {"train.py": BUGGY, "notebook.ipynb": _notebook([BUGGY])})
    cold = amp_lint("--no-cache", "--output-format", output_format, ".", cwd=tmp_path)
    assert '"edits"' in cold.stdout or '"replacements"' in cold.stdout or "fixes" in cold.stdout
    amp_lint("--output-format", "concise", ".", cwd=tmp_path)  # a text run fills the cache first
    for _ in range(2):  # the first of these may store, the second replays
        warm = amp_lint("--output-format", output_format, ".", cwd=tmp_path)
        assert warm.stdout == cold.stdout
    assert (tmp_path / ".amp_lint_cache").is_dir()


def test_cache_follows_a_nested_configuration(tmp_path):
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint]\n", "sub/train.py": BUGGY})
    assert amp_lint("sub", cwd=tmp_path).returncode == 1
    write(tmp_path, {"sub/amp-lint.toml": 'ignore = ["AMP001"]\n'})
    assert amp_lint("sub", cwd=tmp_path).returncode == 0


def _notebook(cells, kind="code") -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": kind, "execution_count": None, "metadata": {}, "outputs": [], "source": source.splitlines(True)}
                for source in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )
