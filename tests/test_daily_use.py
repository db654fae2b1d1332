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

from child_signals import as_from_a_terminal, sigint_report
from snippets import BACKWARD_IN_AUTOCAST, BACKWARD_OUTSIDE_AUTOCAST

BUGGY = BACKWARD_IN_AUTOCAST  # one AMP001 finding at 7:9, with a safe fix
CLEAN = BACKWARD_OUTSIDE_AUTOCAST
REPO = Path(__file__).resolve().parent.parent
RUFF = shutil.which("ruff") or (shutil.which("ruff", path=str(Path(sys.executable).parent)))


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


def test_cache_of_ruled_out_files_follows_a_nested_configuration(tmp_path):
    """A file the prefilter ruled out under one configuration is checked once another one applies to it."""
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint]\n", "sub/plain.py": "x = 1  # noqa: AMP001\n"})
    assert amp_lint("sub", cwd=tmp_path).returncode == 0
    write(tmp_path, {"sub/amp-lint.toml": "extend-select = ['AMP900']\n"})
    result = amp_lint("--output-format", "concise", "sub", cwd=tmp_path)
    assert result.returncode == 1 and "sub/plain.py:1:8: AMP900" in result.stdout, result.stdout


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


# --- 3, 4: exclude and per-file-ignores, with Ruff's semantics ------------------------------------

TREE = ["legacy/x.py", "tests/a.py", "tests/sub/b.py", "src/tests/c.py", "a/y.py", "top.py"]
# Each file has one AMP001 finding and one unused import (Ruff's F401), so both tools report every file.
BOTH = "import os\n" + BUGGY

# pattern -> the files still reported, as Ruff 0.17.6 reports them for `extend-exclude = [pattern]`.
EXCLUDE_CASES = {
    "legacy/": ["a/y.py", "src/tests/c.py", "tests/a.py", "tests/sub/b.py", "top.py"],
    "legacy": ["a/y.py", "src/tests/c.py", "tests/a.py", "tests/sub/b.py", "top.py"],
    "**/tests": ["a/y.py", "legacy/x.py", "top.py"],
    "tests": ["a/y.py", "legacy/x.py", "top.py"],
    "tests/": ["a/y.py", "legacy/x.py", "src/tests/c.py", "top.py"],
    "src/tests": ["a/y.py", "legacy/x.py", "tests/a.py", "tests/sub/b.py", "top.py"],
    "tests/*.py": ["a/y.py", "legacy/x.py", "src/tests/c.py", "top.py"],
    "*/tests": ["a/y.py", "legacy/x.py", "tests/a.py", "tests/sub/b.py", "top.py"],
    "le*": ["a/y.py", "src/tests/c.py", "tests/a.py", "tests/sub/b.py", "top.py"],
    "/tests": ["a/y.py", "legacy/x.py", "src/tests/c.py", "tests/a.py", "tests/sub/b.py", "top.py"],
}

# pattern -> the files still reported with `per-file-ignores = {pattern = [the rule]}` (Ruff 0.17.6).
PER_FILE_CASES = {
    "**/tests/*": ["a/y.py", "legacy/x.py", "top.py"],
    "tests/**/*.py": ["a/y.py", "legacy/x.py", "src/tests/c.py", "top.py"],
    "tests/*": ["a/y.py", "legacy/x.py", "src/tests/c.py", "top.py"],
    "a.py": ["a/y.py", "legacy/x.py", "src/tests/c.py", "tests/sub/b.py", "top.py"],
    "*/tests/*": ["a/y.py", "legacy/x.py", "tests/a.py", "tests/sub/b.py", "top.py"],
    "!tests/*": ["tests/a.py", "tests/sub/b.py"],
    "[st]*/*.py": ["a/y.py", "legacy/x.py", "top.py"],
}


def _tree(folder: Path, amp_lint_table: str = "", ruff_table: str = "") -> Path:
    write(folder, {name: BOTH for name in TREE})
    (folder / "pyproject.toml").write_text(
        f"[tool.amp-lint]\n{amp_lint_table}\n[tool.ruff]\n{ruff_table}\n[tool.ruff.lint]\nselect = ['F401']\n"
    )
    return folder


def _amp_files(result) -> list:
    assert result.returncode in (0, 1), result.stderr
    return sorted(reported_files(result))


def _ruff_files(result) -> list:
    assert result.returncode in (0, 1), result.stderr
    return sorted({line.split(":", 1)[0] for line in result.stdout.splitlines() if " F401 " in line})


