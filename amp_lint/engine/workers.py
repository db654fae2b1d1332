"""The worker processes of a run: the `Scheduler` that hands them files in batches as the prefilter lets
them through (and starts them early for a big cold walk), how a worker starts and ends with the main
process, and what a worker runs (`check_files`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import FileError
from amp_lint.engine import runner
from amp_lint.engine.runner import CheckConfig, FileOutcome

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ProcessPoolExecutor  # imported when the workers start (start-up time)

# A walk that has found this much source starts the workers at once (`Scheduler.start_early`), with the
# checker loaded: they are ready while the walk and the prefilter go on, and a run this big nearly always
# has files for them.
EARLY_START_BYTES = 4_000_000
# Below this much work, forking workers costs more than it saves.
_PARALLEL_MIN_FILES = 4
_PARALLEL_MIN_BYTES = 400_000
# Small files go to the workers in batches of about this many bytes (a file this big goes alone): one
# task per file costs the main process a pickling and a pipe write each, and its feeder thread's wait
# for the GIL while the main thread prefilters.
_BATCH_BYTES = 64_000
_BATCH_FILES = 64
# Workers fork (and inherit what the main process has loaded) on Linux; elsewhere they start afresh.
_FORK = sys.platform.startswith("linux")

class Scheduler:
    """Hands files to worker processes as the prefilter lets them through.

    The workers start once there is enough work to pay for them (`_PARALLEL_MIN_FILES` and
    `_PARALLEL_MIN_BYTES`); below that, the files are checked here, one after the other. Files go to
    the workers in batches (`_BATCH_BYTES`), a big file alone. Results come back in the order the files
    were added.
    """

    def __init__(self, jobs: Optional[int]) -> None:
        self.workers = jobs or os.cpu_count() or 1
        self.waiting: List[Tuple[str, CheckConfig, int, Optional[bytes]]] = []
        self.waiting_bytes = 0
        self.batch: List[Tuple[str, CheckConfig, int, Optional[bytes]]] = []
        self.batch_bytes = 0
        self.futures: List[Tuple[object, List[Tuple[str, CheckConfig]], List[Optional[bytes]]]] = []
        self.pool: "Optional[ProcessPoolExecutor]" = None
        self.stop = None  # set on Ctrl-C: workers that cannot be ended at once take no other file
        self.context = None
        self.alone: "Optional[ProcessPoolExecutor]" = None  # one worker, to recheck a dead worker's files one by one
        self.watchdog: Optional[Tuple[int, int]] = None  # the workers' lifeline pipe (see `_start_worker`)

    def start_early(self) -> None:
        """Start the workers now, before the files are known: a walk that has found many bytes of source
        calls this. The checker (LibCST and the rules, a sixth of a second of CPU) is loaded once, by the
        zygote this forks (`engine.zygote`), on the second core while this process walks on; the workers
        fork from the zygote with it loaded (loaded by each worker, it cost that time per worker; loaded
        here, it stopped the walk for as long). Once they are started, every file the prefilter keeps goes
        to them. Workers that never get a file are killed at `close`. Where workers do not fork (macOS,
        Windows), there is no zygote: each worker loads the checker as it starts."""
        if self.pool is not None or self.workers < 2:
            return
        if _FORK:  # the checker is imported by the zygote, on the second core, while this process walks on
            from amp_lint.engine.zygote import ZygotePool

            self._prepare_context()  # the stop event and the watchdog pipe: the zygote and its workers inherit them
            self.pool = ZygotePool(self.workers, self.stop, self.watchdog, load_and_warm_checker, _start_worker)
            return
        gc.freeze()  # see `_start_pool`
        self.pool = self._new_pool(self.workers, load_checker=True)
        self.pool.submit(_ready)  # the pool starts its workers at the first task

    def add(self, path: str, config: CheckConfig, size: int, raw: Optional[bytes]) -> None:
        if self.pool is not None:
            self._batch((path, config, size, raw))
            return
        self.waiting.append((path, config, size, raw))
        self.waiting_bytes += size
        if self.workers > 1 and len(self.waiting) >= _PARALLEL_MIN_FILES and self.waiting_bytes >= _PARALLEL_MIN_BYTES:
            self._start_pool()

    def _batch(self, item: Tuple[str, CheckConfig, int, Optional[bytes]]) -> None:
        if item[2] >= _BATCH_BYTES:
            self._submit_batch()  # a big file goes alone
        self.batch.append(item)
        self.batch_bytes += item[2]
        if self.batch_bytes >= _BATCH_BYTES or len(self.batch) >= _BATCH_FILES:
            self._submit_batch()

    def _submit_batch(self) -> None:
        if not self.batch:
            return
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        items = [(path, config) for path, config, _, _ in batch]
        future = self.pool.submit(check_files, items)
        self.futures.append((future, items, [raw for _, _, _, raw in batch]))

    def _start_pool(self) -> None:
        # There is work for LibCST: load the checker and the rules here, once, before the workers fork
        # (they inherit the loaded modules instead of each importing them; a run the prefilter settles
        # never loads them at all).
        _load_checker()
        runner.remember_caller_scans()  # the workers fork inside the run: they remember their searches too
        # What is loaded now lives as long as the workers: their cyclic collector need never scan it, and
        # its memory pages stay shared with this process instead of being copied as the collector marks them.
        gc.freeze()
        self.pool = self._new_pool(self.workers)
        waiting, self.waiting = self.waiting, []
        for item in waiting:  # largest first: each of the first files is a batch of its own
            self._batch(item)

    def _new_pool(self, workers: int, load_checker: bool = False) -> "ProcessPoolExecutor":
        from concurrent.futures import ProcessPoolExecutor

        self._prepare_context()
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=self.context,
            initializer=_start_worker,
            initargs=(self.stop, os.getpid(), self.watchdog, load_checker),
        )

    def _prepare_context(self) -> None:
        """The start method, the stop event and the watchdog pipe, made once for every pool of the run."""
        if self.context is not None:
            return
        import multiprocessing

        self.context = multiprocessing.get_context("fork") if _FORK else multiprocessing.get_context()
        self.stop = self.context.Event()
        if _FORK:  # forked workers inherit the pipe's read end; the main process alone holds the write end
            self.watchdog = os.pipe()  # (read end, write end); see `_start_worker`
        else:
            self.watchdog = None

    def results(self):
        """(outcome, raw bytes) per file; on Ctrl-C, files not started yet are left alone."""
        try:
            for path, config, _, raw in self.waiting:
                if raw is not None and _risky(raw):
                    # Checked here, an out-of-memory abort in LibCST's native parser would end the run.
                    yield self._check_isolated(path, config) if self._can_isolate() else runner.check_file(path, config, prefiltered=True), raw
                else:
                    yield runner.check_file(path, config, prefiltered=True), raw
            if self.pool is None:
                return
            from concurrent.futures.process import BrokenProcessPool

            self._submit_batch()
            for future, items, raws in self.futures:
                try:
                    outcomes = future.result()
                except BrokenProcessPool:  # a worker died (LibCST's native parser crashed, say)
                    outcomes = self._check_alone(items)
                yield from zip(outcomes, raws)
        finally:
            self.close()

    def _check_alone(self, items: Sequence[Tuple[str, CheckConfig]]) -> List[FileOutcome]:
        """Check a dead worker's files again, one per task in a worker of their own: the file that kills
        it again is that file's error, and the run goes on."""
        from concurrent.futures.process import BrokenProcessPool

        outcomes = []
        for path, config in items:
            if self.stop is not None and self.stop.is_set():
                break
            if self.alone is None:  # forked from this process, which may not have the checker loaded (the zygote's)
                self.alone = self._new_pool(1, load_checker=True)
            try:
                outcomes.extend(self.alone.submit(check_files, [(path, config)]).result())
            except BrokenProcessPool:
                self.alone.shutdown(wait=False)
                self.alone = None
                outcomes.append(FileOutcome(path, errors=[FileError(path, _WORKER_DIED)]))
        return outcomes

    def _check_isolated(self, path: str, config: CheckConfig) -> FileOutcome:
        """A file of a serial run, checked in a process of its own (see `_risky`). Ctrl-C or SIGTERM does not
        wait for it, as for a file checked here (`runner.check_in_progress`): the process is killed."""
        try:
            return self._check_alone([(path, config)])[0]
        except BaseException:
            if self.alone is not None:
                _kill_idle_workers(self.alone)
            raise

    def _can_isolate(self) -> bool:
        """Can a file be checked in a process of its own? Forked (Linux): it inherits what is loaded here."""
        return _FORK

    def close(self) -> None:
        """Stop the workers: each ends at once, a write in progress finished first (never cut short).
        Workers started early that never got a file are killed: they would still be loading the checker."""
        if self.pool is not None and not self.futures and self.alone is None:
            _kill_idle_workers(self.pool)
        if self.stop is not None:
            self.stop.set()
        if self.watchdog is not None:  # forked workers end at once (`_wait_for_eof`)
            for end in self.watchdog:
                with contextlib.suppress(OSError):
                    os.close(end)
            self.watchdog = None
        for pool in (self.pool, self.alone):  # `alone` also serves a serial run (`_risky` files)
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self.pool = self.alone = None


