"""The benchmark's pipeline runs end to end on a tiny corpus. Nothing here is timed or judged on speed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "run.py"

# Stands in for amp-lint: understands the flags the benchmark passes, exits 1 on findings as
# amp-lint does, and exits 2 with a message when FAKE_AMP_LINT_FAIL is set.
FAKE_AMP_LINT = textwrap.dedent(
    """
    import json, os, re, sys
    from pathlib import Path

    args = sys.argv[1:]
    if "--version" in args:
        print("amp-lint 0.0 (fake)")
        sys.exit(0)
    if "--prefilter-only" in args and not os.environ.get("FAKE_PREFILTER"):
        print("Error: No such option '--prefilter-only'.", file=sys.stderr)
        sys.exit(2)
    if os.environ.get("FAKE_AMP_LINT_FAIL"):
        print("Traceback (most recent call last):\\nRuntimeError: boom", file=sys.stderr)
        sys.exit(2)
    takes_value = {"--output-format", "--cache-dir", "--jobs"}
    paths, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif not arg.startswith("--"):
            paths.append(Path(arg))
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py")))
    if "--prefilter-only" in args:
        for f in files:
            if re.search(rb"backward|autocast|GradScaler", f.read_bytes()):
                print(f)
        sys.exit(0)
    findings = []
    for f in files:
        text = f.read_text()
        if "GradScaler" in text:
            findings.append({"code": "AMP000", "filename": str(f)})
            if "--fix" in args:
                f.write_text(text.replace("torch.cuda.amp.", "torch.amp."))
    print(json.dumps(findings))
    sys.exit(1 if findings else 0)
    """
)


def run_self_test(tmp_path: Path, amp_lint_command: str, env_extra=None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--self-test",
            "--amp-lint",
            amp_lint_command,
            "--work-dir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_self_test_with_the_real_amp_lint(tmp_path):
    pytest.importorskip("amp_lint.cli", reason="the amp-lint CLI is not importable")
    result = run_self_test(tmp_path, f"{sys.executable} -m amp_lint")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "self-test passed" in result.stdout
    assert (tmp_path / "work" / "self-test" / "results.md").is_file()


@pytest.fixture
def fake_amp_lint(tmp_path) -> str:
    script = tmp_path / "fake_amp_lint.py"
    script.write_text(FAKE_AMP_LINT)
    return f"{sys.executable} {script}"


def test_self_test_tolerates_findings_and_a_missing_prefilter_flag(tmp_path, fake_amp_lint):
    result = run_self_test(tmp_path, fake_amp_lint)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "self-test passed" in result.stdout
    assert "no --prefilter-only flag" in result.stdout
    report = (tmp_path / "work" / "self-test" / "results.md").read_text()
    assert "amp-lint cold" in report and "1.0x (reference)" in report
    assert "## Targets" in report


def test_self_test_reads_the_prefilter_output(tmp_path, fake_amp_lint):
    result = run_self_test(tmp_path, fake_amp_lint, {"FAKE_PREFILTER": "1"})

    assert result.returncode == 0, result.stdout + result.stderr
    assert "files passing the prefilter" in result.stdout


def test_exit_code_2_is_an_error_row_with_stderr(tmp_path, fake_amp_lint):
    result = run_self_test(tmp_path, fake_amp_lint, {"FAKE_AMP_LINT_FAIL": "1"})

    assert result.returncode == 1, result.stdout + result.stderr
    assert "self-test FAILED" in result.stdout
    assert "exit code 2" in result.stdout and "RuntimeError: boom" in result.stdout


def test_a_broken_amp_lint_command_is_reported(tmp_path):
    result = run_self_test(tmp_path, f"{sys.executable} -c 'import sys; sys.exit(3)'")

    assert result.returncode == 1
    assert "--version` failed" in result.stdout
