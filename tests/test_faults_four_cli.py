"""Faults, round four (issue 45), the command line's items: an unexpected exception is one line and exit 2 (5),
and file names are escaped wherever they are printed (14). The real command runs in a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import BACKWARD_IN_AUTOCAST
from test_daily_use import REPO, amp_lint, write

BUGGY = BACKWARD_IN_AUTOCAST  # one AMP001 at 7:9, with a safe fix
INJECTED = "a\n::error file=README.md,line=1::X\n.py"  # a GitHub workflow command, once printed at a line start
OSC = "b\x1b]0;pwned\x07\x1b[31m.py"  # a window title and a colour, once printed raw


# --- 14: control characters of a file name are escaped in every text format and listing ----------------


def test_14_file_names_are_escaped_in_every_printed_path(tmp_path):
    write(tmp_path, {INJECTED: BUGGY, OSC: BUGGY})
    for output_format in ("full", "concise", "pylint", "grouped", "github"):
        result = amp_lint("-n", "--output-format", output_format, ".", cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        lines = result.stdout.splitlines()
        assert not any(line.startswith("::error file=README.md") for line in lines), (output_format, result.stdout)
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, (output_format, result.stdout)
        if output_format in ("full", "concise", "pylint"):
            assert "a\\n::error file=README.md,line=1::X\\n.py:7" in result.stdout, (output_format, result.stdout)
    shown = amp_lint("--show-files", ".", cwd=tmp_path)
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert sorted(os.path.basename(line) for line in shown.stdout.splitlines()) == [
        "a\\n::error file=README.md,line=1::X\\n.py",
        "b\\x1b]0;pwned\\x07\\x1b[31m.py",
    ]
    # A refused write names the file too, on standard error: escaped as well.
    os.chmod(tmp_path / INJECTED, 0o444)
    os.chmod(tmp_path, 0o555)
    try:
        fixed = amp_lint("-n", "--fix", INJECTED, cwd=tmp_path)
    finally:
        os.chmod(tmp_path, 0o755)
    assert not any(line.startswith("::error") for line in (fixed.stdout + fixed.stderr).splitlines())
