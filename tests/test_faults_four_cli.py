"""Faults, round four (issue 45), the command line's items: an unexpected exception is one line and exit 2 (5),
and file names are escaped wherever they are printed (14). The real command runs in a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


# --- 5: an unexpected exception is one line and exit 2, and each known case its own clear error ---------


def _command(*args, cwd, stdout=subprocess.PIPE, program=None):
    """`amp-lint ARGS` as the installed script runs it (`amp_lint.__main__.run`: the top-level handler)."""
    code = program or "from amp_lint.__main__ import run; run()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_5_unexpected_exceptions_exit_2_with_one_line(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    # A baseline nested 100,000 deep: Python's JSON reader recurses.
    (tmp_path / "deep.json").write_text("[" * 100_000)
    deep = _command("-n", "--baseline", "deep.json", "train.py", cwd=tmp_path)
    assert deep.returncode == 2 and deep.stderr == "amp-lint: error: deep.json: not a valid amp-lint baseline (JSON nested too deeply)\n"
    # Standard output that cannot be written: /dev/full, and a closed one.
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            result = _command("-n", "train.py", cwd=tmp_path, stdout=full)
        assert result.returncode == 2, result.stderr
        assert result.stderr == "amp-lint: error: cannot write the report to standard output: No space left on device\n"
        with open("/dev/full", "w") as full:
            listed = _command("rules", cwd=tmp_path, stdout=full)
        assert listed.returncode == 2 and listed.stderr.count("\n") == 1 and "Traceback" not in listed.stderr
    closed = subprocess.run(f"{sys.executable} -c 'from amp_lint.__main__ import run; run()' -n train.py >&-",
                            shell=True, cwd=tmp_path, stderr=subprocess.PIPE, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert closed.returncode == 2 and closed.stderr.startswith("amp-lint: error: standard output is closed"), closed.stderr
    # Our own bug, wherever it is: one line that names it, exit 2 (never 1, "findings remain").
    boom = ("import sys, amp_lint.cli as c\n"
            "def boom(*a): raise ZeroDivisionError('boom')\n"
            "c._run_check = boom\nfrom amp_lint.__main__ import run; run()")
    crashed = _command("-n", "train.py", cwd=tmp_path, program=boom)
    assert crashed.returncode == 2
    assert crashed.stderr == "amp-lint: error: internal error: ZeroDivisionError: boom\n", crashed.stderr


def test_5_guard_reports_into_a_missing_folder(tmp_path):
    """`--amp-guard-report` (pytest) and the guard's `--report` write into a folder that does not exist yet, as
    `-o` does: a passing suite is not failed by a traceback at the end."""
    pytest.importorskip("torch")
    write(tmp_path, {"test_one.py": "def test_ok():\n    assert True\n", "script.py": "print('trained')\n"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "--amp-guard=record", "--amp-guard-report", "out/guard/report.json", "test_one.py"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert suite.returncode == 0, suite.stdout + suite.stderr
    assert json.loads((tmp_path / "out/guard/report.json").read_text()) is not None
    script = subprocess.run([sys.executable, "-m", "amp_lint.guard", "--report", "runs/1/guard.json", "script.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert script.returncode == 0 and "Traceback" not in script.stderr, script.stderr
    assert (tmp_path / "runs/1/guard.json").is_file()
