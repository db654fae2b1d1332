"""`amp_lint.engine.runner`: work spread over worker processes in batches gives what one process gives."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

import amp_lint.engine.checker  # noqa: F401 (imports the rules before the fixer: their modules import each other)
from amp_lint.engine import runner, workers
from amp_lint.rules import ALL_RULES
from snippets import BACKWARD_IN_AUTOCAST, MISSING_UPDATE

ENABLED = frozenset(rule.code for rule in ALL_RULES)


def _config() -> runner.CheckConfig:
    return runner.CheckConfig(ENABLED, fix=False, unsafe_fixes=False, with_edits=True, write=False)


def _tree(folder: Path) -> list:
    """Four big files (each a batch of its own) and 150 small ones (batched), all with findings, and some
    files without any."""
    files = []
    for index in range(4):
        padding = "".join(f"value_{i} = {i}\n" for i in range(8_000))  # about 120 kB
        files.append((folder / f"big_{index}.py", BACKWARD_IN_AUTOCAST + padding))
    for index in range(150):
        snippet = MISSING_UPDATE if index % 2 else BACKWARD_IN_AUTOCAST
        files.append((folder / f"small_{index:03}.py", snippet.replace("loss_fn", f"loss_fn_{index}")))
    for index in range(30):
        files.append((folder / f"plain_{index}.py", f"print({index})\n"))
    for path, text in files:
        path.write_text(text)
    return sorted(str(path) for path, _ in files)


def _run(paths, jobs: int):
    plan = runner.RunPlan([(path, _config()) for path in paths], [])
    report, _ = runner.execute(plan, jobs=jobs)
    return report


def test_batched_workers_report_what_one_process_reports(tmp_path):
    paths = _tree(tmp_path)
    alone = _run(paths, jobs=1)
    spread = _run(paths, jobs=2)
    assert spread.files_checked == alone.files_checked == len(paths)
    assert spread.diagnostics == alone.diagnostics
    assert spread.errors == alone.errors == []
    assert {d.filename for d in spread.diagnostics} == {p for p in paths if "plain" not in p}


def test_a_stopped_worker_takes_no_other_file(tmp_path, monkeypatch):
    paths = _tree(tmp_path)[:3]
    stop = threading.Event()
    monkeypatch.setattr(workers, "_STOP", stop)
    assert len(workers.check_files([(path, _config()) for path in paths])) == 3
    stop.set()
    assert workers.check_files([(path, _config()) for path in paths]) == []


@pytest.mark.parametrize("sizes", [[10] * 200, [200_000, 100_000, 90_000, 80_000] + [1_000] * 100])
def test_every_file_reaches_exactly_one_batch(monkeypatch, sizes):
    submitted = []

    class Pool:
        def submit(self, function, items):
            submitted.append([path for path, _ in items])

    scheduler = workers.Scheduler(jobs=2)
    monkeypatch.setattr(scheduler, "_start_pool", lambda: setattr(scheduler, "pool", Pool()))
    scheduler.pool = Pool()
    for index, size in enumerate(sizes):
        scheduler.add(f"f{index}", _config(), size, b"")
    scheduler._submit_batch()
    flat = [path for batch in submitted for path in batch]
    assert flat == [f"f{index}" for index in range(len(sizes))]
    assert all(len(batch) <= workers._BATCH_FILES for batch in submitted)
    big = [batch for batch in submitted if any(sizes[int(path[1:])] >= workers._BATCH_BYTES for path in batch)]
    assert all(len(batch) == 1 for batch in big)


def test_workers_started_before_the_files_are_known_report_what_one_process_reports(tmp_path):
    """`Scheduler.start_early` (a big walk calls it): the workers fork with the checker loaded, and every
    file the prefilter keeps goes to them, however few."""
    paths = _tree(tmp_path)
    alone = _run(paths, jobs=1)
    for chosen in (paths, paths[:3]):
        scheduler = workers.Scheduler(jobs=2)
        scheduler.start_early()
        assert scheduler.pool is not None
        plan = runner.RunPlan([(path, _config()) for path in chosen], [])
        early, _ = runner.execute(plan, jobs=2, scheduler=scheduler)
        assert scheduler.pool is None  # closed with the run
        expected = [d for d in alone.diagnostics if d.filename in chosen]
        assert early.diagnostics == expected and early.errors == []


_LOADED_ONCE = """
import os, sys
from amp_lint.engine import workers

def checker_loaded():
    return "libcst" in sys.modules and "amp_lint.engine.checker" in sys.modules

def worker_facts():
    from amp_lint.engine import warm_up
    return checker_loaded(), os.getppid()

