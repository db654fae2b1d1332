"""A warm run finds the stored result of an unchanged file without reading it (its content's digest is kept
beside its `stat`), and is still invalidated by everything the result depends on: the file's content, its
settings, amp-lint's version, the project modules its analysis read, and the callers of its functions.

The files are aged first: a file written in the last seconds is never trusted by its `stat` alone (it may
change again within the file system's clock tick), so without aging every run below would read every file.
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

from snippets import MISSING_UPDATE

# A finding (AMP070) in a file that names no GradScaler: its key is its content alone (a file that names one
# also depends on its callers in other modules, and is read at each run).
DEPRECATED = "import torch\n\nwith torch.cuda.amp.autocast():\n    y = model(x)\n"
FIXED = DEPRECATED.replace("torch.cuda.amp.autocast()", 'torch.amp.autocast("cuda")')
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "project"
AN_HOUR_AGO = time.time() - 3600


def _age(*paths: Path) -> None:
    for top in paths:
        for path in [top, *top.rglob("*")] if top.is_dir() else [top]:
            os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))


def _config(**changes):
    import amp_lint.engine.checker  # noqa: F401
    from amp_lint.engine import runner
    from amp_lint.rules import ALL_RULES

    options = dict(fix=False, unsafe_fixes=False, with_edits=False, write=False)
    options.update(changes)
    return runner.CheckConfig(frozenset(r.code for r in ALL_RULES), **options)


def _run(paths, cache, config=None):
    from amp_lint.engine import runner

    config = config or _config()
    report, _ = runner.execute(runner.RunPlan([(str(p), config) for p in paths], []), jobs=1, cache=cache)
    assert not report.errors, report.errors
    return sorted((os.path.basename(d.filename), d.code, d.location.row) for d in report.diagnostics)


def _no_reading(monkeypatch):
    from amp_lint.files import sources

    def refuse(path, *args, **kwargs):
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(sources, "read_bytes", refuse)


def test_an_unchanged_file_with_a_stored_result_is_not_read_again(tmp_path, monkeypatch):
    from amp_lint.files.cache import ResultCache

    buggy, clean = tmp_path / "buggy.py", tmp_path / "clean.py"
    buggy.write_text(DEPRECATED)
    clean.write_text("x = 1\n")
    _age(buggy, clean)
    cache_dir = tmp_path / "cache"
    cold = _run([buggy, clean], ResultCache(cache_dir, "s", "1"))
    assert [code for _, code, _ in cold] == ["AMP070"]
    with monkeypatch.context() as patch:
        _no_reading(patch)
        assert _run([buggy, clean], ResultCache(cache_dir, "s", "1")) == cold
    # Another settings key or another version: the same digest names another entry, a miss that reads the file.
    with monkeypatch.context() as patch:
        _no_reading(patch)
        for other in (ResultCache(cache_dir, "other settings", "1"), ResultCache(cache_dir, "s", "2")):
            with pytest.raises(AssertionError, match="was read"):
                _run([buggy, clean], other)


def test_a_file_whose_content_changed_is_read_again_even_with_its_old_times(tmp_path):
    from amp_lint.files.cache import ResultCache

    buggy = tmp_path / "buggy.py"
    buggy.write_text(DEPRECATED)
    _age(buggy)
    cache_dir = tmp_path / "cache"
    assert [code for _, code, _ in _run([buggy], ResultCache(cache_dir, "s", "1"))] == ["AMP070"]
    assert [code for _, code, _ in _run([buggy], ResultCache(cache_dir, "s", "1"))] == ["AMP070"]  # known by stat
    # The old modification time put back: the change time (which no tool sets back) still tells.
    buggy.write_text(FIXED)
    _age(buggy)
    assert _run([buggy], ResultCache(cache_dir, "s", "1")) == []
    assert _run([buggy], ResultCache(cache_dir, "s", "1")) == []  # and that new result is the stored one


def test_a_file_written_just_now_is_not_known_by_its_stat(tmp_path, monkeypatch):
    from amp_lint.engine import stored
    from amp_lint.files.cache import ResultCache

    buggy = tmp_path / "buggy.py"
    buggy.write_text(DEPRECATED)  # not aged: it may change again within the clock's tick
    cache_dir = tmp_path / "cache"
    _run([buggy], ResultCache(cache_dir, "s", "1"))
    assert stored.known_files(ResultCache(cache_dir, "s", "1"), stored.POSITIVES_KEY) == {}
    _age(buggy)
    _run([buggy], ResultCache(cache_dir, "s", "1"))  # read once more, then known
    assert list(stored.known_files(ResultCache(cache_dir, "s", "1"), stored.POSITIVES_KEY)) == [str(buggy)]


def test_a_file_that_names_a_grad_scaler_is_never_known_by_its_stat(tmp_path):
    """Its stored result also rests on which files call its functions, and a new file can become a caller."""
    from amp_lint.engine import stored
    from amp_lint.files.cache import ResultCache

    buggy = tmp_path / "buggy.py"
    buggy.write_text(MISSING_UPDATE)
    _age(buggy)
    cache_dir = tmp_path / "cache"
    for _ in range(2):
        assert [code for _, code, _ in _run([buggy], ResultCache(cache_dir, "s", "1"))] == ["AMP021"]
    assert stored.known_files(ResultCache(cache_dir, "s", "1"), stored.POSITIVES_KEY) == {}


def _cli(*args, cwd, cache):
    command = [sys.executable, "-m", "amp_lint", "check", "--show-assumed", "--output-format", "json", "--cache-dir", str(cache)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command + list(args), cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    return [d["code"] for d in json.loads(result.stdout)]


def test_editing_a_helper_module_invalidates_a_file_known_by_its_stat(tmp_path):
    tree = tmp_path / "grad_stats_in_helper"
    shutil.copytree(FIXTURES / "grad_stats_in_helper", tree)
    _age(tree)
    cache = tmp_path / "cache"
    assert _cli(".", cwd=tree, cache=cache) == ["AMP030"]
    assert _cli(".", cwd=tree, cache=cache) == ["AMP030"]  # warm: the importing file is known by its stat
    (tree / "trainer" / "metrics.py").write_text("def grad_norm(model):\n    return 0.0\n")
    _age(tree)
    assert _cli(".", cwd=tree, cache=cache) == []


def test_a_per_epoch_finding_still_follows_its_callers_when_files_are_known_by_their_stat(tmp_path):
    tree = tmp_path / "scaler_per_epoch"
    shutil.copytree(FIXTURES / "scaler_per_epoch", tree)
    _age(tree)
    cache = tmp_path / "cache"
    assert _cli(".", cwd=tree, cache=cache) == ["AMP013"]
    assert _cli(".", cwd=tree, cache=cache) == ["AMP013"]
    main = tree / "trainer" / "main.py"
    main.write_text(main.read_text().replace("    for epoch in range(epochs):\n        train_one_epoch(", "    train_one_epoch("))
    _age(tree)
    assert _cli(".", cwd=tree, cache=cache) == []
    (tree / "trainer" / "cli.py").write_text(
        "from trainer.engine import train_one_epoch\n\n\ndef run(model, loader, optimizer):\n"
        "    for epoch in range(10):\n        train_one_epoch(model, loader, optimizer)\n"
    )
    _age(tree)
    assert _cli(".", cwd=tree, cache=cache) == ["AMP013"]


_LOADED = (
    "import runpy, sys\n"
    "sys.argv = ['amp-lint', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('amp_lint', run_name='__main__')\n"
    "except SystemExit as stop:\n"
    "    code = stop.code\n"
    "heavy = sorted(m for m in sys.modules if m == 'libcst' or m.startswith(('amp_lint.analysis', 'amp_lint.rules.amp')))\n"
    "print('LOADED', heavy, code, file=sys.stderr)\n"
)


def _loaded(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", _LOADED, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    line = next(line for line in result.stderr.splitlines() if line.startswith("LOADED"))
    return result.stdout, line


def test_a_warm_run_and_a_run_the_prefilter_settles_load_neither_libcst_nor_the_rules_nor_the_analysis(tmp_path):
    """What a run of cache hits or of files without AMP content needs is the walk, the prefilter and the
    report: LibCST's import alone costs more than the whole run should (issue 31: warm 0.3 s, pre-commit 0.15 s)."""
    (tmp_path / "dep.py").write_text(DEPRECATED)
    (tmp_path / "plain.py").write_text("import os\n\nprint(os.getcwd())\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    _age(tmp_path)
    # No AMP content: settled by the prefilter, no cache needed.
    out, line = _loaded(["check", "--no-cache", "plain.py"], tmp_path)
    assert line == "LOADED [] 0", line
    # A cold run with a finding loads the checker; the warm run after it replays the result alone.
    cold, line = _loaded(["check", "--output-format", "json", "--cache-dir", "cache", "."], tmp_path)
    assert "libcst" in line and line.endswith(" 1"), line
    warm, line = _loaded(["check", "--output-format", "json", "--cache-dir", "cache", "."], tmp_path)
    assert line == "LOADED [] 1", line
    assert warm == cold and json.loads(warm)[0]["code"] == "AMP070"


def test_settings_asked_per_folder_are_those_asked_per_file(tmp_path):
    from amp_lint import rules as registry
    from amp_lint.files.config import SettingsResolver

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "amp-lint.toml").write_text('select = ["AMP070"]\n')
    (tmp_path / "sub" / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    for options in ({}, {"isolated": True}, {"config_path": tmp_path / "sub" / "amp-lint.toml"}):
        per_file = SettingsResolver({}, all_codes=registry.all_codes(), **options)
        per_folder = SettingsResolver({}, all_codes=registry.all_codes(), **options)
        for file in (tmp_path / "sub" / "a.py", tmp_path / "b.py"):
            assert per_folder.for_folder(str(file.parent)) == per_file.for_path(file), (options, file)
            assert per_folder.for_path(file.parent) is per_folder.for_folder(str(file.parent))


# --- the walk index: folders whose `stat` is unchanged are not listed again (issue 31) --------------------------

_TICK = [0]


def _age_again(*paths: Path, tree: bool = False) -> None:
    """As `_age`, to a time no earlier aging used, for the paths given (with `tree`, everything under them too):
    a folder changed since the last walk cannot get its old modification time back (nor its change time)."""
    _TICK[0] += 10
    moment = AN_HOUR_AGO + _TICK[0]
    for top in paths:
        for path in [top, *top.rglob("*")] if tree else [top]:
            os.utime(path, (moment, moment), follow_symlinks=False)


def _walk(monkeypatch, paths, records=None, **resolver_options):
    """(the files found, the folders listed, the warnings, the index's records after the walk)."""
    from amp_lint import rules as registry
    from amp_lint.files import walk_index
    from amp_lint.files.config import SettingsResolver, _config_above
    from amp_lint.files.torch_version import WITHOUT_CONFIG, project_root_above
    from amp_lint.files.walk import discover

    def new_process():
        for forget in (WITHOUT_CONFIG.clear, _config_above.cache_clear, project_root_above.cache_clear):
            forget()
        return SettingsResolver(resolver_options, all_codes=registry.all_codes())

    plain, _ = discover([str(p) for p in paths], new_process().for_path, as_text=True, on_warning=lambda w: None)
    resolver = new_process()
    listed, warnings, real_scandir = [], [], os.scandir

    def scandir(path):
        listed.append(os.path.basename(os.path.abspath(path)))
        return real_scandir(path)

    index = walk_index.WalkIndex(json.loads(json.dumps(records)) if records is not None else None)
    stats = {}
    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        files, errors = discover(
            [str(p) for p in paths], resolver.for_path, as_text=True, index=index, stats=stats, on_warning=warnings.append
        )
    assert not errors, errors
    assert sorted(stats) == sorted(files) and all(stats[f].st_size == os.stat(f).st_size for f in files)
    assert files == plain  # whatever the index held, the walk finds what a walk without one finds
    return [os.path.relpath(f, paths[0]) for f in files], sorted(listed), [w.message for w in warnings], index.records()


def _tree(root: Path) -> Path:
    for name in ("pkg/a.py", "pkg/sub/b.py", "pkg/sub/deep/c.py", "other/d.py", "top.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x = 1\n")
    (root / "pkg" / "data.bin").write_bytes(b"\0")
    _age_again(root, tree=True)
    return root


def test_an_unchanged_tree_is_walked_without_listing_a_folder(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    files, listed, _, records = _walk(monkeypatch, [root])
    assert files == ["other/d.py", "pkg/a.py", "pkg/sub/b.py", "pkg/sub/deep/c.py", "top.py"]
    assert listed == ["deep", "other", "pkg", "sub", "t"]
    assert _walk(monkeypatch, [root], records)[:2] == (files, [])


def test_the_walk_index_sees_a_new_file_a_deleted_file_and_a_renamed_folder(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    *_, records = _walk(monkeypatch, [root])
    (root / "pkg" / "sub" / "new.py").write_text("y = 2\n")
    _age_again(root / "pkg" / "sub")
    files, listed, _, records = _walk(monkeypatch, [root], records)
    assert "pkg/sub/new.py" in files and listed == ["sub"]
    (root / "pkg" / "a.py").unlink()
    _age_again(root / "pkg")
    files, listed, _, records = _walk(monkeypatch, [root], records)
    assert "pkg/a.py" not in files and listed == ["pkg"]
    (root / "pkg" / "sub").rename(root / "pkg" / "renamed")
    _age_again(root / "pkg")
    files, listed, _, records = _walk(monkeypatch, [root], records)
    assert files == ["other/d.py", "pkg/renamed/b.py", "pkg/renamed/deep/c.py", "pkg/renamed/new.py", "top.py"]
    assert listed == ["deep", "pkg", "renamed"]  # by their paths: the folders under a renamed one are listed again
    assert _walk(monkeypatch, [root], records)[:2] == (files, [])


def test_the_walk_index_sees_a_changed_gitignore_and_a_new_info_exclude(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".gitignore").write_text("other/\n")
    _age_again(root, tree=True)
    files, _, _, records = _walk(monkeypatch, [root])
    assert "other/d.py" not in files
    (root / ".gitignore").write_text("pkg/sub/\n")  # the folder itself does not change
    files, _, _, records = _walk(monkeypatch, [root], records)
    assert "other/d.py" in files and "pkg/sub/b.py" not in files and "pkg/a.py" in files
    (root / ".git" / "info" / "exclude").write_text("top.py\n")  # nor here
    files, _, _, records = _walk(monkeypatch, [root], records)
    assert "top.py" not in files and "other/d.py" in files
    # Outside a work tree's root too: the ignore file of a folder above the one named.
    (root / ".gitignore").write_text("deep/\n")
    files, _, _, records = _walk(monkeypatch, [root / "pkg"], records)
    assert files == ["a.py", "sub/b.py"]


def test_the_walk_index_sees_a_changed_configuration_and_other_options(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    (root / "pkg" / "amp-lint.toml").write_text('extend-exclude = ["deep"]\n')
    _age_again(root, tree=True)
    files, _, _, records = _walk(monkeypatch, [root])
    assert "pkg/sub/deep/c.py" not in files
    (root / "pkg" / "amp-lint.toml").write_text('extend-exclude = ["b.py"]\n')  # pkg does not change
    files, _, _, records = _walk(monkeypatch, [root], records)
    assert "pkg/sub/deep/c.py" in files and "pkg/sub/b.py" not in files
    # A configuration file that appears above the folders (the folder above changes; those below do not).
    (root / "amp-lint.toml").write_text('extend-exclude = ["other"]\n')
    (root / "pkg" / "amp-lint.toml").unlink()
    _age_again(root, root / "pkg")
    files, _, _, records = _walk(monkeypatch, [root], records)
    assert files == ["pkg/a.py", "pkg/sub/b.py", "pkg/sub/deep/c.py", "top.py"]
    # Options on the command line are settings too.
    files, _, _, records = _walk(monkeypatch, [root], records, extend_exclude=("a.py",))
    assert files == ["pkg/sub/b.py", "pkg/sub/deep/c.py", "top.py"]


def test_a_link_whose_target_went_is_reported_as_a_walk_without_index_reports_it(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    target = tmp_path / "elsewhere.py"
    target.write_text("z = 3\n")
    (root / "pkg" / "link.py").symlink_to(target)
    _age_again(root / "pkg")
    files, _, warnings, records = _walk(monkeypatch, [root])
    assert "pkg/link.py" in files and not warnings
    target.unlink()  # the folder holding the link does not change
    files, listed, warnings, records = _walk(monkeypatch, [root], records)
    assert "pkg/link.py" not in files and listed == ["pkg"] and warnings == [f"broken symbolic link (to {target}); skipped"]
    files, listed, warnings, _ = _walk(monkeypatch, [root], records)
    assert listed == ["pkg"] and len(warnings) == 1  # a folder with a warning is never remembered


def test_a_folder_modified_just_now_is_not_remembered(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    (root / "pkg" / "fresh.py").write_text("x = 1\n")  # pkg's modification time is now
    *_, records = _walk(monkeypatch, [root])
    assert os.path.join(str(root / "pkg"), "") not in records and os.path.join(str(root / "other"), "") in records
    assert _walk(monkeypatch, [root], records)[1] == ["pkg"]


def _run_cli(*args, cwd):
    command = [sys.executable, "-m", "amp_lint", "check", "--show-assumed", "--output-format", "json", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    return result.returncode, result.stdout, result.stderr


def test_a_warm_run_prints_what_a_cold_run_prints_through_changes_the_walk_index_must_see(tmp_path):
    tree = tmp_path / "proj"
    shutil.copytree(FIXTURES / "grad_stats_in_helper", tree)
    (tree / ".git").mkdir()
    (tree / "extra").mkdir()
    (tree / "extra" / "dep.py").write_text(DEPRECATED)
    _age_again(tree, tree=True)
    cache = str(tmp_path / "cache")

    def same():
        cold = _run_cli("--no-cache", ".", cwd=tree)
        for _ in range(2):  # the run that fills the cache, then the warm run
            assert _run_cli("--cache-dir", cache, ".", cwd=tree) == cold
        return json.loads(cold[1])

    assert sorted(d["code"] for d in same()) == ["AMP030", "AMP070"]
    (tree / ".gitignore").write_text("extra/\n")
    _age_again(tree, tree / ".gitignore")
    assert [d["code"] for d in same()] == ["AMP030"]
    (tree / ".gitignore").write_text("# nothing\n")
    (tree / "extra" / "more").mkdir()
    (tree / "extra" / "more" / "dep2.py").write_text(DEPRECATED)
    _age_again(tree / "extra", tree / "extra" / "more", tree / "extra" / "more" / "dep2.py", tree / ".gitignore")
    assert sorted(d["code"] for d in same()) == ["AMP030", "AMP070", "AMP070"]
    (tree / "amp-lint.toml").write_text('extend-exclude = ["more"]\n')
    _age_again(tree, tree / "amp-lint.toml")
    assert sorted(d["code"] for d in same()) == ["AMP030", "AMP070"]
    shutil.rmtree(tree / "extra")
    _age_again(tree)
    assert [d["code"] for d in same()] == ["AMP030"]


def test_a_walk_index_the_cache_holds_is_read_back_and_one_that_does_not_validate_is_empty(tmp_path, monkeypatch):
    from amp_lint.files import walk_index
    from amp_lint.files.cache import ResultCache

    root = _tree(tmp_path / "t")
    *_, records = _walk(monkeypatch, [root])
    index = walk_index.WalkIndex(records)
    index.changed = True
    walk_index.store(ResultCache(tmp_path / "cache", "s", "1"), index)
    assert walk_index.load(ResultCache(tmp_path / "cache", "s", "1")).records() == records
    assert walk_index.load(ResultCache(tmp_path / "cache", "other settings", "1")).records() == {}
    for payload in ({"folders": {}}, {"contexts": ["x"], "folders": {"/a/": ["s", 1, "", []]}}, {"contexts": [], "folders": []},
                    {"contexts": ["x"], "folders": {"/a/": ["s", 0, "", ["x.py"]]}}):
        ResultCache(tmp_path / "cache", "s", "1").put(walk_index.WALK_INDEX_KEY, b"", payload)
        assert walk_index.load(ResultCache(tmp_path / "cache", "s", "1")).records() == {}, payload


def test_a_check_that_writes_nothing_does_not_load_the_writing_code_and_parses_pyproject_once(tmp_path):
    """Pre-commit's run of a few files is mostly start-up (issue 31: 0.15 s): what it does not need, it does
    not import, and what it reads twice (a project's pyproject.toml: its amp-lint table, its torch floor) it
    parses once."""
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'amp-lint-user'\ndependencies = ['torch>=2.1']\n\n[tool.black]\nline-length = 99\n"
    )
    (tmp_path / "train.py").write_text("import torch\n\nwith torch.autocast('cuda'):\n    y = model(x)\n" + "# pad\n" * 800)
    script = (
        "import runpy, sys, tomllib\n"
        "parsed = []\n"
        "real = tomllib.loads\n"
        "tomllib.loads = lambda text, **kw: parsed.append(1) or real(text, **kw)\n"
        "sys.argv = ['amp-lint', 'check', '--no-cache', 'train.py']\n"
        "try:\n    runpy.run_module('amp_lint', run_name='__main__')\n"
        "except SystemExit as stop:\n    code = stop.code\n"
        "print('LOADED', 'amp_lint.files.writing' in sys.modules, len(parsed), code, file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    line = next(line for line in result.stderr.splitlines() if line.startswith("LOADED"))
    assert line == "LOADED False 1 0", result.stderr


def test_a_link_the_walk_did_not_keep_is_looked_at_again_when_its_target_appears(tmp_path, monkeypatch):
    root = _tree(tmp_path / "t")
    target = tmp_path / "vendored"
    (root / "pkg" / "lib").symlink_to(target)  # to nothing yet: not a folder, no Python suffix
    _age_again(root / "pkg")
    files, _, _, records = _walk(monkeypatch, [root])
    assert not any("lib" in f for f in files)
    target.mkdir()
    (target / "v.py").write_text("x = 1\n")  # pkg itself does not change
    files, listed, _, records = _walk(monkeypatch, [root], records)
    assert "pkg/lib/v.py" in files and "pkg" in listed
