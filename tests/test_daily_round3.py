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
    assert result.stdout.startswith("::error file=pkg_a/src/x.py,line=7,"), result.stdout
    assert "::src/x.py:7:9: AMP001" in result.stdout  # the message keeps the path the user gave
    # GitHub's workspace wins where it holds the file (a checkout whose .git is elsewhere).
    env = {"GITHUB_WORKSPACE": str(tmp_path / "pkg_a")}
    scoped = amp_lint("--no-cache", "--output-format", "github", ".", cwd=tmp_path / "pkg_a", env=env)
    assert scoped.stdout.startswith("::error file=src/x.py,"), scoped.stdout
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
    write(tmp_path, {"bad.py": "import torch\ndef f(:\n", "train.py": BUGGY})
    result = amp_lint("--no-cache", "--output-format", output_format, ".", cwd=tmp_path)
    assert result.returncode == 2  # a file could not be checked
    records = json.loads(result.stdout) if output_format == "json" else [json.loads(line) for line in result.stdout.splitlines()]
    syntax = [r for r in records if r["code"] == "invalid-syntax"]
    assert len(syntax) == 1 and syntax[0]["filename"] == "bad.py" and syntax[0]["location"]["row"] == 2
    assert syntax[0]["fix"] is None and syntax[0]["severity"] == "error" and syntax[0]["url"] is None
    assert set(syntax[0]) == set(next(r for r in records if r["code"] == "AMP001"))  # the same fields
    if RUFF:  # Ruff 0.17.6: {"code": "invalid-syntax", "filename": "/…/bad.py", "fix": null, "url": null, ...}
        theirs = json.loads(ruff("check", "--no-cache", "--isolated", "--output-format", "json", "bad.py", cwd=tmp_path).stdout)
        assert theirs and all(r["code"] == "invalid-syntax" and r["fix"] is None for r in theirs)


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
