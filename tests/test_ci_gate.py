"""amp-lint as a gate in CI and pre-commit, run for real (`python -m amp_lint`) in temporary folders.

Baselines, `--add-noqa`, the machine formats, configuration discovery, file discovery the way
pre-commit drives it, standard input, notebooks, the GitHub Action's metadata, and pre-commit itself.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
ANSI = "\x1b["

# One finding: AMP001 (backward inside autocast) on line 10, in `train`.
TRAINING = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")


    def train(model, loader, optimizer, loss_fn):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    """
)
FINDING_LINE = "            scaler.scale(loss).backward()\n"
FIXED_TRAINING = TRAINING.replace(FINDING_LINE, FINDING_LINE[4:])
BROKEN = 'import torch\n\nscaler = torch.amp.GradScaler("cuda")\ndef step(:\n'  # a syntax error the prefilter lets through
SECOND_LOOP = textwrap.dedent(
    """\
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    """
)


def amp_lint(*args: str, cwd: Path, stdin: Optional[str] = None, env: Optional[Dict[str, str]] = None):
    """The real command, with the caller's colour and format variables removed unless given."""
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "AMP_LINT_OUTPUT_FORMAT", "AMP_LINT_CACHE_DIR")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "amp_lint", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# --- baselines ---------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text(TRAINING)
    (tmp_path / "pkg" / "loop.py").write_text(TRAINING)
    return tmp_path


def test_write_baseline_is_versioned_sorted_and_stable(project):
    result = amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "Wrote 2 findings to baseline.json" in result.stderr
    first = (project / "baseline.json").read_bytes()
    document = json.loads(first)
    assert document["version"] == 1
    assert document["findings"] == [
        {"filename": name, "code": "AMP001", "context": "train", "source": "scaler.scale(loss).backward()", "count": 1}
        for name in ("pkg/loop.py", "train.py")
    ]
    assert amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project).returncode == 0
    assert (project / "baseline.json").read_bytes() == first, "rewriting an unchanged baseline changes nothing"
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")], "no temporary file left behind"


def test_baselined_finding_survives_a_line_shift(project):
    assert amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project).returncode == 0
    assert amp_lint("--no-cache", cwd=project).returncode == 1
    shifted = '"""Training."""\n\nimport os\n\n' + TRAINING.replace(FINDING_LINE, FINDING_LINE.rstrip("\n") + "  # noqa: E501\n")
    (project / "train.py").write_text(shifted)
    result = amp_lint("--no-cache", "--baseline", "baseline.json", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All checks passed" in result.stdout


def test_baseline_through_the_cache_keeps_the_fingerprint(project):
    """Cached findings must carry the context and source line a baseline matches on."""
    cache = ["--cache-dir", str(project / "cache")]
    assert amp_lint(*cache, "--write-baseline", "baseline.json", cwd=project).returncode == 0
    assert (project / "cache").is_dir()
    result = amp_lint(*cache, "--baseline", "baseline.json", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    (project / "train.py").write_text("\n\n" + TRAINING)
    assert amp_lint(*cache, "--baseline", "baseline.json", cwd=project).returncode == 0


def test_a_second_identical_finding_in_the_same_function_is_new(project):
    assert amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project).returncode == 0
    (project / "train.py").write_text(TRAINING + SECOND_LOOP)
    result = amp_lint("--no-cache", "--output-format", "json", "--baseline", "baseline.json", cwd=project)
    assert result.returncode == 1
    [finding] = json.loads(result.stdout)
    assert (finding["filename"], finding["code"], finding["location"]["row"]) == ("train.py", "AMP001", 16)


def test_a_finding_in_a_new_function_fails(project):
    assert amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project).returncode == 0
    (project / "train.py").write_text(TRAINING + "\n\n" + TRAINING.split("\n\n\n", 1)[1].replace("def train", "def finetune"))
    result = amp_lint("--no-cache", "--output-format", "concise", "--baseline", "baseline.json", cwd=project)
    assert result.returncode == 1
    assert "train.py:19:13: AMP001" in result.stdout
    assert "Found 1 error" in result.stdout


