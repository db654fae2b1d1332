"""Whole-project analysis: calls into other modules of the checked tree, through the real CLI.

Each case is a package of several files under `fixtures/project/<case>/` (its origin in a comment there).
A finding whose proof goes through another module is reported at the call in the checked file, names the
other file and line, and has no fix; a run on one file finds what a whole-tree run finds for that file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "project"

# case -> {file: [(code, row)]}: every finding a whole-tree run with --show-assumed reports
EXPECTED = {
    # catalyst #1319: the callback held in `self.callback` clips; the engine scaled the loss
    "clip_in_callback": {"trainer/engine.py": [("AMP030", 18)]},
    # PyTorch Lightning 1.4.8 #9330: the base plugin's clip_gradients, inherited from another module
    "plugin_base_class": {"lightning/plugins/native_amp.py": [("AMP030", 12)]},
    # languini PR #7, FastPitch: a helper module reads the (still scaled) gradient norm before unscale_
    "grad_stats_in_helper": {"trainer/train.py": [("AMP030", 12)]},
    # neosr: the scaler and the step/update live in the base model's module; update() again is AMP023
    "scaler_in_base_module": {"models/sr_model.py": [("AMP023", 11)]},
    # fastai: callbacks drive `self.learn.scaler` in an order this code does not show: unknown, silent
    "fastai_callbacks": {},
}


def _cli(*args, cwd, cache=None):
    command = [sys.executable, "-m", "amp_lint", "check", "--show-assumed", "--output-format", "json"]
    command += ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command + list(args), cwd=cwd, capture_output=True, text=True, env=env)


def _found(result):
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def _by_file(diagnostics):
    out = {}
    for d in diagnostics:
        out.setdefault(d["filename"].replace(os.sep, "/"), []).append((d["code"], d["location"]["row"]))
    return {name: sorted(found) for name, found in out.items()}


def _copy(case, tmp_path):
    target = tmp_path / case
    shutil.copytree(FIXTURES / case, target)
    return target


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_whole_tree_run(case, tmp_path):
    tree = _copy(case, tmp_path)
    assert _by_file(_found(_cli(".", cwd=tree))) == EXPECTED[case]


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_run_on_one_file_finds_what_the_whole_tree_run_finds_there(case, tmp_path):
    # pre-commit passes only the changed files: the project modules they import are still read
    tree = _copy(case, tmp_path)
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.py"))
    whole = _found(_cli(".", cwd=tree))
    for name in files:
        alone = _found(_cli(name, cwd=tree))
        assert [(d["code"], d["location"], d["message"]) for d in alone] == [
            (d["code"], d["location"], d["message"]) for d in whole if d["filename"].replace(os.sep, "/") == name
        ], name


def test_the_finding_names_the_other_file_and_line(tmp_path):
    tree = _copy("clip_in_callback", tmp_path)
    [finding] = _found(_cli("trainer/engine.py", cwd=tree))
    assert finding["filename"] == "trainer/engine.py" and finding["location"]["row"] == 18
    assert "at `trainer/callbacks.py` line 10" in finding["message"]
    assert finding["fix"] is None  # the clip is in another file: nothing here to edit safely
    related = {(r["message"].split("`")[0], r.get("filename"), r["location"]["row"]) for r in finding["related"]}
    assert ("reached through ", None, 18) in related
    assert ("", "trainer/callbacks.py", 10) in related


def test_sarif_related_locations_carry_the_other_file(tmp_path):
    tree = _copy("grad_stats_in_helper", tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--output-format", "sarif", "trainer/train.py"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    [sarif_result] = json.loads(result.stdout)["runs"][0]["results"]
    places = [
        (r["physicalLocation"]["artifactLocation"]["uri"], r["physicalLocation"]["region"]["startLine"])
        for r in sarif_result["relatedLocations"]
    ]
    assert ("trainer/metrics.py", 9) in places and ("trainer/train.py", 12) in places
    assert all("message" in r and "id" in r for r in sarif_result["relatedLocations"])


def test_fixes_never_edit_the_other_file(tmp_path):
    for case in ("clip_in_callback", "plugin_base_class", "scaler_in_base_module"):
        tree = _copy(case, tmp_path)
        before = {p: p.read_bytes() for p in tree.rglob("*.py")}
        result = _cli("--fix", "--unsafe-fixes", ".", cwd=tree)
        assert result.returncode in (0, 1), result.stderr
        assert {p: p.read_bytes() for p in tree.rglob("*.py")} == before, case


def test_without_a_project_the_call_stays_unknown():
    # stdin has no place in a project: the helper is not read, nothing is claimed about it
    source = (FIXTURES / "clip_in_callback" / "trainer" / "engine.py").read_text()
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--show-assumed", "--output-format", "json", "-"],
        input=source,
        cwd=FIXTURES / "clip_in_callback",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert json.loads(result.stdout) == []


def test_a_fixed_call_site_is_clean(tmp_path):
    # the `train_fixed` / `FixedPlugin` halves of the fixtures unscale first: no finding on their lines
    tree = _copy("plugin_base_class", tmp_path)
    rows = [d["location"]["row"] for d in _found(_cli(".", cwd=tree))]
    assert not any(row > 16 for row in rows)


def test_editing_a_helper_module_invalidates_the_importing_files_cached_result(tmp_path):
    tree = _copy("grad_stats_in_helper", tmp_path)
    cache = tmp_path / "cache"
    assert [d["code"] for d in _found(_cli(".", cwd=tree, cache=cache))] == ["AMP030"]
    assert [d["code"] for d in _found(_cli(".", cwd=tree, cache=cache))] == ["AMP030"]  # warm
    metrics = tree / "trainer" / "metrics.py"
    # an unrelated edit elsewhere keeps the result (and it is still right)
    (tree / "trainer" / "unrelated.py").write_text("x = 1\n")
    assert [d["code"] for d in _found(_cli(".", cwd=tree, cache=cache))] == ["AMP030"]
    # the helper no longer reads gradients: the importing file's result must not come from the cache
    time.sleep(0.01)
    metrics.write_text("def grad_norm(model):\n    return 0.0\n")
    assert _found(_cli(".", cwd=tree, cache=cache)) == []


def test_a_cache_entry_is_a_hit_only_while_its_dependencies_keep_their_digests(tmp_path):
    from amp_lint.files.cache import ResultCache, dependency_digest

    cache = ResultCache(tmp_path / "cache", settings_key="s", version="1")
    path, helper = tmp_path / "train.py", tmp_path / "helpers.py"
    helper.write_text("def clip(model):\n    pass\n")
    cache.put(path, b"x", {"diagnostics": []}, [(str(helper), dependency_digest(str(helper)))])
    assert cache.get(path, b"x") == {"diagnostics": []}
    helper.write_text("def clip(model):\n    return 1\n")
    assert ResultCache(tmp_path / "cache", settings_key="s", version="1").get(path, b"x") is None
    helper.unlink()
    assert ResultCache(tmp_path / "cache", settings_key="s", version="1").get(path, b"x") is None
    assert dependency_digest(str(helper)) == ""
    os.mkfifo(tmp_path / "fifo.py")
    assert dependency_digest(str(tmp_path / "fifo.py")) == ""  # stat first: a FIFO is never opened


def test_the_checker_reports_the_project_files_a_result_depends_on():
    from amp_lint import rules as registry
    from amp_lint.analysis.project import ProjectIndex
    from amp_lint.engine.checker import Checker

    path = FIXTURES / "grad_stats_in_helper" / "trainer" / "train.py"
    checker = Checker(frozenset(registry.default_codes()), show_assumed=True, project=ProjectIndex())
    found = checker.check(path.read_text(), "train.py", path=str(path))
    read = {os.path.basename(p) for p, _ in found.dependencies}
    assert "metrics.py" in read and "train.py" not in read
    quiet = checker.check("x = 1\n", "other.py", path=str(path.parent / "other.py"))
    assert quiet.dependencies == ()  # nothing followed, nothing else read


def test_checker_api_with_and_without_a_project_index():
    from amp_lint import rules as registry
    from amp_lint.analysis.project import ProjectIndex
    from amp_lint.engine.checker import Checker

    path = FIXTURES / "grad_stats_in_helper" / "trainer" / "train.py"
    source = path.read_text()
    enabled = frozenset(registry.default_codes())
    alone = Checker(enabled, show_assumed=True).check(source, "train.py", path=str(path))
    assert [d.code for d in alone.diagnostics] == []
    project = Checker(enabled, show_assumed=True, project=ProjectIndex())
    found = project.check(source, "train.py", path=str(path))
    assert [(d.code, d.location.row) for d in found.diagnostics] == [("AMP030", 12)]
    assert any(r.filename and r.filename.endswith("metrics.py") for r in found.diagnostics[0].related)
    # the hooks are only in place while the file is checked
    from amp_lint.analysis import scaler_flow

    assert scaler_flow.SUMMARIES == [] and scaler_flow.FOLLOWED_CALLS == []


def test_a_module_that_imports_itself_in_a_cycle_is_no_trouble(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "import torch\nfrom pkg import b\n\ndef helper(model):\n    b.helper(model)\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    )
    (pkg / "b.py").write_text("from pkg import a\n\ndef helper(model):\n    a.helper(model)\n")
    (pkg / "train.py").write_text(
        "import torch\nfrom pkg import a\nscaler = torch.amp.GradScaler('cuda')\n"
        "for x in loader:\n    scaler.scale(model(x).sum()).backward()\n    a.helper(model)\n"
        "    scaler.step(opt)\n    scaler.update()\n"
    )
    found = _found(_cli(".", cwd=tmp_path))
    assert [(d["filename"], d["code"], d["location"]["row"]) for d in found] == [("pkg/train.py", "AMP030", 6)]
