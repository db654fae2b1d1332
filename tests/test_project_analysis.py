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
    # animl #298 across modules: `train_one_epoch` builds its scaler, `main.py`'s epoch loop calls it
    "scaler_per_epoch": {"trainer/engine.py": [("AMP013", 9)]},
    # the method shape: `self.runner.fit_epoch()` once per epoch, `EpochRunner` of another module
    "scaler_per_epoch_method": {"fitter/epoch.py": [("AMP013", 13)]},
    # per-epoch calls whose evidence is not conclusive (each case in a comment of jobs/helpers.py)
    "scaler_per_epoch_silent": {},
    # nerfstudio (an injected bug): `self.optimizers = self.setup_optimizers()` (annotated `-> Optimizers`),
    # whose step loop over parameter groups clips without `unscale_`; the loop steps each group's optimizer
    # once, so the call is one part of the caller's iteration (issue 26, principles 2 to 4)
    "optimizer_groups_helper": {"trainer/engine.py": [("AMP030", 22)]},
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
    # The clip is in another file; the fix edits this one: `unscale_` before the call that reaches the clip
    # (catalyst's own fix), never the callback's module.
    [edit] = finding["fix"]["edits"]
    assert edit["content"].strip() == "self.scaler.unscale_(self.optimizer)" and edit["location"]["row"] == 18
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


def test_fixes_edit_the_call_site_never_the_module_of_the_clip(tmp_path):
    """A clip reached through a call into another module gets `unscale_` before that call, in the file that
    scales (issue 27: timm's dropped `unscale_`; Lightning's #9330 fix is the `FixedPlugin` of the fixture);
    the module that holds the clip, and every other file, are left as they are."""
    fixed = {"clip_in_callback": ("trainer/engine.py", "self.callback.on_after_backward(self.model)", "self.scaler.unscale_(self.optimizer)"),
             "plugin_base_class": ("lightning/plugins/native_amp.py", "self.clip_gradients(model, 1.0)", "self.scaler.unscale_(optimizer)")}  # fmt: skip
    # optimizer_groups_helper: the optimizer the unscale_ would need is a name of the callee's loop, unbound at
    # the call: no fix (and the fix check refuses any fix that reads a name nothing binds).
    for case in ("clip_in_callback", "plugin_base_class", "scaler_in_base_module", "scaler_per_epoch", "scaler_per_epoch_method", "optimizer_groups_helper"):
        tree = _copy(case, tmp_path)
        before = {p: p.read_bytes() for p in tree.rglob("*.py")}
        result = _cli("--fix", "--unsafe-fixes", ".", cwd=tree)
        assert result.returncode in (0, 1), result.stderr
        after = {p: p.read_bytes() for p in tree.rglob("*.py")}
        changed = {p for p in before if after[p] != before[p]}
        if case not in fixed:
            assert not changed, case
            continue
        name, call, unscale = fixed[case]
        assert changed == {tree / name}, case
        lines = [line.strip() for line in after[tree / name].decode().splitlines()]
        first = lines.index(call)  # the first of the file's calls: the unfixed one
        assert lines[first - 1] == unscale and lines.count(unscale) == before[tree / name].decode().count(unscale) + 1, case


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


def test_a_cached_per_epoch_finding_follows_its_callers_edits_and_new_callers(tmp_path):
    """The AMP013 finding in engine.py rests on main.py's epoch loop: the cached result of engine.py must
    change when that loop goes, and again when a new module becomes a caller (a file the cache never saw)."""
    tree = _copy("scaler_per_epoch", tmp_path)
    cache = tmp_path / "cache"

    def engine_findings():
        return [d["code"] for d in _found(_cli("trainer/engine.py", cwd=tree, cache=cache))]

    assert engine_findings() == ["AMP013"]
    assert engine_findings() == ["AMP013"]  # warm
    main = tree / "trainer" / "main.py"
    original = main.read_text()
    main.write_text(original.replace("    for epoch in range(epochs):\n        train_one_epoch(", "    train_one_epoch("))
    assert engine_findings() == []
    (tree / "trainer" / "cli.py").write_text(
        "from trainer.engine import train_one_epoch\n\n\ndef run(model, loader, optimizer):\n"
        "    for epoch in range(10):\n        train_one_epoch(model, loader, optimizer)\n"
    )
    assert engine_findings() == ["AMP013"]


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
    from amp_lint.analysis import project_hooks

    assert project_hooks.SUMMARIES == [] and project_hooks.FOLLOWED_CALLS == []


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