def test_baseline_keeps_file_errors(project):
    assert amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project).returncode == 0
    (project / "broken.py").write_text(BROKEN)
    result = amp_lint("--no-cache", "--baseline", "baseline.json", cwd=project)
    assert result.returncode == 2
    assert "broken.py" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "not found"),
        ("{not json", "invalid JSON"),
        ('{"version": 2, "findings": []}', "unsupported baseline version 2"),
        ('{"version": 1, "findings": [{"code": "AMP001"}]}', "findings[0]"),
        ("[]", "not a valid amp-lint baseline"),
    ],
)
def test_unusable_baseline_is_exit_2_and_one_line(project, content, words):
    if content is not None:
        (project / "baseline.json").write_text(content)
    result = amp_lint("--no-cache", "--baseline", "baseline.json", cwd=project)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "baseline.json" in line and words in line
    assert result.stdout == ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("option", ["--baseline", "--write-baseline"])
def test_a_fifo_given_as_the_baseline_is_refused_not_waited_on(project, option):
    os.mkfifo(project / "baseline.json")  # nobody ever writes to it: reading it would block forever
    result = amp_lint("--no-cache", option, "baseline.json", cwd=project)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "baseline.json" in line and "not a regular file" in line


def test_unwritable_baseline_path_is_exit_2_and_one_line(project):
    result = amp_lint("--no-cache", "--write-baseline", "missing/baseline.json", cwd=project)
    assert result.returncode == 2
    assert "missing/baseline.json" in one_line(result.stderr)


def test_baseline_applies_to_standard_input(project):
    assert amp_lint("--no-cache", "--write-baseline", "baseline.json", cwd=project).returncode == 0
    result = amp_lint("--no-cache", "--baseline", "baseline.json", "-", "--stdin-filename", "train.py", cwd=project, stdin=TRAINING)
    assert result.returncode == 0, result.stdout


# --- --add-noqa --------------------------------------------------------------------------------


