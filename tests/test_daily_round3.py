"""Daily use, round three (issue 28, with issue 27's items 5-6 and issue 29's 3, 4, 15, 21, 23): the real
command in a temporary folder, compared with Ruff (the `test` extra installs it) where the item names Ruff;
Ruff's behaviour as observed with Ruff 0.17.6 is written beside each comparison.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snippets import BACKWARD_IN_AUTOCAST
from amp_lint.rules import all_codes
from test_daily_use import RUFF, _notebook, amp_lint, ruff, write

BUGGY = BACKWARD_IN_AUTOCAST  # one AMP001 at 7:9, with a safe fix
# Cell 2 builds the scaler, cell 3 steps it and never updates it: AMP021 in cell 3 names the scaler's line.
CELLS = [
    "import torch\n",
    "model = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nscaler = torch.amp.GradScaler('cuda')\n",
    "for x in range(3):\n    with torch.autocast('cuda'):\n        loss = model(torch.randn(2, 2).cuda()).sum()\n"
    "    scaler.scale(loss).backward()\n    scaler.step(opt)\n",
]
# Two deprecated names in one import statement: one rewrite of the import fixes both findings.
TWO_IN_ONE_IMPORT = (
    "import torch\nfrom torch.cuda.amp import GradScaler, autocast\n\n"
    "scaler = GradScaler()\nwith autocast():\n    pass\n"
)
SCHEMA = Path("/work/shared/schemas/sarif-schema-2.1.0.json")


def _json(result):
    return json.loads(result.stdout)


# --- 28.1-3: notebook findings in CI formats, messages that name another line, edits of several cells --


def test_notebook_findings_name_their_cell_in_every_ci_format(tmp_path):
    write(tmp_path, {"nb.ipynb": _notebook(CELLS)})
    github = amp_lint("--no-cache", "--output-format", "github", "nb.ipynb", cwd=tmp_path)
    # Row 5 of the joined cells would point into the notebook's JSON: 1:1, the cell in the message, as Ruff.
    assert "line=1,col=1,endLine=1,endColumn=1," in github.stdout
    assert "::nb.ipynb:cell 3:5:5: AMP021 " in github.stdout
    gitlab = _json(amp_lint("--no-cache", "--output-format", "gitlab", "nb.ipynb", cwd=tmp_path))
    assert gitlab[0]["location"]["lines"] == {"begin": 1, "end": 1} and "(cell 3, line 5)" in gitlab[0]["description"]
    junit = amp_lint("--no-cache", "--output-format", "junit", "nb.ipynb", cwd=tmp_path).stdout
    assert 'name="AMP021 cell 3:5:5"' in junit and "nb.ipynb:cell 3:5:5: AMP021" in junit
    sarif = _json(amp_lint("--no-cache", "--output-format", "sarif", "nb.ipynb", cwd=tmp_path))
    [result] = sarif["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert result["properties"]["cell"] == 3 and "(cell 3, line 5, column 5)" in result["message"]["text"]
    _validate_sarif(sarif)
    if RUFF:  # Ruff 0.17.6: `::error title=ruff (F401),file=/abs/nb.ipynb,line=1,col=1,endLine=1,endColumn=1::...`
        write(tmp_path, {"r.ipynb": _notebook(["import os\n", "x = 1\nimport sys\n"])})
        theirs = ruff("check", "--no-cache", "--isolated", "--output-format", "github", "r.ipynb", cwd=tmp_path)
        assert all("line=1,col=1,endLine=1,endColumn=1" in line for line in theirs.stdout.splitlines())


def test_a_message_that_names_another_line_names_its_cell(tmp_path):
    write(tmp_path, {"nb.ipynb": _notebook(CELLS)})
    expected = "(scaler created at cell 2, line 3)"
    concise = amp_lint("--no-cache", "--output-format", "concise", "nb.ipynb", cwd=tmp_path).stdout
    assert expected in concise, concise
    [finding] = _json(amp_lint("--no-cache", "--output-format", "json", "nb.ipynb", cwd=tmp_path))
    assert expected in finding["message"]
    assert finding["related"] == [
        {"message": "scaler created", "location": {"row": 3, "column": 10}, "end_location": {"row": 3, "column": 38}, "cell": 2}
    ]
    sarif = _json(amp_lint("--no-cache", "--output-format", "sarif", "nb.ipynb", cwd=tmp_path))
    assert expected in sarif["runs"][0]["results"][0]["message"]["text"]
    github = amp_lint("--no-cache", "--output-format", "github", "nb.ipynb", cwd=tmp_path).stdout
    assert expected in github


def test_edits_of_several_cells_each_name_their_cell(tmp_path):
    cells = ["import torch\nfrom torch.cuda.amp import GradScaler\n", "x = 1\n", "scaler = GradScaler()\n"]
    write(tmp_path, {"nb.ipynb": _notebook(cells)})
    [finding] = _json(amp_lint("--no-cache", "--select", "AMP072", "--output-format", "json", "nb.ipynb", cwd=tmp_path))
    edits = finding["fix"]["edits"]
    assert {edit["cell"] for edit in edits} == {1, 3}, edits  # the import in cell 1, the call in cell 3
    sarif = _json(amp_lint("--no-cache", "--select", "AMP072", "--output-format", "sarif", "nb.ipynb", cwd=tmp_path))
    [result] = sarif["runs"][0]["results"]
    assert "fixes" not in result  # rows of cells are no artifact change of the notebook's JSON
    _validate_sarif(sarif)
    assert {edit["cell"] for edit in result["properties"]["fix"]["edits"]} == {1, 3}
    # The edits, applied cell by cell, give what --fix writes.
    fixed = amp_lint("--no-cache", "--select", "AMP072", "--fix", "nb.ipynb", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    sources = ["".join(c["source"]) for c in json.loads((tmp_path / "nb.ipynb").read_text())["cells"]]
    for cell, text in enumerate(cells, start=1):
        lines = text.splitlines(True)
        for edit in sorted((e for e in edits if e["cell"] == cell), key=lambda e: (e["location"]["row"], e["location"]["column"]), reverse=True):
            start = sum(len(line) for line in lines[: edit["location"]["row"] - 1]) + edit["location"]["column"] - 1
            end = sum(len(line) for line in lines[: edit["end_location"]["row"] - 1]) + edit["end_location"]["column"] - 1
            text = text[:start] + edit["content"] + text[end:]
            lines = text.splitlines(True)
        assert text == sources[cell - 1]


# --- 28.4: paths GitHub and SARIF readers can find ---------------------------------------------------


def test_github_paths_are_from_the_repository_root(tmp_path):
    write(tmp_path, {".git/HEAD": "ref: refs/heads/main\n", "pkg_a/src/x.py": BUGGY, "a.py": BUGGY})
    result = amp_lint("--no-cache", "--output-format", "github", ".", cwd=tmp_path / "pkg_a")
    assert result.stdout.startswith("::warning file=pkg_a/src/x.py,line=7,"), result.stdout
    assert "::src/x.py:7:9: AMP001" in result.stdout  # the message keeps the path the user gave
    # GitHub's workspace wins where it holds the file (a checkout whose .git is elsewhere).
    env = {"GITHUB_WORKSPACE": str(tmp_path / "pkg_a")}
    scoped = amp_lint("--no-cache", "--output-format", "github", ".", cwd=tmp_path / "pkg_a", env=env)
    assert scoped.stdout.startswith("::warning file=src/x.py,"), scoped.stdout
    if RUFF:  # Ruff 0.17.6 writes absolute paths (`file=/…/pkg_a/src/x.py`), which GitHub also places
        write(tmp_path, {"pkg_a/src/y.py": "import os\n"})
        theirs = ruff("check", "--no-cache", "--isolated", "--output-format", "github", ".", cwd=tmp_path / "pkg_a")
        assert f"file={tmp_path / 'pkg_a' / 'src' / 'y.py'}," in theirs.stdout


def test_sarif_uris_resolve_for_files_above_the_working_folder(tmp_path):
    write(tmp_path, {"a.py": BUGGY, "sub/b.py": BUGGY})
    log = _json(amp_lint("--no-cache", "--output-format", "sarif", "../a.py", "b.py", cwd=tmp_path / "sub"))
    run = log["runs"][0]
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert {"uri": (tmp_path / "a.py").as_uri()} in uris  # never `../a.py`
    assert {"uri": "b.py", "uriBaseId": "%SRCROOT%"} in uris
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (tmp_path / "sub").as_uri() + "/"
    _validate_sarif(log)


def _validate_sarif(log):
    jsonschema = pytest.importorskip("jsonschema")
    if SCHEMA.is_file():
        jsonschema.validate(log, json.loads(SCHEMA.read_text()))


# --- 28.5: file errors in json and json-lines ---------------------------------------------------------


@pytest.mark.parametrize("output_format", ["json", "json-lines"])
def test_json_reports_a_syntax_error_as_a_diagnostic(tmp_path, output_format):
    write(tmp_path, {"bad.py": "import torch\nscaler = torch.amp.GradScaler()\ndef f(:\n", "train.py": BUGGY})
    result = amp_lint("--no-cache", "--output-format", output_format, ".", cwd=tmp_path)
    assert result.returncode == 2  # a file could not be checked
    records = json.loads(result.stdout) if output_format == "json" else [json.loads(line) for line in result.stdout.splitlines()]
    syntax = [r for r in records if r["code"] == "invalid-syntax"]
    assert len(syntax) == 1 and syntax[0]["filename"] == "bad.py" and syntax[0]["location"]["row"] >= 3
    assert syntax[0]["fix"] is None and syntax[0]["severity"] == "error" and syntax[0]["url"] is None
    assert set(syntax[0]) == set(next(r for r in records if r["code"] == "AMP001"))  # the same fields
    if RUFF:  # Ruff 0.17.6: {"code": "invalid-syntax", "filename": "/…/bad.py", "fix": null, "url": null, ...}
        theirs = json.loads(ruff("check", "--no-cache", "--isolated", "--output-format", "json", "bad.py", cwd=tmp_path).stdout)
        assert theirs and all(r["code"] == "invalid-syntax" and r["fix"] is None for r in theirs)


def test_json_reports_a_fix_that_was_refused():
    from amp_lint.diagnostics import FileError, Location, Report
    from amp_lint.reports import RenderOptions, render

    refused = FileError("train.py", "not fixed: AMP030 at train.py:8: the fixed code calls scaler.unscale_(opt) twice", Location(8, 5))
    in_cell = FileError("nb.ipynb", "cell 2: syntax error: unexpected indent", Location(3, 1), cell=2)
    records = json.loads(render(Report(errors=[refused, in_cell]), "json", RenderOptions()))
    assert [(r["code"], r["location"], r["cell"]) for r in records] == [
        ("not-fixed", {"row": 8, "column": 5}, None),
        ("invalid-syntax", {"row": 3, "column": 1}, 2),
    ]


def test_json_reports_a_fix_that_was_not_written(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    os.chmod(tmp_path / "train.py", 0o444)
    os.chmod(tmp_path, 0o555)  # no temporary file can be made beside it
    try:
        if os.access(tmp_path, os.W_OK):
            pytest.skip("running as root: permissions are not enforced")
        result = amp_lint("--no-cache", "--fix", "--output-format", "json", "train.py", cwd=tmp_path)
    finally:
        os.chmod(tmp_path, 0o755)
    records = _json(result)
    assert result.returncode == 2
    assert [r["code"] for r in records] == ["AMP001", "not-fixed"], records


# --- 28.6 and 27.6: every finding a fix removes is counted ---------------------------------------------


def test_one_import_rewrite_counts_both_findings(tmp_path):
    write(tmp_path, {"train.py": TWO_IN_ONE_IMPORT})
    diff = amp_lint("--no-cache", "--diff", "--select", "AMP07", "train.py", cwd=tmp_path)
    assert diff.stdout.endswith("\nWould fix 2 errors.\n"), diff.stdout
    fixed = amp_lint("--no-cache", "--fix", "--select", "AMP07", "train.py", cwd=tmp_path)
    assert "Fixed 2 errors (0 remaining)." in fixed.stdout, fixed.stdout
    write(tmp_path, {"train.py": TWO_IN_ONE_IMPORT})
    only = amp_lint("--no-cache", "--fix-only", "--select", "AMP07", "train.py", cwd=tmp_path)
    assert only.stdout.strip() == "Fixed 2 errors."
    write(tmp_path, {"train.py": TWO_IN_ONE_IMPORT})
    # The pre-commit fix hook's entry (.pre-commit-hooks.yaml).
    hook = amp_lint("check", "--fix", "--exit-non-zero-on-fix", "--force-exclude", "--select", "AMP07", "train.py", cwd=tmp_path)
    assert "Fixed 2 errors" in hook.stdout and hook.returncode == 1
    if RUFF:  # Ruff 0.17.6 counts every diagnostic a fix removes: two unused names of one import statement
        write(tmp_path, {"r.py": "from os import path, sep\n"})
        assert ruff("check", "--no-cache", "--isolated", "--diff", "r.py", cwd=tmp_path).stdout.endswith("Would fix 2 errors.\n")
        theirs = ruff("check", "--no-cache", "--isolated", "--fix", "r.py", cwd=tmp_path)
        assert "Found 2 errors (2 fixed, 0 remaining)." in theirs.stdout


# --- 27.5: one run converges -------------------------------------------------------------------------

CLIP_OUTSIDE_BOUNDARY = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y) / accum
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""


def test_one_fix_run_reaches_the_fixed_point(tmp_path):
    """AMP030's `unscale_` is refused while the clip runs on every micro-batch, and right once AMP041 moved
    the clip into the boundary: one run applies both (it took two runs, the first exiting 2)."""
    write(tmp_path, {"train.py": CLIP_OUTSIDE_BOUNDARY})
    result = amp_lint("--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not fixed" not in result.stdout + result.stderr
    assert "Fixed 2 errors (0 remaining)." in result.stdout
    assert (tmp_path / "train.py").read_text().endswith(
        "    if (i + 1) % accum == 0:\n        scaler.unscale_(optimizer)\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        scaler.step(optimizer)\n"
        "        scaler.update()\n        optimizer.zero_grad()\n"
    )
    again = amp_lint("--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert again.returncode == 0 and "Fixed" not in again.stdout


# --- 28.8: --fix on standard input ------------------------------------------------------------------


def test_fix_on_stdin_reports_what_is_left_on_stderr(tmp_path):
    code = BUGGY
    result = amp_lint("--no-cache", "--fix", "-", cwd=tmp_path, stdin=TWO_IN_ONE_IMPORT + "loss.backward()\n")
    assert result.stdout.startswith("import torch\nfrom torch.amp import GradScaler, autocast\n")  # the code only
    assert "Fixed 2 errors" in result.stderr, result.stderr
    left = amp_lint("--no-cache", "--fix", "--select", "AMP001", "--unfixable", "AMP001", "-", cwd=tmp_path, stdin=code)
    assert left.stdout == code and left.returncode == 1
    assert "-:7:9: AMP001" in left.stderr and "Found 1 error." in left.stderr, left.stderr
    only = amp_lint("--no-cache", "--fix-only", "-", cwd=tmp_path, stdin=TWO_IN_ONE_IMPORT)
    assert only.stderr.strip() == "Fixed 2 errors." and only.returncode == 0
    if RUFF:  # Ruff 0.17.6: the fixed code on stdout, "F821 Undefined name ... Found 2 errors (1 fixed, 1 remaining)." on stderr
        theirs = ruff("check", "--no-cache", "--isolated", "--fix", "-", cwd=tmp_path, stdin="import os\nx = undefined_name\n")
        assert theirs.stdout == "x = undefined_name\n" and "F821" in theirs.stderr and "1 remaining" in theirs.stderr


# --- 28.11, 28.12: --output-file's folder, an empty folder ----------------------------------------------


def test_output_file_creates_its_folder(tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    result = amp_lint("--no-cache", "--output-format", "json", "--output-file", "out/deep/r.json", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert _json_file(tmp_path / "out" / "deep" / "r.json")[0]["code"] == "AMP001"
    if RUFF:  # Ruff 0.17.6 creates out/deep/ too
        theirs = ruff("check", "--no-cache", "--isolated", "-o", "rout/deep/r.txt", "train.py", cwd=tmp_path)
        assert (tmp_path / "rout" / "deep" / "r.txt").is_file(), theirs.stderr


def _json_file(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_an_empty_folder_warns_that_no_python_file_was_found(tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path, {"empty/notes.txt": "no code\n"})
    result = amp_lint("--no-cache", "empty", cwd=tmp_path)
    assert result.returncode == 0
    assert "warning: No Python files found under the given path(s)" in result.stderr
    assert amp_lint("--no-cache", "-q", "empty", cwd=tmp_path).stderr == result.stderr  # -q keeps it, as Ruff
    assert "No Python files" not in amp_lint("--no-cache", "-s", "empty", cwd=tmp_path).stderr
    if RUFF:  # Ruff 0.17.6: "warning: No Python files found under the given path(s)", exit 0
        theirs = ruff("check", "--no-cache", "--isolated", "empty", cwd=tmp_path)
        assert theirs.returncode == 0 and "warning: No Python files found under the given path(s)" in theirs.stderr


# --- 28.13, 28.14: Ruff's configuration habits ----------------------------------------------------------


def test_extend_ignore_lint_section_show_fixes_and_extend_fixable(tmp_path):
    write(tmp_path, {"train.py": TWO_IN_ONE_IMPORT})
    ignored = amp_lint("--no-cache", "--output-format", "concise", "--extend-ignore", "AMP072", "train.py", cwd=tmp_path)
    assert "AMP072" not in ignored.stdout and "AMP070" in ignored.stdout, ignored.stdout + ignored.stderr
    write(tmp_path, {"pyproject.toml": (
        "[tool.amp-lint]\nignore = [\"AMP001\"]\nshow-fixes = true\n\n"
        "[tool.amp-lint.lint]\nextend-ignore = [\"AMP072\"]\nunfixable = [\"AMP07\"]\nextend-fixable = [\"AMP070\"]\n"
    )})
    result = amp_lint("--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 x AMP070" in result.stdout  # show-fixes lists it; AMP070's fix is on (more specific than AMP07)
    settings = amp_lint("--show-settings", "train.py", cwd=tmp_path).stdout
    assert 'extend-ignore = ["AMP072"]' in settings and "show-fixes = true" in settings
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint.lint]\nextend-ignore = \"AMP0\"\n"})
    bad = amp_lint("--no-cache", "train.py", cwd=tmp_path)
    assert bad.returncode == 2 and "'extend-ignore' must be a list of strings" in bad.stderr
    if RUFF:  # Ruff 0.17.6 reads `[tool.ruff.lint]` with extend-ignore and extend-fixable
        write(tmp_path, {"r/pyproject.toml": "[tool.ruff.lint]\nextend-ignore = [\"F401\"]\nextend-fixable = [\"F\"]\n",
                         "r/a.py": "import os\n"})
        assert ruff("check", "--no-cache", "a.py", cwd=tmp_path / "r").returncode == 0


def test_the_more_specific_selector_wins(tmp_path):
    write(tmp_path, {"train.py": TWO_IN_ONE_IMPORT})

    def codes(*args):
        result = amp_lint("--no-cache", "--output-format", "concise", *args, "train.py", cwd=tmp_path)
        return sorted({line.split(": ")[1].split()[0] for line in result.stdout.splitlines() if ": AMP" in line})

    assert codes("--select", "AMP070", "--ignore", "AMP0") == ["AMP070"]
    assert codes("--select", "AMP0", "--ignore", "AMP070") == ["AMP072"]
    assert codes("--select", "AMP070", "--ignore", "AMP070") == []  # the same specificity: ignore wins
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint]\nignore = [\"AMP07\"]\nextend-select = [\"AMP070\"]\n"})
    assert codes() == ["AMP070"]
    # Across layers the later one works on the earlier one's result (Ruff's rule_selections): the option's
    # ignore drops what the configuration's more specific extend-select added, and a --select starts afresh.
    assert codes("--ignore", "AMP07") == []
    assert codes("--extend-select", "AMP072") == ["AMP070", "AMP072"]
    write(tmp_path, {"pyproject.toml": "[tool.amp-lint]\nextend-select = [\"AMP070\"]\n"})
    assert codes("--ignore", "AMP07") == []
    assert codes("--select", "AMP07", "--ignore", "AMP072") == ["AMP070"]
    if RUFF:  # the same across layers: a config extend-select of F401, then --ignore F, drops F401
        write(tmp_path, {"l/pyproject.toml": "[tool.ruff.lint]\nextend-select = [\"F401\"]\n", "l/r.py": "import os\n"})
        assert ruff("check", "--no-cache", "--ignore", "F", "r.py", cwd=tmp_path / "l").returncode == 0
        assert "F401" in ruff("check", "--no-cache", "r.py", cwd=tmp_path / "l").stdout
    if RUFF:  # Ruff 0.17.6 keeps F401 for --select F401 --ignore F, drops it for --select F --ignore F401
        write(tmp_path, {"r.py": "import os\n"})
        keep = ruff("check", "--no-cache", "--isolated", "--select", "F401", "--ignore", "F", "r.py", cwd=tmp_path)
        drop = ruff("check", "--no-cache", "--isolated", "--select", "F", "--ignore", "F401", "r.py", cwd=tmp_path)
        assert "F401" in keep.stdout and drop.returncode == 0


# --- 28.16: colour ----------------------------------------------------------------------------------------

ANSI = "\x1b["


def test_no_color_beats_force_color_and_clicolor_force_forces(tmp_path):
    write(tmp_path, {"train.py": BUGGY})

    def coloured(**env):
        return ANSI in amp_lint("--no-cache", "train.py", cwd=tmp_path, env={"CLICOLOR_FORCE": "", "CLICOLOR": "", **env}).stdout

    assert coloured(FORCE_COLOR="1") and not coloured(FORCE_COLOR="1", NO_COLOR="1")
    assert not coloured(FORCE_COLOR="0") and not coloured(FORCE_COLOR="false")
    assert coloured(CLICOLOR_FORCE="1") and not coloured(CLICOLOR_FORCE="0")
    assert not coloured(CLICOLOR_FORCE="1", NO_COLOR="1")
    assert ANSI in amp_lint("--no-cache", "--color", "always", "train.py", cwd=tmp_path, env={"NO_COLOR": "1"}).stdout
    if RUFF:  # Ruff 0.17.6: NO_COLOR beats FORCE_COLOR; CLICOLOR_FORCE=1 colours a pipe
        write(tmp_path, {"r.py": "import os\n"})
        environment = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "CLICOLOR_FORCE")}
        run = lambda **env: subprocess.run([RUFF, "check", "--no-cache", "--isolated", "r.py"], cwd=tmp_path,
                                           capture_output=True, text=True, env={**environment, **env}).stdout
        assert ANSI not in run(FORCE_COLOR="1", NO_COLOR="1") and ANSI in run(CLICOLOR_FORCE="1")


# --- 28.17: shell completion ------------------------------------------------------------------------------


def _complete(tmp_path, shell, words, incomplete):
    """What the completion script asks `amp-lint` (as the installed command, whose name sets the variable)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), "_AMP_LINT_COMPLETE": f"{shell}_complete",
           "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)) if shell != "powershell" else incomplete}
    program = "from amp_lint.cli import main; main(prog_name='amp-lint')"
    return subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env).stdout