def test_a_run_on_a_few_files_finds_what_the_whole_tree_run_finds_for_them(tmp_path):
    # pre-commit passes several changed files at once: every other file of each package, in one run
    for case in sorted(EXPECTED):
        tree = _copy(case, tmp_path)
        files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.py"))
        few = files[::2]
        whole = _found(_cli(".", cwd=tree))
        some = _found(_cli(*few, cwd=tree))
        assert [(d["filename"], d["code"], d["location"], d["message"], d["related"]) for d in some] == [
            (d["filename"], d["code"], d["location"], d["message"], d["related"])
            for d in whole
            if d["filename"].replace(os.sep, "/") in few
        ], case


# --- AMP013: a scaler built in a function another module's epoch loop calls (animl #298) ---


def test_the_per_epoch_scaler_is_reported_at_the_construction_and_names_the_epoch_loop(tmp_path):
    tree = _copy("scaler_per_epoch", tmp_path)
    # a pre-commit run on the file that holds the bug (it never names the caller) finds it
    [finding] = _found(_cli("trainer/engine.py", cwd=tree))
    assert (finding["code"], finding["filename"], finding["location"]["row"]) == ("AMP013", "trainer/engine.py", 9)
    assert "every call of `train_one_epoch()`" in finding["message"]
    assert "called once per epoch at `trainer/main.py` line 8" in finding["message"]
    assert [(r["filename"], r["location"]["row"]) for r in finding["related"]] == [("trainer/main.py", 8)]
    assert finding["fix"] is None  # building it once means editing the caller too
    # Issue 26, principle 2: epochs are iterations too; reported by default, as a warning.
    assert (finding["confidence"], finding["severity"]) == ("high", "warning")
    assert _found(_cli("trainer/main.py", cwd=tree)) == []  # the caller's file holds no finding


def test_the_per_epoch_scaler_of_a_method_names_the_calling_method(tmp_path):
    tree = _copy("scaler_per_epoch_method", tmp_path)
    [finding] = _found(_cli("fitter/epoch.py", cwd=tree))
    assert "every call of `fit_epoch()`" in finding["message"]
    assert [(r["filename"], r["location"]["row"]) for r in finding["related"]] == [("fitter/fit.py", 12)]


def _check_tree(tree):
    """Every finding of an in-process run over the tree, file by file (cheaper than the CLI)."""
    from amp_lint import rules as registry
    from amp_lint.analysis.project import ProjectIndex
    from amp_lint.engine.checker import Checker

    found = []
    for path in sorted(tree.rglob("*.py")):
        checker = Checker(frozenset(registry.default_codes()), show_assumed=True, project=ProjectIndex())
        result = checker.check(path.read_text(), path.name, path=str(path))
        found += [(path.name, d.code, d.context) for d in result.diagnostics]
    return found


# Each silent case of fixtures/project/scaler_per_epoch_silent, and the edit that completes the evidence:
# then the finding is there (so the case is silent for its own reason, not by accident).
_SILENT = {
    "train_returning": ("helpers.py", "        scaler.update()\n    return scaler\n", "        scaler.update()\n"),
    "train_global": ("helpers.py", "    global SCALER\n", ""),
    "train_stored": ("helpers.py", '    state["scaler"] = scaler\n', ""),
    "train_lazy": (
        "helpers.py",
        '    if scaler is None:\n        scaler = torch.amp.GradScaler("cuda")\n',
        '    scaler = torch.amp.GradScaler("cuda")\n',
    ),
    "train_resumed": ("helpers.py", '    scaler.load_state_dict(checkpoint["scaler"])\n', ""),
    "train_once": (
        "runner.py",
        "    train_once(model, loader, optimizer)\n",
        "    for epoch in range(epochs):\n        train_once(model, loader, optimizer)\n",
    ),
    "train_single_epoch_loop": ("runner.py", "range(1)", "range(2)"),
    "train_first_epoch": ("runner.py", "        if epoch == 0:\n", "        if use_amp:\n"),
    "train_then_break": ("runner.py", "        break\n", ""),
    "train_rebound": ("helpers.py", "    scaler = shared\n", ""),
    "train_shadowed": ("shadow.py", "def train_shadowed(model, loader, optimizer):\n    pass\n", "from jobs.helpers import train_shadowed\n"),
    "train_with_restart": (
        "helpers.py",
        "\n\ndef diverged(model):",
        "\n\ndef restart_all(model, loader, optimizer, epochs):\n    for epoch in range(epochs):\n"
        "        train_with_restart(model, loader, optimizer, epochs)\n\n\ndef diverged(model):",
    ),
    # Built on every call into the attribute, the scale restarts every epoch (issue 46, principle 2).
    "Runner.fit_epoch": (
        "helpers.py",
        '        if self.scaler is None:\n            self.scaler = torch.amp.GradScaler("cuda")',
        '        self.scaler = torch.amp.GradScaler("cuda")',
    ),
}