def test_add_noqa_suppresses_everything_keeps_crlf_merges_and_is_idempotent(tmp_path):
    (tmp_path / "train.py").write_text(TRAINING)
    crlf = TRAINING.replace("\n", "\r\n").encode()
    (tmp_path / "crlf.py").write_bytes(crlf)
    (tmp_path / "merged.py").write_text(TRAINING.replace(FINDING_LINE, FINDING_LINE.rstrip("\n") + "  # noqa: E501 - long\n"))
    (tmp_path / "commented.py").write_text(TRAINING.replace(FINDING_LINE, FINDING_LINE.rstrip("\n") + "  # the loss\n"))

    result = amp_lint("--no-cache", "--add-noqa", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Added 4 noqa directives." in result.stdout

    assert (tmp_path / "train.py").read_text() == TRAINING.replace(FINDING_LINE, FINDING_LINE.rstrip("\n") + "  # noqa: AMP001\n")
    assert (tmp_path / "crlf.py").read_bytes() == crlf.replace(b"backward()\r\n", b"backward()  # noqa: AMP001\r\n")
    assert "backward()  # noqa: E501, AMP001 - long\n" in (tmp_path / "merged.py").read_text()
    assert "backward()  # the loss  # noqa: AMP001\n" in (tmp_path / "commented.py").read_text()

    after = amp_lint("--no-cache", cwd=tmp_path)
    assert after.returncode == 0, after.stdout
    assert "All checks passed" in after.stdout

    snapshot = {path.name: path.read_bytes() for path in tmp_path.glob("*.py")}
    again = amp_lint("--no-cache", "--add-noqa", cwd=tmp_path)
    assert again.returncode == 0
    assert "Added 0 noqa directives." in again.stdout
    assert {path.name: path.read_bytes() for path in tmp_path.glob("*.py")} == snapshot


def test_add_noqa_puts_several_codes_on_one_line_once(tmp_path):
    source = "import torch\n\nwith torch.cuda.amp.autocast(): pass  # noqa: AMP070\nwith torch.cuda.amp.autocast(): pass\n"
    (tmp_path / "old.py").write_text(source)
    assert amp_lint("--no-cache", "--select", "AMP070", "--add-noqa", cwd=tmp_path).returncode == 0
    text = (tmp_path / "old.py").read_text()
    assert text.count("noqa") == 2 and text.count("AMP070") == 2, text
    assert amp_lint("--no-cache", "--select", "AMP070", cwd=tmp_path).returncode == 0


def test_add_noqa_never_edits_a_multiline_string(tmp_path):
    source = textwrap.dedent(
        '''\
        import torch
        x = torch.cuda.amp.autocast(dtype="""
        """)
        y = torch.cuda.amp.autocast()
        '''
    )
    (tmp_path / "strings.py").write_text(source)
    result = amp_lint("--no-cache", "--select", "AMP070", "--add-noqa", cwd=tmp_path)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith("strings.py: error: AMP070 at line 2 not suppressed") and "multi-line string" in line
    assert (tmp_path / "strings.py").read_text() == source.replace("autocast()\n", "autocast()  # noqa: AMP070\n")


def test_noqa_works_after_a_form_feed(tmp_path):
    (tmp_path / "train.py").write_text("\f\n" + TRAINING)
    assert amp_lint("--no-cache", "--add-noqa", cwd=tmp_path).returncode == 0
    assert amp_lint("--no-cache", cwd=tmp_path).returncode == 0


# --- machine formats and output ----------------------------------------------------------------


def test_sarif_from_the_cli_is_valid_sarif_2_1_0(project):
    jsonschema = pytest.importorskip("jsonschema")
    (project / "broken.py").write_text(BROKEN)
    result = amp_lint("--no-cache", "--output-format", "sarif", cwd=project)
    assert result.returncode == 2  # the broken file
    log = json.loads(result.stdout)
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(log)  # the schema has no remote $ref
    [run] = log["runs"]
    assert {r["ruleId"] for r in run["results"]} == {"AMP001"}
    assert len(run["results"]) == 2
    assert "broken.py" in result.stderr


def test_output_file_gets_the_report_and_stdout_stays_empty(project):
    result = amp_lint("--no-cache", "--output-format", "json", "--output-file", "report.json", "--color", "always", cwd=project)
    assert result.returncode == 1
    assert result.stdout == ""
    text = (project / "report.json").read_text()
    assert ANSI not in text
    assert [d["filename"] for d in json.loads(text)] == ["pkg/loop.py", "train.py"]


def test_output_format_from_the_environment(project):
    result = amp_lint("--no-cache", cwd=project, env={"AMP_LINT_OUTPUT_FORMAT": "json"})
    assert result.returncode == 1
    assert len(json.loads(result.stdout)) == 2
    flag_wins = amp_lint("--no-cache", "--output-format", "concise", cwd=project, env={"AMP_LINT_OUTPUT_FORMAT": "json"})
    assert flag_wins.stdout.startswith("pkg/loop.py:10:13: AMP001")


def test_no_ansi_unless_asked(project):
    assert ANSI not in amp_lint("--no-cache", cwd=project).stdout  # not a terminal
    assert ANSI not in amp_lint("--no-cache", cwd=project, env={"NO_COLOR": "1"}).stdout
    assert ANSI not in amp_lint("--no-cache", "--color", "never", cwd=project).stdout


def test_color_always_means_ansi_even_through_a_pipe(project):
    assert ANSI in amp_lint("--no-cache", "--color", "always", cwd=project).stdout


# --- configuration discovery -------------------------------------------------------------------


def test_closest_configuration_wins(project):
    (project / "pyproject.toml").write_text('[tool.amp-lint]\nignore = ["AMP001"]\n')
    assert amp_lint("--no-cache", cwd=project).returncode == 0
    (project / "pkg" / "amp-lint.toml").write_text('select = ["AMP0"]\n')
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert result.returncode == 1
    assert "pkg/loop.py:10:13: AMP001" in result.stdout
    assert "\ntrain.py" not in "\n" + result.stdout


def test_per_file_ignores(project):
    (project / "pyproject.toml").write_text('[tool.amp-lint.per-file-ignores]\n"pkg/*" = ["AMP001"]\n')
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert result.returncode == 1
    assert result.stdout.startswith("train.py:10:13: AMP001")
    assert "pkg/loop.py" not in result.stdout


def test_unknown_configuration_key_names_file_and_key(project):
    (project / "pkg" / "amp-lint.toml").write_text('select = ["AMP0"]\nbogus-key = 1\n')
    result = amp_lint("--no-cache", cwd=project)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert str(Path("pkg") / "amp-lint.toml") in line and "bogus-key" in line


# --- which files: .gitignore, excludes, pre-commit's explicit files ----------------------------


def test_gitignore_is_respected_in_a_git_work_tree(project):
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / ".gitignore").write_text("pkg/\n")
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert result.returncode == 1
    assert "pkg/loop.py" not in result.stdout and "train.py:10:13" in result.stdout
    everything = amp_lint("--no-cache", "--output-format", "concise", "--no-respect-gitignore", cwd=project)
    assert "pkg/loop.py:10:13" in everything.stdout and "train.py:10:13" in everything.stdout


