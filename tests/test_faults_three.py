"""Faults, round three (issue 29; issue 28 items 9 and 10): no input ends a run, no side file hangs it,
no neighbour poisons it. Every test runs the real CLI in a temporary folder, with a timeout."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import BACKWARD_IN_AUTOCAST, MISSING_UPDATE
from test_faults import FINDING, amp_lint, assert_no_crash, needs_fifo, output, write

BUGGY = MISSING_UPDATE


def notebook(source: str, **metadata) -> str:
    cell = {"cell_type": "code", "source": [source], "metadata": {}, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5})


# -- 1: an integer of more than 4,300 digits in a notebook's JSON ------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_notebook_with_a_huge_integer_is_checked_and_the_run_goes_on(tmp_path, jobs):
    huge = notebook(BUGGY, x="@").replace('"@"', "9" * 5000)
    write(tmp_path / "huge.ipynb", huge)
    for index in range(4):  # enough files and bytes for the workers with -j 2
        write(tmp_path / f"other{index}.py", BUGGY + "#" * 120_000 + "\n")
    result = amp_lint("check", "--no-cache", "-j", jobs, ".", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert "huge.ipynb:cell 1:8:5: AMP021" in output(result)
    assert all(f"other{index}.py{FINDING}" in output(result) for index in range(4))


def test_notebook_with_a_huge_integer_on_stdin_is_checked(tmp_path):
    huge = notebook(BUGGY, x="@").replace('"@"', "9" * 5000)
    result = amp_lint("check", "--no-cache", "--stdin-filename", "nb.ipynb", "-", cwd=tmp_path, input=huge.encode())
    assert_no_crash(result, 1)
    assert "nb.ipynb:cell 1:8:5: AMP021" in output(result)


# -- 6: standard input has the files' size limit ------------------------------------------------------


def test_endless_stdin_is_refused_at_the_size_limit(tmp_path):
    with open("/dev/zero", "rb") as endless:
        result = subprocess.run(
            [sys.executable, "-m", "amp_lint", "check", "--no-cache", "-"],
            cwd=tmp_path, stdin=endless, capture_output=True, timeout=60,
        )
    assert result.returncode == 2, result
    assert b"Traceback" not in result.stderr
    assert b"file too large to analyse" in result.stderr and b"limit is 16 MB" in result.stderr


# -- 7: ignore files are read as configuration files are ---------------------------------------------


@needs_fifo
@pytest.mark.parametrize("ignore_file", [".gitignore", ".git/info/exclude"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_ignore_file_that_is_a_fifo_or_dev_zero_neither_hangs_nor_fills_memory(tmp_path, ignore_file, kind):
    (tmp_path / ".git" / "info").mkdir(parents=True)
    write(tmp_path / "train.py", BUGGY)
    target = tmp_path / ignore_file
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    result = amp_lint("check", "--no-cache", ".", cwd=tmp_path, timeout=30)
    assert_no_crash(result, 1, 2)
    assert "train.py" + FINDING in output(result)
    assert f"{ignore_file}: error: not a regular file; its patterns are not applied" in output(result)