def test_the_silent_per_epoch_cases_are_silent(tmp_path):
    assert _check_tree(_copy("scaler_per_epoch_silent", tmp_path)) == []


@pytest.mark.parametrize("function", sorted(_SILENT))
def test_each_silent_per_epoch_case_is_found_once_its_evidence_is_complete(function, tmp_path):
    tree = _copy("scaler_per_epoch_silent", tmp_path)
    name, old, new = _SILENT[function]
    path = tree / "jobs" / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    assert _check_tree(tree) == [("helpers.py", "AMP013", function)]


def test_caller_dependencies_list_the_modules_that_call_the_per_epoch_function():
    # what a result cache must add to `engine.py`'s key: an epoch loop added or removed in `main.py`
    # changes `engine.py`'s finding (the modules it imports are not enough)
    import hashlib

    from amp_lint.analysis.callers import caller_dependencies

    tree = FIXTURES / "scaler_per_epoch" / "trainer"
    main = tree / "main.py"
    assert caller_dependencies(tree / "engine.py") == [(str(main), hashlib.sha256(main.read_bytes()).hexdigest())]
    assert caller_dependencies(main) == []  # builds its scaler outside any function with a loop
    assert caller_dependencies(FIXTURES / "clip_in_callback" / "trainer" / "callbacks.py") == []


def test_caller_dependencies_change_with_the_callers(tmp_path):
    # a warm run must not keep `engine.py`'s finding once `main.py` no longer loops over epochs, nor miss
    # a new caller: the list changes with an edit of a caller and with a new file naming the function
    from amp_lint.analysis.callers import caller_dependencies

    tree = _copy("scaler_per_epoch", tmp_path) / "trainer"
    engine = tree / "engine.py"
    before = caller_dependencies(engine)
    main = tree / "main.py"
    main.write_text(main.read_text().replace("    for epoch in range(epochs):\n        train_one_epoch(", "    train_one_epoch("))
    edited = caller_dependencies(engine)
    assert [p for p, _ in edited] == [p for p, _ in before] and edited != before
    (tree / "unrelated.py").write_text("x = 1\n")
    assert caller_dependencies(engine) == edited
    (tree / "cli.py").write_text("from trainer.engine import train_one_epoch\n")
    assert [os.path.basename(p) for p, _ in caller_dependencies(engine)] == ["cli.py", "main.py"]


def test_no_caller_search_without_a_project():
    # stdin, or the API without an index: only the file's own epoch loops count
    source = (FIXTURES / "scaler_per_epoch" / "trainer" / "engine.py").read_text()
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--show-assumed", "--output-format", "json", "-"],
        input=source,
        cwd=FIXTURES / "scaler_per_epoch",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert json.loads(result.stdout) == []


# --- fastai: another method of the same object may call update(): unknown ---


def test_fastai_callbacks_order_is_unknown_not_a_missing_update(tmp_path, monkeypatch):
    # `DirectLearner.one_batch` calls `self.mp.before_step()` (a step); `after_step` (the update) runs
    # through the dispatcher. Silent; and silent *because* the order is unknown: were the other method
    # ignored, the step would look never updated (AMP021).
    from amp_lint.analysis import summaries

    tree = _copy("fastai_callbacks", tmp_path)
    assert _check_tree(tree) == []
    monkeypatch.setattr(summaries, "_order_unknown", lambda *args: False)
    assert [(name, code) for name, code, _ in _check_tree(tree)] == [("direct.py", "AMP021")]