def test_force_exclude_applies_excludes_to_files_named_like_pre_commit_does(project):
    (project / "pyproject.toml").write_text('[tool.amp-lint]\nextend-exclude = ["pkg"]\n')
    assert "pkg/loop.py" not in amp_lint("--no-cache", cwd=project).stdout
    assert amp_lint("--no-cache", "pkg/loop.py", cwd=project).returncode == 1  # named: checked
    result = amp_lint("--no-cache", "--force-exclude", "pkg/loop.py", "train.py", cwd=project)
    assert result.returncode == 1
    assert "pkg/loop.py" not in result.stdout and "train.py" in result.stdout
    assert amp_lint("--no-cache", "--force-exclude", "pkg/loop.py", cwd=project).returncode == 0


# --- standard input ----------------------------------------------------------------------------


def test_stdin_with_stdin_filename(project):
    (project / "pyproject.toml").write_text('[tool.amp-lint.per-file-ignores]\n"pkg/*" = ["AMP001"]\n')
    result = amp_lint("--no-cache", "--output-format", "concise", "-", "--stdin-filename", "other.py", cwd=project, stdin=TRAINING)
    assert result.returncode == 1
    assert result.stdout.startswith("other.py:10:13: AMP001")
    ignored = amp_lint("--no-cache", "-", "--stdin-filename", "pkg/new.py", cwd=project, stdin=TRAINING)
    assert ignored.returncode == 0, "the settings of the named file apply"
    fixed = amp_lint("--no-cache", "--fix", "-", "--stdin-filename", "other.py", cwd=project, stdin=TRAINING)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout == FIXED_TRAINING


# --- notebooks ---------------------------------------------------------------------------------


def notebook_document() -> dict:
    """A training loop in two code cells: setup (with a magic and an output), then the loop."""
    setup = ["import torch\n", "%matplotlib inline\n", 'scaler = torch.amp.GradScaler("cuda")\n', "model, optimizer = build()"]
    loop = [
        "for x, y in loader:\n",
        '    with torch.autocast("cuda"):\n',
        "        loss = loss_fn(model(x), y)\n",
        "        scaler.scale(loss).backward()\n",
        "    scaler.step(optimizer)\n",
        "    scaler.update()",
    ]
    return {
        "cells": [
            {"cell_type": "markdown", "id": "a1", "metadata": {}, "source": ["# Training with AMP\n", "Épreuve."]},
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "b2",
                "metadata": {"tags": ["setup"]},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["cuda: True\n"]}],
                "source": setup,
            },
            {"cell_type": "markdown", "id": "c3", "metadata": {}, "source": "The loop:"},
            {
                "cell_type": "code",
                "execution_count": 2,
                "id": "d4",
                "metadata": {"scrolled": True},
                "outputs": [
                    {
                        "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure size 640x480 with 1 Axes>"]},
                        "metadata": {},
                        "output_type": "display_data",
                    }
                ],
                "source": loop,
            },
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def nbformat_text(document: dict) -> str:
    """As Jupyter writes it: indent 1, sorted keys, UTF-8, final newline."""
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.fixture
def notebook(tmp_path: Path) -> Path:
    path = tmp_path / "train.ipynb"
    path.write_text(nbformat_text(notebook_document()), encoding="utf-8")
    return path