def test_completion_of_rule_codes_and_output_formats(tmp_path):
    bash = _complete(tmp_path, "bash", "amp-lint --select AMP07", "AMP07").split()
    assert "plain,AMP070" in bash and "plain,AMP072" in bash and not any("AMP001" in item for item in bash)
    after_comma = _complete(tmp_path, "bash", "amp-lint check --ignore AMP001,AMP02", "AMP001,AMP02").split()
    assert "plain,AMP001,AMP020" in after_comma
    formats = _complete(tmp_path, "bash", "amp-lint --output-format js", "js").split()
    assert formats == ["plain,json", "plain,json-lines"]
    zsh = _complete(tmp_path, "zsh", "amp-lint rule AMP02", "AMP02")
    assert "AMP021\nscaler.step() without scaler.update() in the iteration" in zsh  # the summary as help


def test_powershell_completion(tmp_path):
    script = amp_lint("generate-shell-completion", "powershell", cwd=tmp_path)
    assert script.returncode == 0 and "Register-ArgumentCompleter -Native -CommandName amp-lint" in script.stdout
    assert "_AMP_LINT_COMPLETE" in script.stdout
    lines = _complete(tmp_path, "powershell", "amp-lint --output-format s", "s").splitlines()
    assert lines == ["sarif\t"]
    codes = _complete(tmp_path, "powershell", "amp-lint --extend-select AMP09", "AMP09").splitlines()
    assert codes[0].startswith("AMP090\t") and len(codes) == len([c for c in all_codes() if c.startswith("AMP09")])
    if RUFF:  # Ruff 0.17.6 generates a PowerShell script too
        assert "Register-ArgumentCompleter" in ruff("generate-shell-completion", "powershell", cwd=tmp_path).stdout