def _load_checker() -> None:
    """Import the checker and every rule module (what a worker needs before its first file)."""
    from amp_lint import rules as registry
    from amp_lint.engine import checker  # noqa: F401

    registry.ALL_RULES  # noqa: B018  (imports every rule module)


def load_and_warm_checker() -> None:
    """`_load_checker`, then the warm-up check (`engine.warm_up`): run by the zygote before its workers
    fork, so that they do not each make the caches of a first check."""
    from amp_lint.engine.warm_up import check_warm_up

    _load_checker()
    check_warm_up()


def _risky(raw: bytes) -> bool:
    """Might checking these bytes take enough memory for an out-of-memory abort (`guard.ISOLATE_ABOVE`)?"""
    from amp_lint.parse import guard

    if len(raw) * guard.MEMORY_PER_TOKEN <= guard.ISOLATE_ABOVE:
        return False  # fits even at one token per byte: most files, decided without counting
    return guard.estimated_memory(raw) > guard.ISOLATE_ABOVE


_WORKER_DIED = "not analysed: the process checking this file died (a crash in LibCST's native parser?); file left unchanged"

_STOP = None  # in a worker: the scheduler's stop event


def _ready() -> None:
    """The first task of workers started early: the pool starts its processes at its first task."""


def _kill_idle_workers(pool) -> None:
    if hasattr(pool, "kill"):  # a `ZygotePool`: its workers die with it
        pool.kill()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, AttributeError, ValueError):
            process.kill()


