"""Daily use, round four (issue 44), the command line's items: exit codes of refused fixes (9), preview
selections (10), `--diff` on long files (11), unknown subcommands (12 in the issue's list: 14), links to the
rule docs (15), syntax errors (16), the README's commands (18, 19) and Ruff's short flags (20). The real command
runs in a temporary folder; Ruff's behaviour (Ruff 0.17.6, the `test` extra installs it) is written beside
each comparison.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import BACKWARD_IN_AUTOCAST
from test_daily_use import README, REPO, RUFF, amp_lint, ruff, write

BUGGY = BACKWARD_IN_AUTOCAST  # one AMP001 at 7:9, with a safe fix


# --- 11: --diff on a file of 200+ lines shows only what changed ----------------------------------------


def test_11_diff_of_a_long_file_shows_only_the_changed_lines(tmp_path):
    # Two fixed lines with an untouched blank line between them, and 300 more lines after: blank lines are over
    # 1% of the lines, difflib's "autojunk" then never matches them and showed this one removed and re-added.
    padding = "".join(f"\n\ndef helper_{i}():\n    return {i}\n" for i in range(100))
    source = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n\nwith torch.cuda.amp.autocast():\n    pass\n"
    write(tmp_path, {"train.py": source + padding})
    result = amp_lint("--no-cache", "--diff", "train.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    changed = [line for line in result.stdout.splitlines() if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
    assert changed == [
        "-scaler = torch.cuda.amp.GradScaler()",
        '+scaler = torch.amp.GradScaler("cuda")',
        "-with torch.cuda.amp.autocast():",
        '+with torch.amp.autocast("cuda"):',
    ], result.stdout
    if shutil.which("patch") is None:
        return
    patch = result.stdout.split("\nWould fix")[0]
    applied = subprocess.run(["patch", "-p1", "--dry-run"], input=patch, cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