assert not checker_loaded()
workers._FORK = sys.argv[1] == "fork"
scheduler = workers.Scheduler(jobs=2)
scheduler.start_early()
loaded, parent = scheduler.pool.submit(worker_facts).result()
zygote = getattr(scheduler.pool, "pid", None)
print(checker_loaded(), loaded, zygote is not None and parent == zygote)
scheduler.close()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers fork on Linux only")
def test_workers_started_early_fork_from_a_zygote_that_loaded_the_checker():
    """Loaded by each worker, the checker (LibCST and the rules) cost a sixth of a second of CPU per worker;
    loaded by the main process before it forks them, it stopped the walk for as long. Where workers fork,
    they fork from the zygote, which loaded it once while the main process went on (`engine.zygote`)."""
    import subprocess

    for start, expected in (("fork", ["False", "True", "True"]), ("spawn", ["False", "True", "False"])):
        done = subprocess.run([sys.executable, "-c", _LOADED_ONCE, start], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == expected, start  # where workers do not fork, each loads it as it starts


def test_workers_started_early_that_get_no_file_are_killed_not_awaited(monkeypatch):
    """A big walk whose files the prefilter all rules out (or the cache settles) must not wait for idle
    workers to finish loading the checker."""
    import time

    real_start = workers._start_worker

    def slow_start(*args):
        real_start(*args)
        time.sleep(30)  # still "loading the checker" when the run ends

    monkeypatch.setattr(workers, "_start_worker", slow_start)
    monkeypatch.setattr(workers, "_FORK", False)  # a pool of this process's own: its workers can be listed
    scheduler = workers.Scheduler(jobs=2)
    scheduler.start_early()
    processes = list(scheduler.pool._processes.values())
    assert processes
    started = time.monotonic()
    scheduler.close()
    assert time.monotonic() - started < 10
    assert all(not process.is_alive() for process in processes)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is used where workers fork")
def test_a_zygote_whose_workers_get_no_file_is_killed_not_awaited(monkeypatch):
    """The same for workers forked from the zygote: it is killed, and its workers die with it."""
    import time

    real_start = workers._start_worker

    def slow_start(*args):
        real_start(*args)
        time.sleep(30)  # still starting when the run ends

    monkeypatch.setattr(workers, "_start_worker", slow_start)
    scheduler = workers.Scheduler(jobs=2)
    scheduler.start_early()
    zygote = scheduler.pool.pid
    time.sleep(0.5)  # the zygote loads the checker and forks its workers
    children = _children(zygote)
    started = time.monotonic()
    scheduler.close()
    assert time.monotonic() - started < 10
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in [zygote, *children]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in [zygote, *children])


def _children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_walk_over_much_source_starts_the_workers_early_unless_the_cache_has_results(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from amp_lint.cli import main

    for index in range(8):
        (tmp_path / f"m{index}.py").write_text("x = 1\n" * 200)
    started = []
    monkeypatch.setattr(workers, "EARLY_START_BYTES", 5_000)
    monkeypatch.setattr(workers.Scheduler, "start_early", lambda self: started.append(self.workers))
    monkeypatch.chdir(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["check", "--no-cache", "--jobs", "2", "."]).exit_code == 0
    assert started == [2]
    started.clear()
    assert cli.invoke(main, ["check", "--jobs", "2", "."]).exit_code == 0  # cold cache: fills it
    assert started == [2]
    started.clear()
    assert cli.invoke(main, ["check", "--jobs", "2", "."]).exit_code == 0  # warm: results stored
    assert started == []
    monkeypatch.setattr(workers, "EARLY_START_BYTES", 50_000)
    assert cli.invoke(main, ["check", "--no-cache", "--jobs", "2", "."]).exit_code == 0  # a small tree
    assert started == []


def test_a_warm_run_does_not_read_the_files_the_prefilter_ruled_out_unless_they_changed(tmp_path, monkeypatch):
    """The list of ruled-out files keeps each one's size, times and inode with its digest: an unchanged file
    is not read again (torch's 2,300 files), a changed one is read, and checked when it can now hold a finding."""
    import os

    from amp_lint.files import sources
    from amp_lint.files.cache import ResultCache

    plain, train = tmp_path / "plain.py", tmp_path / "train.py"
    plain.write_text("x = 1\n")
    train.write_text(BACKWARD_IN_AUTOCAST)
    from amp_lint import rules as registry

    config = runner.CheckConfig(frozenset(registry.default_codes()), fix=False, unsafe_fixes=False, with_edits=True, write=False)
    plan = runner.RunPlan([(str(plain), config), (str(train), config)], [])
    read = []
    real_read = sources.read_bytes
    monkeypatch.setattr(sources, "read_bytes", lambda path: read.append(os.path.basename(path)) or real_read(path))

    def run():
        read.clear()
        report, _ = runner.execute(plan, jobs=1, cache=ResultCache(tmp_path / "cache", "k", "v"))
        return sorted({os.path.basename(d.filename) for d in report.diagnostics})

    assert run() == ["train.py"] and sorted(read) == ["plain.py", "train.py"]
    assert run() == ["train.py"] and read == ["train.py"]  # plain.py: known, unchanged, not read
    info = plain.stat()
    os.utime(plain, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # touched: read again, ruled out again
    assert run() == ["train.py"] and "plain.py" in read
    assert run() == ["train.py"] and read == ["train.py"]
    plain.write_text(BACKWARD_IN_AUTOCAST)  # now it holds a finding
    assert run() == ["plain.py", "train.py"]