def _start_worker(stop, parent: int, watchdog: Optional[Tuple[int, int]], load_checker: bool = False) -> None:
    """Workers ignore Ctrl-C: the main process stops the run and reports it once (through `stop`).

    And they end when the main process does, however it ends (kill -9 included): they must not go
    on writing fixes, nor hold the output pipes open for a caller that waits for them to close.
    On Linux the kernel kills them when their parent dies (PR_SET_PDEATHSIG); everywhere, a watchdog
    thread waits on a pipe that only the main process holds open (forked workers), or polls the
    parent's pid (other start methods), and ends the worker at once.
    """
    import signal

    global _STOP
    _STOP = stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    if watchdog is not None:
        read_end, write_end = watchdog
        if write_end is not None:  # None: closed already by the zygote the worker forked from
            os.close(write_end)  # this worker's inherited copy: only the main process may keep the pipe open
        threading.Thread(target=_wait_for_eof, args=(read_end,), name="amp-lint-watchdog", daemon=True).start()
    else:
        threading.Thread(target=_poll_parent, args=(parent,), name="amp-lint-watchdog", daemon=True).start()
    if os.getppid() != parent:  # the parent died before any of this was in place
        os._exit(1)
    if load_checker:  # a worker that did not fork from a process with the checker loaded (`start_early`)
        _load_checker()
        gc.freeze()  # loaded for the worker's life: its collector need not scan them between files


def die_with_parent() -> None:
    """Linux: the kernel kills this process when the thread that forked it ends (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no libc to speak of: the watchdog thread does the job
        pass


def _wait_for_eof(read_end: int) -> None:
    """The pipe closes when the main process ends, or stops the run (`Scheduler.close`: Ctrl-C, or the end):
    the worker ends now, not after the file it is checking (LibCST can take many seconds on a big one).
    Files are written under `WRITE_LOCK`: a write in progress is finished first, and none starts after."""
    from amp_lint.files.writing import WRITE_LOCK

    try:
        while os.read(read_end, 1):
            pass
    except OSError:
        pass
    WRITE_LOCK.acquire()
    os._exit(1)


def _poll_parent(parent: int) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def check_files(items: Sequence[Tuple[str, CheckConfig]]) -> List[FileOutcome]:
    """`check_file` for a batch of files, in a worker; it stops between files once the run is stopped."""
    outcomes = []
    for path, config in items:
        if _STOP is not None and _STOP.is_set():
            break
        outcomes.append(runner.check_file(path, config, prefiltered=True))
    return outcomes