def test_notebook_findings_name_the_cell(notebook):
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=notebook.parent)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("train.ipynb:cell 4:4:9: AMP001")
    [finding] = json.loads(amp_lint("--no-cache", "--output-format", "json", cwd=notebook.parent).stdout)
    assert (finding["cell"], finding["location"]) == (4, {"row": 4, "column": 9})


def test_notebook_fix_round_trip_keeps_outputs_metadata_magic_and_formatting(notebook):
    result = amp_lint("--no-cache", "--fix", cwd=notebook.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = notebook_document()
    expected["cells"][3]["source"][3] = "    scaler.scale(loss).backward()\n"
    assert notebook.read_text(encoding="utf-8") == nbformat_text(expected)
    assert amp_lint("--no-cache", cwd=notebook.parent).returncode == 0


def test_add_noqa_in_a_notebook(notebook):
    result = amp_lint("--no-cache", "--add-noqa", cwd=notebook.parent)
    assert result.returncode == 0, result.stderr
    assert "Added 1 noqa directive." in result.stdout
    expected = notebook_document()
    expected["cells"][3]["source"][3] = "        scaler.scale(loss).backward()  # noqa: AMP001\n"
    assert notebook.read_text(encoding="utf-8") == nbformat_text(expected)
    assert amp_lint("--no-cache", cwd=notebook.parent).returncode == 0


# --- the GitHub Action -------------------------------------------------------------------------


def test_action_metadata():
    yaml = pytest.importorskip("yaml")
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["name"] == "amp-lint" and action["description"]
    assert set(action["branding"]) == {"icon", "color"}
    inputs = action["inputs"]
    assert inputs["args"]["default"] == "."
    assert inputs["output-format"]["default"] == "github"
    assert inputs["version"]["default"] == ""  # empty: install the action's own checkout
    runs = action["runs"]
    assert runs["using"] == "composite"
    assert all(step.get("shell") == "bash" for step in runs["steps"])
    scripts = "\n".join(step["run"] for step in runs["steps"])
    # amp-lint is on no package index: `version` is a git ref of the action's own repository (issue 28, item 19).
    assert "github.action_path" in json.dumps(runs) and "amp-lint==" not in scripts
    assert "git+https://github.com/$AMP_LINT_ACTION_REPOSITORY@$AMP_LINT_VERSION" in scripts
    assert "amp-lint --output-format" in scripts and "inputs.args" in scripts


# --- pre-commit, end to end and offline --------------------------------------------------------

_PACKAGE_FILES = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "amp_lint")


