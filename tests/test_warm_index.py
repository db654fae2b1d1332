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
