"""Catalog v2 (issue 20): behaviour beyond the rules' own examples, run through the real command line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def amp_lint(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "amp_lint", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def test_amp050_on_a_branch_cast_is_no_internal_error(tmp_path):
    # Issue 21, item 9: `--select AMP050` on `if c: model.half()` then autocast was an internal error.
    write(
        tmp_path,
        "train.py",
        """
        import torch
        if c:
            model.half()
        with torch.autocast("cuda"):
            out = model(x)
        """,
    )
    for codes in ("AMP050", "AMP057", "AMP050,AMP057"):
        result = amp_lint("--no-cache", "--isolated", "--select", codes, "train.py", cwd=tmp_path)
        assert "internal error" not in result.stdout + result.stderr, result.stdout + result.stderr
        assert result.returncode == (1 if "AMP057" in codes else 0), result.stdout + result.stderr
