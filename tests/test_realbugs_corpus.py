"""The realbugs corpus (bench/realbugs) is well formed, and its runner runs.

The recall and the correct-shape silence are benchmark figures (bench/results/realbugs.md); nothing here asserts
them.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from amp_lint.rules import all_codes

ROOT = Path(__file__).resolve().parents[1]
REALBUGS = ROOT / "bench" / "realbugs"


def _load(name: str, path: Path):
    """Import a bench module under its own name (bench/ is no package; `run` alone would clash)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


corpus = _load("realbugs_corpus", REALBUGS / "realbugs_corpus.py")


@pytest.fixture(scope="module")
def cases():
    return corpus.load_cases()


def test_every_case_has_an_origin_a_principle_and_an_expectation_that_points_at_code(cases):
    assert corpus.corpus_errors(cases) == []


def test_the_corpus_holds_80_bugs_from_60_projects_and_40_correct_shapes(cases):
    bugs = [case for case in cases if case.is_bug]
    correct = [case for case in cases if not case.is_bug]
    assert len(bugs) >= 80
    assert len({case.project for case in bugs}) >= 60
    assert len(correct) >= 40


def test_every_expected_and_tempting_rule_is_a_rule_of_amp_lint(cases):
    known = set(all_codes())
    named = {rule for case in cases for e in case.expectations for rule in e.rules} | {
        rule for case in cases for rule in case.tempts
    }
    assert named - known == set()


def test_every_bug_cites_an_issue_or_pull_request_of_its_own_project(cases):
    for case in cases:
        if case.is_bug:
            assert case.reference.startswith(f"https://github.com/{case.project}/"), case.name


def _write(folder: Path, kind: str, name: str, text: str) -> Path:
    (folder / kind).mkdir(parents=True, exist_ok=True)
    path = folder / kind / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    return path


BAD_BUG = """\
# origin: someone/project | https://github.com/other/project/issues/3 | train.py
# principle: 9
# expect: AMP030 line 40
# summary: a clip before unscale_.
import torch
"""

BAD_CORRECT = """\
# origin: someone/project | code-search | train.py
# principle: 3
# expect: AMP030 line 5
# summary: looks wrong, is right.
x = 1
"""


def test_a_malformed_header_is_rejected_with_the_reason(tmp_path):
    bug = corpus.parse_case(_write(tmp_path, "bugs", "bad_bug", BAD_BUG), "bugs")
    correct = corpus.parse_case(_write(tmp_path, "correct", "bad_correct", BAD_CORRECT), "correct")
    assert any("not in project" in error for error in bug.errors)
    assert any("principle 9" in error for error in bug.errors)
    assert any("expected line 40" in error for error in bug.errors)
    assert any("belongs to principle 7" in error for error in correct.errors)
    assert any("expect: none" in error for error in correct.errors)
    missing = corpus.parse_case(_write(tmp_path, "bugs", "no_origin", "# principle: 3\nimport torch\n"), "bugs")
    assert "missing `origin:` header line" in missing.errors


def test_an_expectation_may_name_alternative_rules_and_lines(tmp_path):
    text = "# origin: a/b | https://github.com/a/b/pull/1 | -\n# principle: 5\n# expect: AMP024|AMP021 line 6,7\n" \
           "# summary: s\nimport torch\nx = 1\ny = 2\n"
    case = corpus.parse_case(_write(tmp_path, "bugs", "alternatives", text), "bugs")
    assert case.errors == []
    assert case.expectations == [corpus.Expectation(("AMP024", "AMP021"), (6, 7))]


def test_the_runner_reports_per_principle_per_rule_and_the_fixes_of_two_cases(tmp_path):
    output = tmp_path / "realbugs.md"
    run = subprocess.run(
        [sys.executable, str(REALBUGS / "run.py"), "--only", "p3_amp030_pytorch_unet,c_raft_scheduler_between_step_update",
         "--output", str(output), "-j", "1"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    report = output.read_text(encoding="utf-8")
    for heading in ("## Summary", "## Per principle", "## Per rule", "## Findings on correct shapes", "## Fixes on bug cases"):
        assert heading in report
    assert "Bug cases: 1 from 1 projects" in report
    assert "Correct shapes: 1." in report
    assert "| `p3_amp030_pytorch_unet` | AMP030 line 22 |" in report  # its row in the fix table


def test_the_runner_refuses_a_malformed_corpus(tmp_path):
    _write(tmp_path, "bugs", "bad_bug", BAD_BUG)
    run = subprocess.run([sys.executable, str(REALBUGS / "run.py"), "--cases", str(tmp_path), "--no-write"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert "bad_bug.py" in run.stderr


def test_the_upstream_fix_check_reads_the_fixed_code_not_the_header(tmp_path):
    realbugs_run = _load("realbugs_run", REALBUGS / "run.py")
    text = ("# origin: a/b | https://github.com/a/b/pull/1 | -\n# principle: 5\n# expect: AMP020 line 6\n"
            "# summary: the loop also calls optimizer.step() directly\n# fix-check: ^(?![\\s\\S]*optimizer\\.step\\(\\))\n"
            "optimizer.step()\n")
    case = corpus.parse_case(_write(tmp_path, "bugs", "double_step", text), "bugs")
    fixed = tmp_path / "fixed.py"
    fixed.write_text(text.replace("optimizer.step()\n", "pass\n"), encoding="utf-8")
    assert realbugs_run._judge_fix(case, fixed, [], [])["upstream"] == "yes"
    fixed.write_text(text, encoding="utf-8")
    assert realbugs_run._judge_fix(case, fixed, [], [])["upstream"] == "no"
