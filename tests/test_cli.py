"""The command line, run for real in temporary folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import BACKWARD_IN_AUTOCAST, BACKWARD_OUTSIDE_AUTOCAST

BUGGY = BACKWARD_IN_AUTOCAST  # the AMP001 loop (tests/snippets.py)
CLEAN = BACKWARD_OUTSIDE_AUTOCAST


def amp_lint(*args, cwd: Path, stdin: str = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "amp_lint", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_findings_exit_1_with_location_and_summary(project):
    result = amp_lint("--no-cache", cwd=project)
    assert result.returncode == 1, result.stderr
    assert "train.py:7:9: AMP001 [*]" in result.stdout
    assert "scaler.scale(loss).backward()" in result.stdout
    assert "Found 1 error" in result.stdout
    assert "fixable with --fix" in result.stdout


def test_clean_file_exits_0(project):
    result = amp_lint("--no-cache", "clean.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All checks passed" in result.stdout


def test_json_output_schema(project):
    result = amp_lint("--no-cache", "--output-format", "json", "train.py", cwd=project)
    assert result.returncode == 1
    [finding] = json.loads(result.stdout)
    assert finding["code"] == "AMP001"
    assert finding["filename"].endswith("train.py")
    assert finding["location"] == {"row": 7, "column": 9}
    assert finding["end_location"] == {"row": 7, "column": 38}
    assert finding["severity"] == "warning"
    assert finding["fix"]["applicability"] == "safe"
    assert finding["fix"]["edits"], "JSON fixes carry their edits"
    assert finding["help"] or finding["url"]


def test_noqa_suppresses(project):
    (project / "train.py").write_text(BUGGY.replace(".backward()", ".backward()  # noqa: AMP001"))
    assert amp_lint("--no-cache", "train.py", cwd=project).returncode == 0
    (project / "train.py").write_text(BUGGY.replace(".backward()", ".backward()  # NOQA"))
    assert amp_lint("--no-cache", "train.py", cwd=project).returncode == 0
    (project / "train.py").write_text(BUGGY.replace(".backward()", ".backward()  # noqa: AMP021"))
    assert amp_lint("--no-cache", "train.py", cwd=project).returncode == 1


def test_file_level_noqa(project):
    (project / "train.py").write_text("# amp-lint: noqa\n" + BUGGY)
    assert amp_lint("--no-cache", "train.py", cwd=project).returncode == 0


def test_select_and_ignore(project):
    assert amp_lint("--no-cache", "--ignore", "AMP001", "train.py", cwd=project).returncode == 0
    assert amp_lint("--no-cache", "--select", "AMP02", "train.py", cwd=project).returncode == 0
    assert amp_lint("--no-cache", "--select", "ALL", "train.py", cwd=project).returncode == 1
    assert amp_lint("--no-cache", "--select", "AMP0", "--ignore", "AMP00", "train.py", cwd=project).returncode == 0


def test_unknown_rule_code_is_a_usage_error(project):
    result = amp_lint("--select", "AMP999", cwd=project)
    assert result.returncode == 2
    assert "AMP999" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_path_is_one_clear_line(project):
    result = amp_lint("--no-cache", "nope.py", cwd=project)
    assert result.returncode == 2
    assert "nope.py" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_syntax_error_is_reported_and_other_files_still_checked(project):
    (project / "broken.py").write_text("import torch\nwith torch.autocast('cuda'):\n    print 'loss', loss\nloss.backward()\n")
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert result.returncode == 2
    assert "broken.py:3:" in result.stdout + result.stderr
    assert "syntax error" in result.stdout + result.stderr
    assert "train.py:7:9: AMP001" in result.stdout


def test_files_that_cannot_hold_a_finding_are_not_parsed(project):
    # By design (speed): only files that mention the AMP API are parsed, so a syntax error elsewhere
    # is left to the project's other tools.
    (project / "unrelated.py").write_text("def f(:\n    pass\n")
    assert amp_lint("--no-cache", "unrelated.py", cwd=project).returncode == 0


def test_fix_writes_and_second_fix_changes_nothing(project):
    result = amp_lint("--fix", "train.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "train.py").read_text() == CLEAN
    again = amp_lint("--fix", "--exit-non-zero-on-fix", "train.py", cwd=project)
    assert again.returncode == 0
    assert (project / "train.py").read_text() == CLEAN


def test_exit_non_zero_on_fix(project):
    result = amp_lint("--fix", "--exit-non-zero-on-fix", "train.py", cwd=project)
    assert result.returncode == 1


def test_diff_writes_nothing(project):
    result = amp_lint("--diff", "train.py", cwd=project)
    assert result.returncode == 1
    assert "-        scaler.scale(loss).backward()" in result.stdout
    assert "+    scaler.scale(loss).backward()" in result.stdout
    assert (project / "train.py").read_text() == BUGGY
    assert amp_lint("--diff", "clean.py", cwd=project).returncode == 0


def test_stdin(project):
    result = amp_lint("--no-cache", "--stdin-filename", "train.py", "-", cwd=project, stdin=BUGGY)
    assert result.returncode == 1
    assert "train.py:7:9: AMP001" in result.stdout
    fixed = amp_lint("--fix", "--stdin-filename", "train.py", "-", cwd=project, stdin=BUGGY)
    assert fixed.stdout == CLEAN


def test_exit_zero(project):
    assert amp_lint("--no-cache", "--exit-zero", cwd=project).returncode == 0


def test_default_excludes_skip_virtualenvs_and_build(project):
    for folder in (".venv", "build", "node_modules", "__pycache__", ".git"):
        (project / folder).mkdir()
        (project / folder / "train.py").write_text(BUGGY)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert result.stdout.count("AMP001") == 1


def test_rule_and_rules_commands(project):
    result = amp_lint("rule", "AMP001", cwd=project)
    assert result.returncode == 0
    for section in ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References"):
        assert section in result.stdout
    assert "safe" in result.stdout
    listing = amp_lint("rules", cwd=project)
    assert "AMP021" in listing.stdout and "missing-scaler-update" in listing.stdout
    assert amp_lint("rule", "AMP999", cwd=project).returncode == 2


def test_version(project):
    from amp_lint import __version__

    result = amp_lint("--version", cwd=project)
    assert result.returncode == 0 and __version__ in result.stdout


def test_readme_rules_table_is_up_to_date():
    from amp_lint.rules.docs import main

    assert main(["--check"]) == 0, "run `python -m amp_lint.rules.docs`"


def test_verify_subcommand_is_routed(project):
    result = amp_lint("verify", "--help", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "--device" in result.stdout and "--seeds" in result.stdout
