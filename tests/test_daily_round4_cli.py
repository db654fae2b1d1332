"""Daily use, round four (issue 44), the command line's items: exit codes of refused fixes (9), preview
selections (10), `--diff` on long files (11), unknown subcommands (12 in the issue's list: 14), links to the
rule docs (15), syntax errors (16), the README's commands (18, 19) and Ruff's short flags (20). The real command
runs in a temporary folder; Ruff's behaviour (Ruff 0.17.6, the `test` extra installs it) is written beside
each comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


from snippets import BACKWARD_IN_AUTOCAST
from test_fix_check import TRAIN, broken  # noqa: F401  (`broken`: the fixture of a rule whose fix is refused)
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


# --- 14: an unknown subcommand is named as one, and nothing is checked ----------------------------------


def test_14_unknown_subcommand_is_refused_before_anything_is_checked(tmp_path):
    write(tmp_path, {"x.py": BUGGY, "src/train.py": BUGGY})
    formatted = amp_lint("format", "x.py", cwd=tmp_path)
    assert formatted.returncode == 2 and formatted.stdout == "", formatted.stdout
    assert formatted.stderr.startswith("amp-lint: error: unrecognized subcommand 'format'"), formatted.stderr
    assert "No such file" not in formatted.stderr
    typo = amp_lint("chek", "src/", cwd=tmp_path)
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr == "amp-lint: error: unrecognized subcommand 'chek' (nor a file or folder); did you mean 'check'?\n"
    # A file or folder that exists under a word-like name is a path like any other.
    (tmp_path / "format").mkdir()
    write(tmp_path, {"format/train.py": BUGGY})
    assert amp_lint("--no-cache", "format", cwd=tmp_path).returncode == 1
    assert amp_lint("--no-cache", "src", cwd=tmp_path).returncode == 1
    if RUFF:  # Ruff 0.17.6: "error: unrecognized subcommand 'chek'" + "tip: a similar subcommand exists: 'check'"
        theirs = ruff("chek", "src/", cwd=tmp_path)
        assert theirs.returncode == 2 and "unrecognized subcommand 'chek'" in theirs.stderr


# --- 20: Ruff's -e, -n and --ignore-noqa ------------------------------------------------------------------


def test_20_ruff_short_flags_and_ignore_noqa(tmp_path):
    suppressed = BUGGY.replace("scaler.scale(loss).backward()", "scaler.scale(loss).backward()  # noqa: AMP001")
    write(tmp_path, {"train.py": BUGGY, "quiet.py": suppressed, "whole.py": "# amp-lint: noqa\n" + BUGGY})
    assert amp_lint("-n", "train.py", cwd=tmp_path).returncode == 1
    assert not (tmp_path / ".amp_lint_cache").exists()  # -n is --no-cache
    assert amp_lint("-n", "-e", "train.py", cwd=tmp_path).returncode == 0  # -e is --exit-zero
    assert amp_lint("-n", "quiet.py", "whole.py", cwd=tmp_path).returncode == 0
    ignored = amp_lint("-n", "--ignore-noqa", "--output-format", "concise", "quiet.py", "whole.py", cwd=tmp_path)
    assert ignored.returncode == 1
    assert {line.split(":")[0] for line in ignored.stdout.splitlines() if "AMP001" in line} == {"quiet.py", "whole.py"}
    # With --ignore-noqa no comment suppresses anything, so AMP900 calls none of them unused.
    unused = amp_lint("-n", "--ignore-noqa", "--extend-select", "AMP900", "--output-format", "concise", "quiet.py", cwd=tmp_path)
    assert "AMP900" not in unused.stdout and "AMP001" in unused.stdout
    if RUFF:  # Ruff 0.17.6: -e, -n and --ignore-noqa exist, and --ignore-noqa reports a suppressed F401
        write(tmp_path, {"r.py": "import os  # noqa: F401\n"})
        theirs = ruff("check", "-n", "-e", "--isolated", "--ignore-noqa", "--select", "F401", "r.py", cwd=tmp_path)
        assert theirs.returncode == 0 and "F401" in theirs.stdout


# --- 10: preview rules are not listed as enabled, and selecting one without preview says so -------------


def test_10_preview_rules_need_preview_and_a_selection_of_one_says_so(tmp_path):
    from amp_lint.rules import preview_codes

    preview = sorted(preview_codes())
    assert "AMP034" in preview
    write(tmp_path, {"train.py": BUGGY})
    settings = amp_lint("--show-settings", "train.py", cwd=tmp_path).stdout
    [enabled] = [line for line in settings.splitlines() if line.startswith("# Enabled rules")]
    assert not any(code in enabled for code in preview), enabled
    on = amp_lint("--show-settings", "--preview", "train.py", cwd=tmp_path).stdout
    [enabled] = [line for line in on.splitlines() if line.startswith("# Enabled rules")]
    assert all(code in enabled for code in preview), enabled
    result = amp_lint("-n", "--select", "AMP034", "train.py", cwd=tmp_path)
    assert result.returncode == 0
    assert "amp-lint: warning: Selection `AMP034` has no effect because preview is not enabled.\n" in result.stderr
    # A selector that also picks stable rules, or preview on: no warning.
    assert "warning" not in amp_lint("-n", "--select", "AMP03", "train.py", cwd=tmp_path).stderr
    assert "warning" not in amp_lint("-n", "--select", "AMP034", "--preview", "train.py", cwd=tmp_path).stderr
    assert "warning" not in amp_lint("-n", "--extend-select", "AMP034", "-s", "train.py", cwd=tmp_path).stderr


def test_10_the_rule_list_says_preview_not_on_for_a_preview_rule(tmp_path):
    # `amp-lint rules` listed AMP034 and AMP095 as "on": a user reading it expects them to run by default.
    from amp_lint.rules import preview_codes

    listing = amp_lint("rules", cwd=tmp_path).stdout.splitlines()
    status = {line.split()[0]: line.split()[2] for line in listing[1:] if line.strip()}
    assert all(status[code] == "preview" for code in preview_codes()), status
    assert status["AMP001"] == "on"
    records = {r["code"]: r for r in json.loads(amp_lint("rules", "--output-format", "json", cwd=tmp_path).stdout)}
    assert records["AMP034"]["preview"] is True and records["AMP034"]["default_enabled"] is False
    assert records["AMP001"]["preview"] is False and records["AMP001"]["default_enabled"] is True
    assert "runs only with --preview" in amp_lint("rule", "AMP034", cwd=tmp_path).stdout


# --- 9: a refused fix is an ordinary finding, not a failure of the tool ----------------------------------


def test_9_a_refused_fix_exits_as_a_finding_not_as_a_failure(broken, tmp_path, monkeypatch):
    """Ruff: 1 with findings left, 0 with --fix-only or --exit-zero; 2 only when the tool failed."""
    from click.testing import CliRunner

    from amp_lint import cli

    def run(*args):
        return CliRunner().invoke(cli.main, ["check", "--no-cache", "--isolated", "--select", "AMP999", *args, "train.py"])

    broken("double-scale")
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(TRAIN)
    fixed = run("--fix")
    assert Path("train.py").read_text() == TRAIN
    assert "not fixed: AMP999 at train.py:7: the fixed code scales a loss twice" in fixed.output
    assert fixed.exit_code == 1, fixed.output  # the finding is left, reported without its fix
    assert run("--fix-only").exit_code == 0  # as the README says: --fix-only exits 0 unless the tool failed
    assert run("--fix", "--exit-zero").exit_code == 0
    assert run("--diff").exit_code == 0  # nothing would change
    sarif = json.loads(run("--fix", "--output-format", "sarif").stdout)
    [invocation] = sarif["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is True
    assert invocation["toolExecutionNotifications"][0]["level"] == "warning"
    # A file that cannot be read is still a failure of the tool.
    failed = CliRunner().invoke(cli.main, ["check", "--no-cache", "--isolated", "--select", "AMP999", "--fix-only", "nowhere.py"])
    assert failed.exit_code == 2, failed.output


# --- 16: a syntax error in Python's words, at Python's position, counted in the summary -----------------


def test_16_syntax_error_is_pythons_message_at_pythons_position_and_counted(tmp_path):
    write(tmp_path, {"bad.py": 'import torch\nwith torch.autocast("cuda"): loss = model(foo(1, 2)\nscaler = 1\n'})
    result = amp_lint("-n", "bad.py", cwd=tmp_path)
    assert result.returncode == 2
    # Python: `'(' was never closed` at 2:42 (the bracket), not LibCST's "expected one of !=, %, &, ..." at 3:8.
    assert result.stdout == "bad.py:2:42: error: syntax error: '(' was never closed\n\nFound 1 error.\n", result.stdout
    [record] = json.loads(amp_lint("-n", "--output-format", "json", "bad.py", cwd=tmp_path).stdout)
    assert record["code"] == "invalid-syntax" and record["location"] == {"row": 2, "column": 42}
    if RUFF:  # Ruff 0.17.6: "r.py:2:...: SyntaxError: ..." then "Found 1 error."
        write(tmp_path, {"r.py": "import os\nx = foo(1,\n"})
        assert "Found 1 error." in ruff("check", "-n", "--isolated", "r.py", cwd=tmp_path).stdout


def test_16_the_language_server_gets_the_same_message_inside_the_document():
    """`amp_lint.parse.syntax_errors.python_syntax_error` is what the server calls: its range lies inside the text
    even where Python places the error one line past the end."""
    from amp_lint.diagnostics import Location
    from amp_lint.parse.syntax_errors import python_syntax_error

    error = python_syntax_error('import torch\nwith torch.autocast("cuda"): loss = model(foo(1, 2)\n')
    assert (error.message, error.start) == ("'(' was never closed", Location(2, 42))
    at_end = python_syntax_error("def f():\n")  # Python: line 2 (past the end), "expected an indented block"
    assert at_end.message.startswith("expected an indented block") and at_end.start == Location(1, 9) == at_end.end
    assert python_syntax_error("x = 1\n") is None


# --- 15: links lead somewhere: the docs ship in the package, a URL only where one was announced --------


def test_15_rule_docs_ship_in_the_package_and_no_url_is_made_up(tmp_path):
    import shutil as files

    # An install: the package alone, without the checkout's docs/ beside it (as a wheel puts it).
    site = tmp_path / "site"
    files.copytree(REPO / "amp_lint", site / "amp_lint", ignore=files.ignore_patterns("__pycache__"))
    assert 'server/rule_pages/*.md' in (REPO / "pyproject.toml").read_text()  # the pages are package data
    env = {"PYTHONPATH": str(site), "AMP_LINT_DOCS_URL": ""}
    work = tmp_path / "work"
    write(work, {"train.py": BUGGY})

    def installed(*args, extra=None):
        return subprocess.run([sys.executable, "-c", "from amp_lint.__main__ import run; run()", *args], cwd=work,
                              capture_output=True, text=True, timeout=120, env={**os.environ, **env, **(extra or {})})

    explained = installed("rule", "AMP072")
    assert explained.returncode == 0 and "## Why is this bad?" in explained.stdout
    [finding] = json.loads(installed("-n", "--output-format", "json", "train.py").stdout)
    assert finding["url"] is None and finding["help"] == "Run `amp-lint rule AMP001` for details"
    sarif = json.loads(installed("-n", "--output-format", "sarif", "train.py").stdout)
    driver = sarif["runs"][0]["tool"]["driver"]
    assert "informationUri" not in driver and not any("helpUri" in rule for rule in driver["rules"])
    page = subprocess.run([sys.executable, "-c", "from amp_lint.rules.urls import rule_uri; print(rule_uri('AMP072'))"],
                          cwd=work, capture_output=True, text=True, env={**os.environ, **env}).stdout.strip()
    assert page.startswith("file://") and Path(page[len("file://"):]).is_file() and str(site) in page
    # An announced address: every link goes there.
    hosted = {"AMP_LINT_DOCS_URL": "https://docs.example.org/amp-lint/rules/"}
    [finding] = json.loads(installed("-n", "--output-format", "json", "train.py", extra=hosted).stdout)
    assert finding["url"] == "https://docs.example.org/amp-lint/rules/AMP001.md"
    driver = json.loads(installed("-n", "--output-format", "sarif", "train.py", extra=hosted).stdout)["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == "https://docs.example.org/amp-lint/rules"
    assert driver["rules"][0]["helpUri"] == f"https://docs.example.org/amp-lint/rules/{driver['rules'][0]['id']}.md"
    assert "AMP_LINT_DOCS_URL" in README


# --- 18, 19: the README's test command installs the CPU build, is CI's, and the README is for users ------


def test_18_readme_test_command_installs_the_cpu_build_and_is_ci_s_command():
    [command] = [line for line in README.splitlines() if line.startswith("python3 -m venv .venv") and "pytest" in line]
    assert "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu " in command
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == command  # identical, byte for byte
    # The README is for users: the benchmark history lives in bench/, the internals in docs/.
    assert "### Measured" not in README and "## How it stays fast" not in README
    history = (REPO / "bench" / "results" / "history.md").read_text(encoding="utf-8")
    assert history.count("## Measured") >= 4
    assert len(README.encode()) < 60_000


def test_19_readme_shows_how_to_adopt_the_tool_on_a_legacy_repository(tmp_path):
    section = README.split("## Adopting amp-lint on an existing project", 1)[1].split("\n## ", 1)[0]
    for command in ("amp-lint --write-baseline amp-lint-baseline.json .", "amp-lint --baseline amp-lint-baseline.json .",
                    "amp-lint --add-noqa ."):
        assert command in section
    # And the commands do what the section says.
    write(tmp_path, {"train.py": BUGGY})
    assert amp_lint("-n", "--write-baseline", "amp-lint-baseline.json", ".", cwd=tmp_path).returncode == 0
    assert amp_lint("-n", "--baseline", "amp-lint-baseline.json", ".", cwd=tmp_path).returncode == 0
    write(tmp_path, {"new.py": BUGGY})
    assert amp_lint("-n", "--baseline", "amp-lint-baseline.json", ".", cwd=tmp_path).returncode == 1
    assert amp_lint("-n", "--add-noqa", ".", cwd=tmp_path).returncode == 0
    assert "# noqa: AMP001" in (tmp_path / "new.py").read_text()