# --- 28.19: install hints that work without a package index --------------------------------------------


def test_install_hints_work_from_a_checkout_and_readme_says_how_to_install_as_a_tool(tmp_path):
    from test_daily_use import README, REPO

    sources = [path.read_text(encoding="utf-8") for path in (REPO / "amp_lint").rglob("*.py")]
    sources += [README, (REPO / "action.yml").read_text(encoding="utf-8")]
    for text in sources:
        assert "'amp-lint[" not in text and "amp-lint==" not in text  # on no package index
    for command in ("uv tool install .", "uvx --from . amp-lint", "pipx install ."):
        assert command in README
    program = (  # an install without the lsp extra: no pygls (tests/test_server.py checks the whole line)
        "import sys\nclass B:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pygls', 'lsprotocol'): raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, B())\nfrom amp_lint.cli import main; sys.argv = ['amp-lint', 'server']; main()\n"
    )
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2 and "pip install 'pygls>=2.1,<3'" in result.stderr


# --- 29.3, 29.4, 29.15: names, terminals, escape sequences --------------------------------------------


@pytest.mark.parametrize("output_format", ["json", "json-lines", "junit", "full", "sarif", "github"])
def test_a_file_name_that_is_not_utf8_gives_valid_output(tmp_path, output_format):
    if sys.platform == "darwin":
        pytest.skip("macOS file systems refuse names that are not UTF-8")
    name = os.fsdecode(b"caf\xe9.py")
    (tmp_path / name).write_text(BUGGY)
    result = subprocess.run([sys.executable, "-m", "amp_lint", "--no-cache", "--output-format", output_format, "-o", "r.out", "."],
                            cwd=tmp_path, capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert result.returncode == 1 and b"Traceback" not in result.stderr, result.stderr
    text = (tmp_path / "r.out").read_bytes().decode("utf-8")  # valid UTF-8
    assert ("caf%EF%BF%BD.py" if output_format == "sarif" else "caf\ufffd.py") in text
    if output_format in ("json", "sarif"):
        json.loads(text)
    elif output_format == "json-lines":
        [json.loads(line) for line in text.splitlines()]
    elif output_format == "junit":
        import xml.dom.minidom

        xml.dom.minidom.parseString(text.encode("utf-8"))


def test_a_latin1_terminal_and_a_non_ascii_finding(tmp_path):
    write(tmp_path, {"train.py": BUGGY.replace("scaler.update()", "scaler.update()  # λ").replace(
        "scaler.scale(loss).backward()", "scaler.scale(loss).backward()  # λ")})
    for output_format in ("full", "json", "github"):
        result = amp_lint("--no-cache", "--output-format", output_format, "train.py", cwd=tmp_path, env={"PYTHONIOENCODING": "latin-1"})
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr


def test_osc_sequences_never_reach_the_terminal(tmp_path):
    osc = "\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\x9b31m"
    code = BUGGY.replace("scaler.scale(loss).backward()", f"scaler.scale(loss).backward()  # {osc}")
    code = code.replace('torch.autocast("cuda")', f'torch.autocast("cuda")  # {osc}')
    write(tmp_path, {"train.py": code})
    for output_format in ("full", "concise", "github", "grouped", "pylint"):
        for env in ({}, {"FORCE_COLOR": "1"}):
            out = amp_lint("--no-cache", "--output-format", output_format, "train.py", cwd=tmp_path, env=env).stdout
            assert "\x1b]" not in out and "\x07" not in out and "\x9b" not in out and "pwned" not in out, (output_format, out)



# --- 29.21: a baseline written at the project root ---------------------------------------------------


def test_a_baseline_matches_from_a_subfolder_and_with_absolute_paths(tmp_path):
    write(tmp_path, {"pkg/train.py": BUGGY, "pkg/new.py": "x = 1\n"})
    written = amp_lint("--no-cache", "--write-baseline", "baseline.json", ".", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert json.loads((tmp_path / "baseline.json").read_text())["findings"][0]["filename"] == "pkg/train.py"
    for args, cwd in ((["."], tmp_path / "pkg"), ([str(tmp_path / "pkg" / "train.py")], tmp_path), (["pkg"], tmp_path)):
        baseline = os.path.relpath(tmp_path / "baseline.json", cwd)
        result = amp_lint("--no-cache", "--baseline", baseline, *args, cwd=cwd)
        assert result.returncode == 0, (args, cwd, result.stdout)
    # A finding added since is still new, from anywhere.
    (tmp_path / "pkg" / "new.py").write_text(BUGGY)
    result = amp_lint("--no-cache", "--baseline", "../baseline.json", "--output-format", "concise", ".", cwd=tmp_path / "pkg")
    assert result.returncode == 1 and "new.py:7:9: AMP001" in result.stdout and "train.py" not in result.stdout


# --- 29.23: SIGTERM ------------------------------------------------------------------------------------


def test_sigterm_exits_143(tmp_path):
    """A SIGTERM while the command runs (here: a --watch waiting for a change) ends it as Ctrl-C does,
    with exit status 143 (128 + 15), the convention; Ctrl-C keeps 130."""
    write(tmp_path, {"train.py": BUGGY})
    process = subprocess.Popen([sys.executable, "-m", "amp_lint", "check", "--no-cache", "--watch", "."], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    try:
        for line in process.stdout:  # the first check is done: the watch is waiting
            if line.startswith("Found 1 error"):
                break
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