def _git(*args: str, cwd: Path, env: Dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _hermetic_git_env(home: Path) -> Dict[str, str]:
    return {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "amp-lint tests",
        "GIT_AUTHOR_EMAIL": "tests@example.invalid",
        "GIT_COMMITTER_NAME": "amp-lint tests",
        "GIT_COMMITTER_EMAIL": "tests@example.invalid",
        "HOME": str(home),
    }


def _runtime_requirements() -> List[str]:
    """The distributions the hook's environment needs: the package's dependencies, theirs, and the build backend."""
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        import tomli as tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    pending = list(project["project"]["dependencies"]) + list(project["build-system"]["requires"])
    seen: Dict[str, None] = {}
    while pending:
        requirement = Requirement(pending.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = requirement.name.lower()
        if name not in seen:
            seen[name] = None
            pending.extend(importlib.metadata.requires(name) or [])
    return list(seen)


def _wheel_from_installed(name: str, wheelhouse: Path) -> None:
    """Pack an installed distribution back into a wheel (no index, no build: its files are right here)."""
    dist = importlib.metadata.distribution(name)
    tag = next(line.split(":", 1)[1].strip() for line in dist.read_text("WHEEL").splitlines() if line.startswith("Tag:"))
    project = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    files = [f for f in dist.files or () if ".." not in f.parts and "__pycache__" not in f.parts]
    info_dir = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    skipped = {f"{info_dir}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    record = []
    with zipfile.ZipFile(wheelhouse / f"{project}-{dist.version}-{tag}.whl", "w") as wheel:
        for file in files:
            arcname = file.as_posix()
            if arcname in skipped or not Path(file.locate()).is_file():
                continue
            data = Path(file.locate()).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            wheel.writestr(arcname, data)
            record.append(f"{arcname},sha256={digest},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        wheel.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")


@pytest.fixture(scope="session")
def pre_commit_setup(tmp_path_factory):
    """A committed copy of the working tree to try, a wheelhouse, and the environment to run pre-commit in."""
    pytest.importorskip("pre_commit", reason="pre-commit is not installed (pip install -e '.[test]')")
    pytest.importorskip("packaging")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("pre-commit")
    env = _hermetic_git_env(root)
    wheelhouse = root / "wheelhouse"
    wheelhouse.mkdir()
    for name in _runtime_requirements():
        _wheel_from_installed(name, wheelhouse)
    hooks_repo = root / "amp-lint"
    hooks_repo.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in _PACKAGE_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, hooks_repo / name, ignore=ignore)
        else:
            shutil.copy2(source, hooks_repo / name)
    _git("init", "-q", cwd=hooks_repo, env=env)
    _git("add", ".", cwd=hooks_repo, env=env)
    _git("commit", "-q", "-m", "amp-lint", cwd=hooks_repo, env=env)
    env.update(
        {
            "PRE_COMMIT_HOME": str(root / "cache"),
            "PIP_CONFIG_FILE": os.devnull,  # no index, constraints or find-links from the machine
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheelhouse),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_COMPILE": "1",  # byte-compiling libcst and setuptools is most of the install time
            "VIRTUALENV_NO_PERIODIC_UPDATE": "1",
        }
    )
    return hooks_repo, env


def test_pre_commit_hooks_end_to_end(pre_commit_setup, tmp_path):
    hooks_repo, env = pre_commit_setup
    _git("init", "-q", cwd=tmp_path, env=env)
    (tmp_path / "train.py").write_text(TRAINING)
    (tmp_path / "notes.txt").write_text("not python\n")
    _git("add", ".", cwd=tmp_path, env=env)
    _git("commit", "-q", "-m", "buggy training", cwd=tmp_path, env=env)

    def try_repo(hook: str) -> subprocess.CompletedProcess:
        # Each try-repo builds the hook's environment afresh (in its own temporary store).
        command = [sys.executable, "-m", "pre_commit", "try-repo", str(hooks_repo), hook, "--all-files", "--color", "never"]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    check = try_repo("amp-lint")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Failed" in check.stdout and "train.py:10:13: AMP001" in check.stdout
    assert (tmp_path / "train.py").read_text() == TRAINING

    fix = try_repo("amp-lint-fix")
    assert fix.returncode == 1, fix.stdout + fix.stderr  # files were modified: the commit must be redone
    assert "files were modified by this hook" in fix.stdout
    assert (tmp_path / "train.py").read_text() == FIXED_TRAINING
    assert amp_lint("--no-cache", "train.py", cwd=tmp_path).returncode == 0


def test_readme_pre_commit_configuration_works_as_written(pre_commit_setup, tmp_path):
    """The README's `.pre-commit-config.yaml`, with its placeholders filled in: a path and a commit hash."""
    hooks_repo, env = pre_commit_setup
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## pre-commit") :]
    block = section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n", section.index("```yaml"))]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hooks_repo, env=env, capture_output=True, text=True).stdout.strip()
    placeholder = re.search(r"rev: ([0-9a-f]{40})", block).group(1)
    config = block.replace("/path/to/amp-lint", str(hooks_repo)).replace(placeholder, commit)
    _git("init", "-q", cwd=tmp_path, env=env)
    (tmp_path / ".pre-commit-config.yaml").write_text(config)
    (tmp_path / "train.py").write_text(TRAINING)
    _git("add", ".", cwd=tmp_path, env=env)
    command = [sys.executable, "-m", "pre_commit", "run", "amp-lint", "--all-files", "--color", "never"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "train.py:10:13: AMP001" in result.stdout