@pytest.mark.parametrize("pattern", list(EXCLUDE_CASES))
def test_exclude_in_configuration_matches_ruff(tmp_path, pattern):
    table = f"extend-exclude = [{json.dumps(pattern)}]"
    _tree(tmp_path, table, table)
    got = _amp_files(amp_lint("--no-cache", "--output-format", "concise", ".", cwd=tmp_path))
    assert got == EXCLUDE_CASES[pattern]
    if RUFF:
        assert _ruff_files(ruff("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)) == got


@pytest.mark.parametrize("pattern", ["legacy/", "tests/*.py", "**/tests"])
def test_extend_exclude_on_the_command_line_matches_ruff(tmp_path, pattern):
    _tree(tmp_path)
    got = _amp_files(amp_lint("--no-cache", "--output-format", "concise", "--extend-exclude", pattern, ".", cwd=tmp_path))
    assert got == EXCLUDE_CASES[pattern]
    if RUFF:
        theirs = ruff("check", "--no-cache", "--output-format", "concise", "--extend-exclude", pattern, ".", cwd=tmp_path)
        assert _ruff_files(theirs) == got


def test_extend_exclude_on_the_command_line_is_split_on_commas_and_relative_to_the_cwd(tmp_path):
    _tree(tmp_path)
    args = ("--no-cache", "--output-format", "concise", "--extend-exclude", "sub/b.py,legacy", ".")
    # From inside tests/: `sub/b.py` is tests/sub/b.py (the working folder), `legacy` a bare name.
    got = _amp_files(amp_lint(*args, cwd=tmp_path / "tests"))
    assert got == ["a.py"]
    got = _amp_files(amp_lint("--no-cache", "--output-format", "concise", "--extend-exclude", "a,le*", ".", cwd=tmp_path))
    assert got == ["src/tests/c.py", "tests/a.py", "tests/sub/b.py", "top.py"]
    if RUFF:
        theirs = ruff("check", "--no-cache", "--output-format", "concise", "--extend-exclude", "sub/b.py,legacy", ".", cwd=tmp_path / "tests")
        assert _ruff_files(theirs) == ["a.py"]


@pytest.mark.parametrize("pattern", list(PER_FILE_CASES))
def test_per_file_ignores_match_ruff(tmp_path, pattern):
    _tree(tmp_path, f"per-file-ignores = {{ {json.dumps(pattern)} = ['AMP001'] }}")
    (tmp_path / "pyproject.toml").write_text(
        (tmp_path / "pyproject.toml").read_text() + f"per-file-ignores = {{ {json.dumps(pattern)} = ['F401'] }}\n"
    )
    got = _amp_files(amp_lint("--no-cache", "--output-format", "concise", ".", cwd=tmp_path))
    assert got == PER_FILE_CASES[pattern]
    if RUFF:
        assert _ruff_files(ruff("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)) == got


def test_per_file_ignores_on_the_command_line(tmp_path):
    """`--per-file-ignores` replaces the configuration's, `--extend-per-file-ignores` adds; relative to the cwd."""
    _tree(tmp_path, "per-file-ignores = { 'top.py' = ['AMP001'] }")
    base = ("--no-cache", "--output-format", "concise", ".")
    assert "top.py" not in _amp_files(amp_lint(*base, cwd=tmp_path))
    got = _amp_files(amp_lint("--per-file-ignores", "sub/*:AMP001", *base, cwd=tmp_path / "tests"))
    assert got == ["a.py"]
    got = _amp_files(amp_lint("--per-file-ignores", "legacy/*:AMP0,a/*:AMP001", *base, cwd=tmp_path))
    assert got == ["src/tests/c.py", "tests/a.py", "tests/sub/b.py", "top.py"]
    got = _amp_files(amp_lint("--extend-per-file-ignores", "tests/**:AMP001", *base, cwd=tmp_path))
    assert got == ["a/y.py", "legacy/x.py", "src/tests/c.py"]
    bad = amp_lint("--per-file-ignores", "tests/*:AMP999", *base, cwd=tmp_path)
    assert bad.returncode == 2 and "AMP999" in bad.stderr and "Traceback" not in bad.stderr
    if RUFF:
        theirs = ruff("check", "--no-cache", "--output-format", "concise", "--per-file-ignores", "sub/*:F401", ".", cwd=tmp_path / "tests")
        assert _ruff_files(theirs) == ["a.py"]


# --- 5: notebooks --------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", ["%%time", "%%timeit -n1", "%%capture output", "%%prun"])
def test_python_cell_magic_body_is_checked_like_ruff(tmp_path, magic):
    """Ruff checks the body of `%%time` and friends (cell-relative rows: the magic is row 1)."""
    write(tmp_path, {"nb.ipynb": _notebook(["x = 1\n", f"{magic}\nimport os\n" + BUGGY, "%%bash\nls -l\n"])})
    result = amp_lint("--no-cache", "--output-format", "json", "nb.ipynb", cwd=tmp_path)
    [finding] = json.loads(result.stdout)
    assert (finding["cell"], finding["location"]) == (2, {"row": 9, "column": 9})
    if RUFF:
        theirs = json.loads(ruff("check", "--no-cache", "--select", "F401", "--output-format", "json", "nb.ipynb", cwd=tmp_path).stdout)
        assert [(f["cell"], f["location"]["row"]) for f in theirs] == [(2, 2)]  # Ruff 0.17.6: cell 2, row 2


def test_other_cell_magics_stay_opaque(tmp_path):
    write(tmp_path, {"nb.ipynb": _notebook(["%%writefile train.py\n" + BUGGY, "%%bash\n" + BUGGY])})
    assert amp_lint("--no-cache", "nb.ipynb", cwd=tmp_path).returncode == 0


def test_notebook_on_stdin_is_read_as_a_notebook(tmp_path):
    text = _notebook(["x = 1\n", BUGGY])
    result = amp_lint("--no-cache", "--output-format", "concise", "--stdin-filename", "x.ipynb", "-", cwd=tmp_path, stdin=text)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "x.ipynb:cell 2:7:9: AMP001" in result.stdout
    fixed = amp_lint("--fix", "--no-cache", "--stdin-filename", "x.ipynb", "-", cwd=tmp_path, stdin=text)
    assert fixed.returncode == 0, fixed.stderr
    notebook = json.loads(fixed.stdout)  # the fixed notebook, as JSON
    assert "".join(notebook["cells"][1]["source"]) == CLEAN
    write(tmp_path, {"y.ipynb": fixed.stdout})
    assert amp_lint("--no-cache", "y.ipynb", cwd=tmp_path).returncode == 0
    bad = amp_lint("--no-cache", "--stdin-filename", "x.ipynb", "-", cwd=tmp_path, stdin=BUGGY)
    assert bad.returncode == 2 and "invalid notebook JSON" in bad.stderr
    if RUFF:  # Ruff reads it as a notebook too: cell-relative rows
        theirs = ruff("check", "--no-cache", "--select", "F401", "--output-format", "concise", "--stdin-filename", "x.ipynb", "-",
                      cwd=tmp_path, stdin=_notebook(["x = 1\n", "import os\n"]))
        assert "x.ipynb:cell 2:1:8: F401" in theirs.stdout


@pytest.mark.parametrize("output_format", ["json", "sarif"])
def test_notebook_fix_edits_use_cell_relative_rows(tmp_path, output_format):
    write(tmp_path, {"nb.ipynb": _notebook(["x = 1\n", "y = 2\n" + BUGGY])})
    result = amp_lint("--no-cache", "--output-format", output_format, "nb.ipynb", cwd=tmp_path)
    document = json.loads(result.stdout)
    if output_format == "json":
        [finding] = document
        rows = [(edit["location"]["row"], edit["end_location"]["row"]) for edit in finding["fix"]["edits"]]
        assert finding["location"]["row"] == 8
    else:
        [run] = document["runs"]
        [sarif_result] = run["results"]
        # Rows of a cell are no lines of the .ipynb file (issue 28, items 1 and 3): the region is 1:1, the cell,
        # row and the fix's edits (each naming its cell) are in the result's properties.
        assert "fixes" not in sarif_result
        regions = [edit["region"] for edit in sarif_result["properties"]["fix"]["edits"]]
        rows = [(region["startLine"], region.get("endLine", region["startLine"])) for region in regions]
        assert sarif_result["properties"]["row"] == 8 and sarif_result["properties"]["cell"] == 2
    # The backward moves out of the `with` block: the edit is in the finding's cell, around row 8.
    assert rows and all(7 <= start <= 9 and end <= 10 for start, end in rows), rows


# --- 6: standard input and excludes -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["legacy.py", "legacy/x.py", "sub/legacy.py"])
def test_force_exclude_applies_to_the_stdin_filename(tmp_path, name):
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint]\nextend-exclude = ['legacy.py', 'legacy/']\n"})
    (tmp_path / "sub").mkdir()
    args = ("--no-cache", "--force-exclude", "--stdin-filename", name, "-")
    checked = amp_lint("--no-cache", "--stdin-filename", name, "-", cwd=tmp_path, stdin=BUGGY)
    assert checked.returncode == 1  # without --force-exclude, a named file is checked
    skipped = amp_lint(*args, cwd=tmp_path, stdin=BUGGY)
    assert skipped.returncode == 0 and "AMP001" not in skipped.stdout, skipped.stdout
    assert "All checks passed" in skipped.stdout  # Ruff 0.17.6 prints the same
    fixed = amp_lint("--fix", *args, cwd=tmp_path, stdin=BUGGY)
    assert (fixed.returncode, fixed.stdout) == (0, BUGGY)  # Ruff: the text comes back unchanged
    other = amp_lint("--no-cache", "--force-exclude", "--stdin-filename", "kept.py", "-", cwd=tmp_path, stdin=BUGGY)
    assert other.returncode == 1
    if RUFF:
        write(tmp_path, {"ruff.toml": "extend-exclude = ['legacy.py', 'legacy/']\n"})
        theirs = ruff("check", "--no-cache", "--select", "F401", "--force-exclude", "--stdin-filename", name, "-", cwd=tmp_path, stdin="import os\n")
        assert theirs.returncode == 0 and "F401" not in theirs.stdout


def test_force_exclude_from_the_configuration_applies_to_stdin(tmp_path):
    write(tmp_path, {"amp-lint.toml": "force-exclude = true\nextend-exclude = ['gen_*.py']\n"})
    result = amp_lint("--no-cache", "--stdin-filename", "gen_model.py", "-", cwd=tmp_path, stdin=BUGGY)
    assert result.returncode == 0, result.stdout


# --- 7: a named file that cannot be read -----------------------------------------------------------


def _without_root_powers() -> list:
    """A command prefix under which permission bits apply (root reads everything)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permission bits do not apply")
    return [setpriv, "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def test_unreadable_named_file_is_an_error_line_and_the_others_are_checked(tmp_path):
    write(tmp_path, {"locked.py": BUGGY, "train.py": BUGGY})
    (tmp_path / "locked.py").chmod(0)
    try:
        command = _without_root_powers() + [sys.executable, "-m", "amp_lint", "--no-cache", "--output-format", "concise", "locked.py", "train.py"]
        result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        (tmp_path / "locked.py").chmod(0o644)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Usage:" not in result.stderr + result.stdout
    assert "locked.py: error: Permission denied" in result.stdout + result.stderr
    assert "train.py:7:9: AMP001" in result.stdout
    # Ruff 0.17.6 goes on too ("warning: Failed to lint locked.py: Permission denied"), but exits 0.


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_named_fifo_is_an_error_not_a_hang(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    os.mkfifo(tmp_path / "pipe.py")
    result = amp_lint("--no-cache", "--output-format", "concise", "pipe.py", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "pipe.py: error: not a regular file" in result.stdout
    assert "train.py:7:9: AMP001" in result.stdout


# --- 8: --show-settings PATH ---------------------------------------------------------------------


def test_show_settings_for_a_path_uses_that_files_configuration(tmp_path):
    write(tmp_path, {
        "pyproject.toml": "[tool.amp-lint]\nignore = ['AMP010']\n",
        "sub/amp-lint.toml": "select = ['AMP0']\nignore = ['AMP001']\n[per-file-ignores]\n'x.py' = ['AMP002']\n",
        "sub/x.py": "",
        "sub/y.py": "",
    })
    result = amp_lint("--show-settings", "sub/x.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"# Resolved settings for: {tmp_path / 'sub' / 'x.py'}"
    assert f"# Settings from {tmp_path / 'sub' / 'amp-lint.toml'}" in lines
    assert 'select = ["AMP0"]' in lines
    [enabled] = [line for line in lines if line.startswith("# Enabled rules")]
    assert "AMP010" in enabled and "AMP001" not in enabled and "AMP002" not in enabled
    other = amp_lint("--show-settings", "sub/y.py", cwd=tmp_path).stdout
    assert "AMP002" in [line for line in other.splitlines() if line.startswith("# Enabled rules")][0]
    top = amp_lint("--show-settings", cwd=tmp_path).stdout
    assert f"# Settings from {tmp_path / 'pyproject.toml'}" in top
    assert "select = []" not in top.splitlines() and "# select is not set: the rules on by default" in top
    [enabled] = [line for line in top.splitlines() if line.startswith("# Enabled rules")]
    assert "AMP001" in enabled and "AMP010" not in enabled
    if RUFF:  # Ruff 0.17.6 names the file first: `Resolved settings for: "/…/sub/x.py"`
        theirs = ruff("check", "--show-settings", "sub/x.py", cwd=tmp_path).stdout
        assert theirs.splitlines()[0] == f'Resolved settings for: "{tmp_path / "sub" / "x.py"}"'


# --- 9: GitHub annotations for file errors -----------------------------------------------------------


def test_github_format_annotates_files_that_cannot_be_checked(tmp_path):
    write(tmp_path, {"broken.py": "import torch\ndef f(:\n    scaler.scale(loss).backward()\n", "train.py": BUGGY})
    result = amp_lint("--no-cache", "--output-format", "github", ".", cwd=tmp_path)
    assert result.returncode == 2
    [error] = [line for line in result.stdout.splitlines() if line.startswith("::error") and "broken.py" in line]
    assert error.startswith("::error file=broken.py,line=")
    assert "title=amp-lint (file error)::broken.py:" in error and "syntax error" in error
    assert any(line.startswith("::warning file=train.py,line=7,") for line in result.stdout.splitlines())
    assert "broken.py" in result.stderr  # the job log says it too
    if RUFF:  # Ruff 0.17.6 annotates a syntax error as `::error title=Ruff (invalid-syntax),file=…`
        write(tmp_path, {"broken.py": "def f(:\n"})
        theirs = ruff("check", "--no-cache", "--output-format", "github", "broken.py", cwd=tmp_path)
        assert theirs.stdout.startswith("::error ")


# --- 10: a mistyped subcommand; typo hints never name hidden options ----------------------------------


def test_mistyped_subcommand_is_named_with_the_closest(tmp_path):
    result = amp_lint("chekc", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "amp-lint: error: unrecognized subcommand 'chekc' (nor a file or folder); did you mean 'check'?\n"
    assert "did you mean 'verify'" in amp_lint("verfy", cwd=tmp_path).stderr
    (tmp_path / "chekc").mkdir()  # a folder of that name is a path like any other
    write(tmp_path, {"chekc/train.py": BUGGY})
    assert amp_lint("--no-cache", "chekc", cwd=tmp_path).returncode == 1
    if RUFF:  # Ruff 0.17.6: "error: unrecognized subcommand 'chekc'" + "tip: a similar subcommand exists: 'check'"
        theirs = ruff("chekc", cwd=tmp_path / "chekc")
        assert theirs.returncode == 2 and "'check'" in theirs.stderr


def test_option_typo_hint_never_names_a_hidden_option(tmp_path):
    result = amp_lint("--prefilter-onl", cwd=tmp_path)
    assert result.returncode == 2
    assert "No such option" in result.stderr and "--prefilter-only" not in result.stderr
    assert "Did you mean '--select'?" in amp_lint("--selct", "AMP001", cwd=tmp_path).stderr


# --- 11, 12: install advice and references that work -----------------------------------------------

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_verify_without_torch_says_how_to_get_the_cpu_build(tmp_path):
    program = (
        "import importlib.util as u, sys; real = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name == 'torch' else real(name, *a)\n"
        "from amp_lint.cli import main; main(['verify'])\n"
    )
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2
    assert "--index-url https://download.pytorch.org/whl/cpu" in result.stderr
    assert "CUDA" in result.stderr and "Traceback" not in result.stderr
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in README


def test_readme_and_action_point_at_no_missing_release():
    for text in (README, (REPO / "action.yml").read_text()):
        assert "@v0.1.0" not in text and "rev: v0.1.0" not in text
        assert "pip install amp-lint " not in text  # not on a package index
    assert 'external = ["AMP"]' in README  # keeps Ruff's RUF100 from deleting `# noqa: AMP001`


# --- 13: the smaller ones ----------------------------------------------------------------------------

ANSI = "\x1b["


def test_force_color_is_honoured_like_ruff(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    assert ANSI not in amp_lint("--no-cache", "train.py", cwd=tmp_path).stdout  # a pipe: no colour
    assert ANSI in amp_lint("--no-cache", "train.py", cwd=tmp_path, env={"FORCE_COLOR": "1"}).stdout
    # NO_COLOR beats FORCE_COLOR, as in Ruff 0.17.6 (issue 28, item 16; tests/test_daily_round3.py).
    assert ANSI not in amp_lint("--no-cache", "train.py", cwd=tmp_path, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    assert ANSI not in amp_lint("--no-cache", "train.py", cwd=tmp_path, env={"FORCE_COLOR": ""}).stdout
    assert ANSI not in amp_lint("--no-cache", "--color", "never", "train.py", cwd=tmp_path, env={"FORCE_COLOR": "1"}).stdout
    if RUFF:  # Ruff 0.17.6 colours a pipe under FORCE_COLOR=1
        write(tmp_path, {"r.py": "import os\n"})
        theirs = subprocess.run([RUFF, "check", "--no-cache", "--select", "F401", "r.py"], cwd=tmp_path, capture_output=True,
                                text=True, env={**os.environ, "FORCE_COLOR": "1"})
        assert ANSI in theirs.stdout


def test_misspelled_tool_table_is_reported(tmp_path):
    write(tmp_path, {"pyproject.toml": "[tool.amp_lint]\nignore = ['AMP001']\n", "train.py": BUGGY})
    result = amp_lint("--no-cache", "train.py", cwd=tmp_path)
    assert result.returncode == 1  # not used ...
    warning = f"amp-lint: warning: {tmp_path / 'pyproject.toml'}: [tool.amp_lint] is not read; the table is named [tool.amp-lint]\n"
    assert result.stderr == warning  # ... and said so, once


def test_multi_line_call_in_a_message_reads_as_one_line(tmp_path):
    source = BUGGY.replace("        scaler.scale(loss).backward()\n", "        scaler.scale(\n            loss,\n        ).backward()\n")
    write(tmp_path, {"train.py": source})
    result = amp_lint("--no-cache", "--output-format", "json", "train.py", cwd=tmp_path)
    [finding] = json.loads(result.stdout)
    assert finding["message"].startswith("`scaler.scale(loss).backward()` runs inside the block of"), finding["message"]


def test_diff_prints_a_summary_like_ruff(tmp_path):
    write(tmp_path, {"train.py": BUGGY, "clean.py": CLEAN})
    result = amp_lint("--no-cache", "--diff", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.endswith("\nWould fix 1 error.\n")  # Ruff 0.17.6: "\nWould fix 1 error.\n" after the diff
    clean = amp_lint("--no-cache", "--diff", "clean.py", cwd=tmp_path)
    assert (clean.returncode, clean.stdout) == (0, "")  # Ruff: nothing to fix, nothing printed
    stdin = amp_lint("--no-cache", "--diff", "-", cwd=tmp_path, stdin=BUGGY)
    assert stdin.stdout.endswith("\nWould fix 1 error.\n")
    assert "Would fix" not in amp_lint("--no-cache", "--diff", "-q", ".", cwd=tmp_path).stdout
    if RUFF:
        write(tmp_path, {"r.py": "import os\n"})
        theirs = ruff("check", "--no-cache", "--select", "F401", "--diff", "r.py", cwd=tmp_path)
        assert theirs.stdout.endswith("\nWould fix 1 error.\n")


# AMP012 (info, on by default): a GradScaler under bfloat16 autocast.
INFO_ONLY = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nfor x, y in loader:\n'
    '    with torch.autocast("cuda", dtype=torch.bfloat16):\n        loss = loss_fn(model(x), y)\n'
    "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n"
)


def test_fail_on_policy_for_info_findings(tmp_path):
    """The policy (README, "Exit codes"): every finding fails, as in Ruff, unless `fail-on` raises the bar."""
    write(tmp_path, {"info.py": INFO_ONLY, "train.py": BUGGY})
    default = amp_lint("--no-cache", "--output-format", "github", "info.py", cwd=tmp_path)
    assert default.returncode == 1 and default.stdout.startswith("::notice ")
    advisory = amp_lint("--no-cache", "--fail-on", "warning", "info.py", cwd=tmp_path)
    assert advisory.returncode == 0 and "AMP012" in advisory.stdout
    assert '1 finding below fail-on = "warning" (shown, not failing the run).' in advisory.stdout
    assert amp_lint("--no-cache", "--fail-on", "warning", ".", cwd=tmp_path).returncode == 1  # AMP001 is a warning
    assert amp_lint("--no-cache", "--fail-on", "error", ".", cwd=tmp_path).returncode == 0
    write(tmp_path, {"amp-lint.toml": 'fail-on = "warning"\n'})
    assert amp_lint("--no-cache", "info.py", cwd=tmp_path).returncode == 0
    assert amp_lint("--no-cache", "--fail-on", "info", "info.py", cwd=tmp_path).returncode == 1
    write(tmp_path, {"amp-lint.toml": 'fail-on = "notice"\n'})
    bad = amp_lint("--no-cache", "info.py", cwd=tmp_path)
    assert bad.returncode == 2 and "'fail-on' must be one of info, warning, error" in bad.stderr


# --- missing against Ruff -----------------------------------------------------------------------------


def test_watch_checks_again_when_a_file_changes(tmp_path):
    import signal
    import time

    write(tmp_path, {"train.py": BUGGY})
    process = subprocess.Popen(
        [sys.executable, "-m", "amp_lint", "--watch", "--output-format", "concise", "."],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=as_from_a_terminal,
    )
    import threading

    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()

    def wait_for(text: str, after: int = 0) -> int:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            for position in range(after, len(lines)):
                if text in lines[position]:
                    return position
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not in {lines}")

    try:
        first = wait_for("train.py:7:9: AMP001")
        wait_for("Found 1 error", first)
        time.sleep(1)  # the watch takes its snapshot before it checks; mtimes need to differ
        (tmp_path / "train.py").write_text(CLEAN)
        wait_for("All checks passed!", first)
    finally:
        held = sigint_report(process.pid)
        process.send_signal(signal.SIGINT)
        try:
            _, errors = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError(f"--watch did not stop on SIGINT; SIGINT as held when sent: {held}") from None
    assert process.returncode == 0, errors
    assert "Starting amp-lint in watch mode..." in errors and "File change detected..." in errors


def test_show_files_lists_what_would_be_checked(tmp_path):
    write(tmp_path, {"a.py": "", "sub/b.ipynb": "{}", "build/c.py": "", "notes.txt": "", "pyproject.toml": "[tool.amp-lint]\nextend-exclude = ['sub/']\n"})
    result = amp_lint("--show-files", ".", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, f"{tmp_path / 'a.py'}\n")
    assert amp_lint("--show-files", "--isolated", ".", cwd=tmp_path).stdout.splitlines() == [str(tmp_path / "a.py"), str(tmp_path / "sub" / "b.ipynb")]
    if RUFF:  # Ruff 0.17.6 prints absolute paths, sorted, one a line
        theirs = ruff("check", "--show-files", "--isolated", "a.py", cwd=tmp_path)
        assert theirs.stdout == f"{tmp_path / 'a.py'}\n"


def test_extend_reads_the_base_configuration_first(tmp_path):
    write(tmp_path, {
        "pyproject.toml": "[tool.amp-lint]\nignore = ['AMP010']\nextend-exclude = ['gen/']\nfail-on = 'warning'\n",
        "pkg/amp-lint.toml": "extend = '../pyproject.toml'\nextend-select = ['AMP100']\n",
        "pkg/train.py": BUGGY,
        "pkg/gen/x.py": BUGGY,
    })
    shown = amp_lint("--show-settings", "pkg/train.py", cwd=tmp_path).stdout
    assert 'ignore = ["AMP010"]' in shown and 'extend-select = ["AMP100"]' in shown and 'fail-on = "warning"' in shown
    result = amp_lint("--no-cache", "--output-format", "concise", "pkg", cwd=tmp_path)
    # The base's `gen/` is the top-level gen/, not pkg/gen/ (Ruff 0.17.6 resolves it the same way).
    assert reported_files(result) == {"pkg/gen/x.py", "pkg/train.py"}
    write(tmp_path, {"pkg/amp-lint.toml": "extend = '../pyproject.toml'\nextend-exclude = ['gen/']\n"})
    assert reported_files(amp_lint("--no-cache", "--output-format", "concise", "pkg", cwd=tmp_path)) == {"pkg/train.py"}
    write(tmp_path, {"pkg/amp-lint.toml": "extend = 'missing.toml'\n"})
    missing = amp_lint("--no-cache", "pkg", cwd=tmp_path)
    assert missing.returncode == 2 and "'extend' names" in missing.stderr and "Traceback" not in missing.stderr
    write(tmp_path, {"pkg/amp-lint.toml": "extend = 'other.toml'\n", "pkg/other.toml": "extend = 'amp-lint.toml'\n"})
    cycle = amp_lint("--no-cache", "pkg", cwd=tmp_path)
    assert cycle.returncode == 2 and "cycle" in cycle.stderr


def test_fix_only_fixes_and_does_not_report_the_rest(tmp_path):
    write(tmp_path, {"train.py": BUGGY, "info.py": INFO_ONLY})
    result = amp_lint("--no-cache", "--fix-only", ".", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "Fixed 1 error.\n")  # Ruff 0.17.6: "Fixed 1 error." and exit 0
    assert (tmp_path / "train.py").read_text() == CLEAN
    again = amp_lint("--no-cache", "--fix-only", ".", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (0, "")  # AMP012 is left, and not reported
    write(tmp_path, {"train.py": BUGGY})
    assert amp_lint("--no-cache", "--fix-only", "--exit-non-zero-on-fix", ".", cwd=tmp_path).returncode == 1
    stdin = amp_lint("--no-cache", "--fix-only", "-", cwd=tmp_path, stdin=BUGGY)
    assert (stdin.returncode, stdin.stdout) == (0, CLEAN)
    if RUFF:
        write(tmp_path, {"r.py": "import os\n"})
        theirs = ruff("check", "--no-cache", "--select", "F401", "--fix-only", "r.py", cwd=tmp_path)
        assert (theirs.returncode, theirs.stdout) == (0, "Fixed 1 error.\n")


def test_fixable_and_unfixable(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    unfixable = amp_lint("--no-cache", "--fix", "--unfixable", "AMP001", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert unfixable.returncode == 1 and "AMP001 [*]" not in unfixable.stdout and "AMP001" in unfixable.stdout
    assert (tmp_path / "train.py").read_text() == BUGGY
    json_out = json.loads(amp_lint("--no-cache", "--unfixable", "AMP0", "--output-format", "json", "train.py", cwd=tmp_path).stdout)
    assert json_out[0]["fix"] is None  # as in Ruff: an unfixable rule's finding carries no fix
    write(tmp_path, {"amp-lint.toml": "fixable = ['AMP02']\n"})
    assert amp_lint("--no-cache", "--fix", "train.py", cwd=tmp_path).returncode == 1
    assert (tmp_path / "train.py").read_text() == BUGGY
    write(tmp_path, {"amp-lint.toml": "fixable = ['AMP0']\nunfixable = ['AMP02']\n"})
    assert amp_lint("--no-cache", "--fix", "train.py", cwd=tmp_path).returncode == 0
    assert (tmp_path / "train.py").read_text() == CLEAN
    write(tmp_path, {"amp-lint.toml": "unfixable = ['AMP999']\n"})
    assert amp_lint("--no-cache", "train.py", cwd=tmp_path).returncode == 2


def test_config_key_value_overrides_every_configuration_file(tmp_path):
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint]\nselect = ['AMP02']\n", "train.py": BUGGY})
    assert amp_lint("--no-cache", "train.py", cwd=tmp_path).returncode == 0
    assert amp_lint("--no-cache", "--config", "select = ['AMP0']", "train.py", cwd=tmp_path).returncode == 1
    both = amp_lint("--no-cache", "--config", "select = ['AMP0']", "--config", "ignore = ['AMP001']", "train.py", cwd=tmp_path)
    assert both.returncode == 0
    # a dedicated option still wins over --config, as in Ruff
    assert amp_lint("--no-cache", "--config", "select = ['AMP02']", "--select", "AMP001", "train.py", cwd=tmp_path).returncode == 1
    write(tmp_path, {"other.toml": "select = ['AMP001']\n"})
    assert amp_lint("--no-cache", "--config", "other.toml", "train.py", cwd=tmp_path).returncode == 1
    unknown = amp_lint("--config", "nope = 1", "train.py", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown key 'nope'" in unknown.stderr
    neither = amp_lint("--config", "missing.toml", "train.py", cwd=tmp_path)
    assert neither.returncode == 2 and "not a TOML KEY = VALUE pair" in neither.stderr
    if RUFF:  # Ruff 0.17.6 takes the same two spellings
        write(tmp_path, {"r.py": "import os\n"})
        assert ruff("check", "--no-cache", "--config", "lint.select = ['F401']", "r.py", cwd=tmp_path).returncode == 1


def test_silent_prints_nothing_and_keeps_the_exit_code(tmp_path):
    write(tmp_path, {"train.py": BUGGY, "clean.py": CLEAN})
    result = amp_lint("--no-cache", "-s", "train.py", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "")
    assert amp_lint("--no-cache", "--silent", "clean.py", cwd=tmp_path).returncode == 0
    assert amp_lint("--no-cache", "-s", "--diff", "train.py", cwd=tmp_path).stdout == ""
    if RUFF:  # Ruff 0.17.6: nothing printed, exit 1
        write(tmp_path, {"r.py": "import os\n"})
        theirs = ruff("check", "--no-cache", "--select", "F401", "-s", "r.py", cwd=tmp_path)
        assert (theirs.returncode, theirs.stdout) == (1, "")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_generate_shell_completion(tmp_path, shell):
    script = amp_lint("generate-shell-completion", shell, cwd=tmp_path)
    assert script.returncode == 0 and "_AMP_LINT_COMPLETE" in script.stdout
    if RUFF:  # Ruff 0.17.6 has the same command
        assert ruff("generate-shell-completion", shell, cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    ("words", "word", "expected"),
    [("amp-lint --sel", 1, "plain,--select"), ("amp-lint ru", 1, "plain,rules"), ("amp-lint check --unsafe", 2, "plain,--unsafe-fixes")],
)
def test_completion_protocol_completes_subcommands_and_check_options(tmp_path, words, word, expected):
    """What the script's shell function asks: the installed `amp-lint` script is `main` named amp-lint."""
    result = subprocess.run(
        [sys.executable, "-c", "from amp_lint.cli import main; main(prog_name='amp-lint')"], cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO), "_AMP_LINT_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(word)},
    )
    assert expected in result.stdout.splitlines(), result.stdout + result.stderr


def test_each_finding_has_a_stable_url_to_docs_generated_from_the_rule(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    [finding] = json.loads(amp_lint("--no-cache", "--output-format", "json", "train.py", cwd=tmp_path).stdout)
    assert finding["url"] is None  # issue 44.15: no address unless AMP_LINT_DOCS_URL announces one
    page = (REPO / "docs/rules/AMP001.md").read_text()
    assert page.startswith("# backward-inside-autocast (AMP001)\n") and "## Why is this bad?" in page
    hosted = amp_lint("--no-cache", "--output-format", "json-lines", "train.py", cwd=tmp_path,
                      env={"AMP_LINT_DOCS_URL": "https://example.org/amp-lint/docs/rules/"})
    assert json.loads(hosted.stdout)["url"] == "https://example.org/amp-lint/docs/rules/AMP001.md"
    rule = json.loads(amp_lint("rule", "AMP001", "--output-format", "json", cwd=tmp_path).stdout)
    assert rule["url"] is None
    if RUFF:  # Ruff 0.17.6 gives every finding a url too
        write(tmp_path, {"r.py": "import os\n"})
        [theirs] = json.loads(ruff("check", "--no-cache", "--select", "F401", "--output-format", "json", "r.py", cwd=tmp_path).stdout)
        assert theirs["url"].endswith("/unused-import")


def test_rule_docs_are_up_to_date():
    result = subprocess.run([sys.executable, "-m", "amp_lint.rules.docs", "--check"], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    from amp_lint.rules import ALL_RULES

    assert sorted(p.stem for p in (REPO / "docs" / "rules").glob("AMP*.md")) == sorted(rule.code for rule in ALL_RULES)


def test_unused_noqa_is_found_and_fixed_keeping_other_codes(tmp_path):
    source = BUGGY.replace(
        "        scaler.scale(loss).backward()\n", "        scaler.scale(loss).backward()  # noqa: AMP001\n"
    ).replace("    scaler.step(optimizer)\n", "    scaler.step(optimizer)  # noqa: E501, AMP021\n").replace(
        "    scaler.update()\n", "    scaler.update()  # noqa: AMP999\n"
    )
    write(tmp_path, {"train.py": source})
    assert amp_lint("--no-cache", "train.py", cwd=tmp_path).returncode == 0  # off by default, as Ruff's RUF100
    found = amp_lint("--no-cache", "--extend-select", "AMP900", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert found.returncode == 1
    assert found.stdout.splitlines()[:2] == [
        "train.py:8:29: AMP900 [*] Unused `noqa` directive (unused: `AMP021`)",
        "train.py:9:22: AMP900 [*] Unused `noqa` directive (unknown: `AMP999`)",
    ]
    fixed = amp_lint("--no-cache", "--extend-select", "AMP900", "--fix", "train.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout
    assert (tmp_path / "train.py").read_text() == BUGGY.replace(
        "        scaler.scale(loss).backward()\n", "        scaler.scale(loss).backward()  # noqa: AMP001\n"
    ).replace("    scaler.step(optimizer)\n", "    scaler.step(optimizer)  # noqa: E501\n")
    again = amp_lint("--no-cache", "--extend-select", "AMP900", "--fix", "train.py", cwd=tmp_path)
    assert again.returncode == 0 and (tmp_path / "train.py").read_text().count("noqa") == 2  # idempotent
    if RUFF:  # Ruff 0.17.6's RUF100 does the same for its own codes, keeping the others'
        write(tmp_path, {"r.py": "import os  # noqa: F401, E501\nx = 1  # noqa: F401, AMP001\n"})
        theirs = ruff("check", "--no-cache", "--select", "F401,RUF100", "--fix", "--config", "lint.external = ['AMP']", "r.py", cwd=tmp_path)
        assert theirs.returncode == 0, theirs.stdout + theirs.stderr
        assert (tmp_path / "r.py").read_text() == "import os  # noqa: F401\nx = 1  # noqa: AMP001\n"
