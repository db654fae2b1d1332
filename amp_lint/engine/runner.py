"""Run the checker over files: read, prefilter, check in parallel, write fixes, collect a `Report`.

The main process reads every file and applies the prefilter (cheap); only files that can hold a finding
are handed to worker processes, largest first so that one huge file does not stall the rest. Results
come back in a stable order whatever the scheduling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import gc
import hashlib
import os
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import Diagnostic, FileError, Report, diagnostic_from_record, diagnostic_to_record
from amp_lint.parse.gc_pause import no_cyclic_gc

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ProcessPoolExecutor  # imported when the workers start (start-up time)

# A walk that has found this much source starts the workers at once (`Scheduler.start_early`): they load
# the checker while the walk and the prefilter go on, and a run this big nearly always has files for them.
EARLY_START_BYTES = 4_000_000
# Below this much work, forking workers costs more than it saves.
_PARALLEL_MIN_FILES = 4
_PARALLEL_MIN_BYTES = 400_000
# Small files go to the workers in batches of about this many bytes (a file this big goes alone): one
# task per file costs the main process a pickling and a pipe write each, and its feeder thread's wait
# for the GIL while the main thread prefilters.
_BATCH_BYTES = 64_000
_BATCH_FILES = 64
# Deeply nested code overflows Python's default recursion limit in any tree walk; a worker thread with a
# large stack can afford a much higher limit.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 60_000


@dataclass(frozen=True)
class CheckConfig:
    """What a worker needs to check one file (picklable)."""

    enabled: FrozenSet[str]
    fix: bool
    unsafe_fixes: bool
    with_edits: bool
    write: bool  # write fixes back (False for --diff)
    rule_options: Tuple[Tuple[str, object], ...] = ()
    unfixable: FrozenSet[str] = frozenset()  # codes whose findings carry no fix (`unfixable`, `fixable`)


@dataclass
class FileOutcome:
    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)
    errors: List[FileError] = field(default_factory=list)
    fixed: Dict[str, int] = field(default_factory=dict)
    unsafe_fixable: int = 0
    diff: str = ""
    fixed_text: Optional[str] = None  # for stdin
    # Other project files the result depends on, (absolute path, digest): stored with it in the cache.
    dependencies: Tuple[Tuple[str, str], ...] = ()


_CHECKERS: Dict[CheckConfig, object] = {}


def _checker(config: CheckConfig):
    checker = _CHECKERS.get(config)
    if checker is None:
        from amp_lint.engine.checker import Checker

        checker = Checker(
            config.enabled,
            fix=config.fix,
            unsafe_fixes=config.unsafe_fixes,
            with_edits=config.with_edits,
            rule_options=dict(config.rule_options),
            unfixable=config.unfixable,
            project=_project_index(),
        )
        _CHECKERS[config] = checker
    return checker


_PROJECT: List[object] = []


def _project_index():
    """The project index of this process: each checked file adds its source root (`ProjectIndex.add_file`),
    so a run on a few files still follows calls into the project modules they import."""
    if not _PROJECT:
        from amp_lint.analysis.project import ProjectIndex

        _PROJECT.append(ProjectIndex())
    return _PROJECT[0]


_PREFILTERS: Dict[FrozenSet[str], object] = {}


def _prefilter(config: CheckConfig):
    """The prefilter of the enabled rules, from the registry's table: deciding that a file cannot hold a
    finding imports no rule and not LibCST (most files of a pre-commit run are decided so)."""
    prefilter = _PREFILTERS.get(config.enabled)
    if prefilter is None:
        from amp_lint import rules as registry
        from amp_lint.parse.prefilter import Prefilter

        prefilter = _PREFILTERS[config.enabled] = Prefilter(registry.entries(config.enabled))
    return prefilter


def _callers_key(path: str, text: str) -> bytes:
    """What a cached result of `path` depends on through the callers of its functions in other modules
    (AMP013: a scaler built in a function another module calls once per epoch): computed at each lookup,
    because a new file can become a caller. Empty, at once, for a file that never names a GradScaler."""
    if "GradScaler" not in text or path.endswith(".ipynb"):
        return b""
    from amp_lint.analysis.callers import caller_dependencies

    try:
        found = caller_dependencies(Path(path), text)
    except (OSError, RecursionError, ValueError):
        return b""
    return "".join(f"{caller}\0{digest}\n" for caller, digest in found).encode("utf-8", "surrogateescape")


def may_match(text: str, config: CheckConfig) -> bool:
    return bool(config.enabled) and _prefilter(config).may_match(text)


def text_may_match(text: str, config: CheckConfig) -> bool:
    return bool(config.enabled) and _prefilter(config).text_may_match(text)


def bytes_may_match(raw: bytes, config: CheckConfig) -> bool:
    return bool(config.enabled) and _prefilter(config).bytes_may_match(raw)


def check_text(text: str, display_name: str, config: CheckConfig, path: Optional[str] = None) -> FileOutcome:
    """Check source text (a file's or stdin's) in a thread with room for deep recursion; `path`, the
    file's place on disk (None for stdin and notebooks), lets the analysis follow its imports."""
    outcome = FileOutcome(display_name)
    box: dict = {}

    def work() -> None:
        try:
            with no_cyclic_gc():  # the prefilter's `ast` parse too, not only the checker's work
                if not may_match(text, config):
                    return  # what the checker would decide first, decided without loading it
                box["result"] = _checker(config).check(text, display_name, path=path, prefiltered=True)
        except RecursionError:
            box["error"] = "too deeply nested to analyse"
        except Exception as error:  # never a traceback for the user: report and go on
            box["error"] = f"internal error: {type(error).__name__}: {error}"

    _run_with_large_stack(work)
    if "error" in box:
        outcome.errors.append(FileError(display_name, box["error"]))
        return outcome
    if "result" not in box:
        return outcome
    result = box["result"]
    outcome.diagnostics = result.diagnostics
    outcome.errors = result.errors
    outcome.fixed = result.fixed
    outcome.unsafe_fixable = result.unsafe_fixable
    outcome.fixed_text = result.fixed_source
    outcome.dependencies = result.dependencies
    return outcome


class _LargeStackThread:
    """One long-lived thread per process with a large stack, that runs the checks one at a time.

    Starting a thread with a 512 MB stack costs about 15 ms: once per process, not once per file.
    It is a daemon thread: an idle one must not keep the interpreter alive.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()  # a forked worker inherits this object but not its thread
        self.requests: "queue.SimpleQueue" = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="amp-lint-check", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            work, done = self.requests.get()
            try:
                work()
            finally:
                done.set()


_CHECK_THREAD: Optional[_LargeStackThread] = None
_RUNNING: Optional[threading.Event] = None  # set when the check in progress is done


def _check_thread() -> Optional[_LargeStackThread]:
    global _CHECK_THREAD
    if _CHECK_THREAD is None or _CHECK_THREAD.pid != os.getpid():
        try:
            previous_size = threading.stack_size(_STACK_BYTES)
        except (ValueError, RuntimeError):  # the platform refuses: run in the calling thread
            return None
        try:
            _CHECK_THREAD = _LargeStackThread()
        finally:
            threading.stack_size(previous_size)
    return _CHECK_THREAD


def _run_with_large_stack(work: Callable[[], None]) -> None:
    global _RUNNING
    runner = _check_thread()
    if runner is None:
        work()
        return
    previous_limit = sys.getrecursionlimit()
    done = threading.Event()
    try:
        sys.setrecursionlimit(max(previous_limit, _RECURSION_LIMIT))
        _RUNNING = done
        runner.requests.put((work, done))
        try:
            while not done.wait(0.2):  # a timeout, so that Ctrl-C reaches this thread
                pass
        except RuntimeError:
            # Ctrl-C that lands inside `Condition.wait` can make it release a lock it no longer holds
            # ("release unlocked lock", CPython): what happened is the interrupt.
            raise KeyboardInterrupt from None
    finally:
        sys.setrecursionlimit(previous_limit)


def check_in_progress() -> bool:
    """Is the check thread busy (inside LibCST's parser, say)? The CLI then exits without waiting.

    The check thread never writes files (`check_file` writes from the calling thread), so leaving it
    behind loses nothing; letting the interpreter finalize around it would abort the process.
    """
    return _RUNNING is not None and not _RUNNING.is_set()


def check_file(path: str, config: CheckConfig) -> FileOutcome:
    """Read, check and (with --fix) rewrite one file. Runs in a worker process."""
    from amp_lint.files.sources import SourceError, read_source, write_atomic

    try:
        source = read_source(Path(path))
    except SourceError as error:
        return FileOutcome(path, errors=[FileError(path, error.message, getattr(error, "location", None))])
    notebook = None
    text = source.text
    if path.endswith(".ipynb"):
        from amp_lint.files.notebook import Notebook

        try:
            notebook = Notebook.parse(source.text)
        except SourceError as error:
            return FileOutcome(path, errors=[FileError(path, error.message)])
        text = notebook.source
    outcome = check_text(text, path, config, path=None if notebook is not None else path)
    if notebook is not None:
        outcome.diagnostics = [_in_cell(d, notebook) for d in outcome.diagnostics]
        outcome.errors = [_error_in_cell(e, notebook) for e in outcome.errors]
    if outcome.fixed_text is None:
        return outcome
    new_text = outcome.fixed_text
    if notebook is not None:
        try:
            new_text = notebook.updated_json(outcome.fixed_text)
        except SourceError as error:
            outcome.errors.append(FileError(path, f"fixes not written: {error.message}"))
            outcome.fixed = {}
            return outcome
    if not config.write:
        outcome.diff = "".join(
            difflib.unified_diff(
                source.text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
            )
        )
        return outcome
    try:
        write_atomic(Path(path), new_text, source)
    except (SourceError, OSError) as error:
        message = error.message if isinstance(error, SourceError) else (error.strerror or str(error))
        # Nothing was written: report the findings of the file as it is.
        unfixed = check_text(text, path, dataclasses.replace(config, fix=False))
        if notebook is not None:
            unfixed.diagnostics = [_in_cell(d, notebook) for d in unfixed.diagnostics]
        unfixed.errors.append(FileError(path, f"fixes not written: {message}"))
        return unfixed
    return outcome


def _in_cell(diagnostic: Diagnostic, notebook) -> Diagnostic:
    return notebook.in_cell(diagnostic)  # location, end and fix edits relative to the cell


def _error_in_cell(error: FileError, notebook) -> FileError:
    return notebook.error_in_cell(error)


# --- a whole run -------------------------------------------------------------------------------------


@dataclass
class RunPlan:
    """Files to check and, for each, the config that applies to it."""

    files: List[Tuple[str, CheckConfig]]
    errors: List[FileError]


def execute(
    plan: RunPlan, *, jobs: Optional[int], cache=None, progress=None, scheduler: "Optional[Scheduler]" = None
) -> Tuple[Report, List[str]]:
    """Check every planned file; returns the report and the diffs (for --diff). `scheduler`: one made
    before the files were known, whose workers may have started already (`Scheduler.start_early`).

    SIGTERM stops the run as Ctrl-C does (a `KeyboardInterrupt`): the workers finish the file they
    are on, files not started are left alone.
    """
    with _terminate_as_interrupt():
        return _execute(plan, jobs=jobs, cache=cache, scheduler=scheduler)


@contextlib.contextmanager
def _terminate_as_interrupt():
    import signal

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _execute(plan: RunPlan, *, jobs: Optional[int], cache, scheduler: "Optional[Scheduler]") -> Tuple[Report, List[str]]:
    _remove_stale_temporaries(plan)
    report = Report(errors=list(plan.errors))
    outcomes: Dict[str, FileOutcome] = {}
    # Files the prefilter ruled out last time, by content digest: a warm run skips even the prefilter.
    known_negatives = _known_negatives(cache)
    negatives: Dict[str, str] = {}
    scheduler = scheduler if scheduler is not None else Scheduler(jobs)
    try:
        _prefilter_and_schedule(plan, scheduler, report, outcomes, cache, known_negatives, negatives)
    except BaseException:  # Ctrl-C while the prefilter runs: the workers must not go on writing fixes
        scheduler.close()
        raise
    for outcome, raw in scheduler.results():
        outcomes[outcome.path] = outcome
        if cache is not None and raw is not None and not outcome.errors and not outcome.fixed and outcome.fixed_text is None:
            callers = _callers_key(outcome.path, raw.decode("utf-8", errors="replace"))
            cache.put(Path(outcome.path), raw, _payload(outcome), outcome.dependencies, callers)
    if cache is not None and any(known_negatives.get(p) != d for p, d in negatives.items()):
        merged = {p: d for p, d in known_negatives.items() if p not in outcomes}
        merged.update(negatives)
        cache.put(_NEGATIVES_KEY, b"", {"files": merged})
    diffs = []
    for path in sorted(outcomes):
        outcome = outcomes[path]
        report.diagnostics.extend(outcome.diagnostics)
        report.errors.extend(_unique(outcome.errors))
        if outcome.fixed:
            report.fixed[path] = outcome.fixed
        report.unsafe_fixable += outcome.unsafe_fixable
        if outcome.diff:
            diffs.append(outcome.diff)
    report.sort()
    return report, diffs


def _remove_stale_temporaries(plan: RunPlan) -> None:
    """A run that writes fixes first removes what a killed one left: its temporary files (see
    `amp_lint.files.sources.remove_stale_temporaries`), in the folders of the files it may write."""
    folders = {os.path.dirname(os.path.abspath(path)) for path, config in plan.files if config.write and config.fix}
    if not folders:
        return
    import time

    from amp_lint.files.sources import remove_stale_temporaries

    started = time.time()
    for folder in sorted(folders):
        remove_stale_temporaries(folder, started)


def _prefilter_and_schedule(plan, scheduler, report, outcomes, cache, known_negatives, negatives) -> None:
    """Read each file, rule out what cannot hold a finding (or is cached), and schedule the rest.

    Largest first: the files that take longest start first, and the workers are busy with them while
    the prefilter still reads the small ones.
    """
    from amp_lint.files.sources import SourceError, read_bytes

    for path, config in sorted(plan.files, key=lambda item: -_size(item[0])):
        report.files_checked += 1
        try:
            # Non-blocking, regular files only, size-limited: a FIFO or a device must not hang the run.
            raw = read_bytes(path)
        except SourceError:
            raw = None  # the worker reports it properly
        if raw is not None and b"\0" not in raw:
            digest = hashlib.blake2b(raw, digest_size=16).hexdigest() if cache is not None else None
            if digest is not None and known_negatives.get(path) == digest and not config.fix:
                negatives[path] = digest
                continue
            notebook = path.endswith(".ipynb")
            text = raw.decode("utf-8", errors="replace") if notebook or bytes_may_match(raw, config) else None
            if not notebook and (text is None or not text_may_match(text, config)):
                if digest is not None:
                    negatives[path] = digest
                continue
            if cache is not None and not config.fix:
                hit = cache.get(Path(path), raw, _callers_key(path, text))
                cached = _outcome_from_payload(path, hit) if hit is not None else None
                if cached is not None:
                    outcomes[path] = cached
                    continue
        scheduler.add(path, config, len(raw) if raw is not None else 0, raw)


# The cache entry that lists files the prefilter ruled out (one entry, replaced atomically).
_NEGATIVES_KEY = Path("<files that cannot hold a finding>")


def _unique(errors: Sequence[FileError]) -> List[FileError]:
    seen, out = set(), []
    for error in errors:
        if error not in seen:
            seen.add(error)
            out.append(error)
    return out


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


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
        self.stop = None  # set on Ctrl-C: the workers finish the file they are on and take no other
        self.context = None
        self.alone: "Optional[ProcessPoolExecutor]" = None  # one worker, to recheck a dead worker's files one by one
        self.watchdog: Optional[Tuple[int, int]] = None  # the workers' lifeline pipe (see `_start_worker`)

    def start_early(self) -> None:
        """Start the workers now, before the files are known: a walk that has found many bytes of source
        calls this, and the workers load the checker (LibCST and the rules, a third of a second) on the
        second core while this process goes on listing and prefiltering files. Once they are started,
        every file the prefilter keeps goes to them. Workers that never get a file are killed at `close`."""
        if self.pool is not None or self.workers < 2:
            return
        gc.freeze()  # see `_start_pool`
        self.pool = self._new_pool(self.workers, load_checker=True)
        self.pool.submit(_ready)  # the pool forks its workers at the first task

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
        from amp_lint import rules as registry
        from amp_lint.engine import checker  # noqa: F401

        registry.ALL_RULES  # noqa: B018  (imports every rule module)
        # What is loaded now lives as long as the workers: their cyclic collector need never scan it, and
        # its memory pages stay shared with this process instead of being copied as the collector marks them.
        gc.freeze()
        self.pool = self._new_pool(self.workers)
        waiting, self.waiting = self.waiting, []
        for item in waiting:  # largest first: each of the first files is a batch of its own
            self._batch(item)

    def _new_pool(self, workers: int, load_checker: bool = False) -> "ProcessPoolExecutor":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self.context is None:
            fork = sys.platform.startswith("linux")
            self.context = multiprocessing.get_context("fork") if fork else multiprocessing.get_context()
            self.stop = self.context.Event()
            if fork:  # forked workers inherit the pipe's read end; the main process alone holds the write end
                self.watchdog = os.pipe()  # (read end, write end); see `_start_worker`
            else:
                self.watchdog = None
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=self.context,
            initializer=_start_worker,
            initargs=(self.stop, os.getpid(), self.watchdog, load_checker),
        )

    def results(self):
        """(outcome, raw bytes) per file; on Ctrl-C, files not started yet are left alone."""
        try:
            for path, config, _, raw in self.waiting:
                yield check_file(path, config), raw
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
            if self.stop.is_set():
                break
            if self.alone is None:
                self.alone = self._new_pool(1)
            try:
                outcomes.extend(self.alone.submit(check_files, [(path, config)]).result())
            except BrokenProcessPool:
                self.alone.shutdown(wait=False)
                self.alone = None
                outcomes.append(FileOutcome(path, errors=[FileError(path, _WORKER_DIED)]))
        return outcomes

    def close(self) -> None:
        """Stop the workers: the file each is on is finished (a write is never cut short), the rest dropped.
        Workers started early that never got a file are killed: they would still be loading the checker."""
        if self.pool is not None and not self.futures and self.alone is None:
            _kill_idle_workers(self.pool)
        if self.pool is not None:
            self.stop.set()
            for pool in (self.pool, self.alone):
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
            self.pool = self.alone = None
        if self.watchdog is not None:
            for end in self.watchdog:
                with contextlib.suppress(OSError):
                    os.close(end)
            self.watchdog = None


_WORKER_DIED = "not analysed: the process checking this file died (a crash in LibCST's native parser?); file left unchanged"

_STOP = None  # in a worker: the scheduler's stop event


def _ready() -> None:
    """The first task of workers started early: the pool starts its processes at its first task."""


def _kill_idle_workers(pool: "ProcessPoolExecutor") -> None:
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
    _die_with_parent(parent)
    if watchdog is not None:
        read_end, write_end = watchdog
        os.close(write_end)  # this worker's inherited copy: only the main process may keep the pipe open
        threading.Thread(target=_wait_for_eof, args=(read_end,), name="amp-lint-watchdog", daemon=True).start()
    else:
        threading.Thread(target=_poll_parent, args=(parent,), name="amp-lint-watchdog", daemon=True).start()
    if os.getppid() != parent:  # the parent died before any of this was in place
        os._exit(1)
    if load_checker:  # forked before the main process loaded it (`Scheduler.start_early`)
        from amp_lint import rules as registry
        from amp_lint.engine import checker  # noqa: F401

        registry.ALL_RULES  # noqa: B018  (imports every rule module)
        gc.freeze()  # loaded for the worker's life: its collector need not scan them between files


def _die_with_parent(parent: int) -> None:
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
    try:
        while os.read(read_end, 1):
            pass
    except OSError:
        pass
    os._exit(1)  # the main process is gone: end now, whatever this worker was doing


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
        outcomes.append(check_file(path, config))
    return outcomes


def _payload(outcome: FileOutcome) -> dict:
    return {"diagnostics": [diagnostic_to_record(d) for d in outcome.diagnostics], "unsafe_fixable": outcome.unsafe_fixable}


def _outcome_from_payload(path: str, payload: dict) -> Optional[FileOutcome]:
    """The outcome a cache entry stored, or None when the entry is not one we wrote (a miss).

    The entry is keyed by the absolute path, so another run may have named the file differently
    (`pkg/train.py`, then `train.py` from inside pkg/): findings name the file as this run does.

    A cache file is outside our control (a disk error, a hand edit, another version's bug): what it
    holds is checked field by field, so that a renamed key or a number where a list belongs is a miss
    instead of a crash in this run and every later one.
    """
    records = payload.get("diagnostics")
    unsafe_fixable = payload.get("unsafe_fixable")
    if set(payload) != {"diagnostics", "unsafe_fixable"} or not isinstance(records, list) or not _is_count(unsafe_fixable):
        return None
    diagnostics = []
    for record in records:
        diagnostic = _diagnostic_from_cache(record)
        if diagnostic is None:
            return None
        diagnostics.append(dataclasses.replace(diagnostic, filename=path))
    return FileOutcome(path, diagnostics=diagnostics, unsafe_fixable=unsafe_fixable)


_RECORD_STRINGS = ("code", "message", "filename", "rule_name", "source_line", "context")


def _diagnostic_from_cache(record: object) -> Optional[Diagnostic]:
    if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in _RECORD_STRINGS):
        return None
    positions = [record.get("location"), record.get("end_location")]
    fix = record.get("fix")
    if fix is not None:
        edits = fix.get("edits") if isinstance(fix, dict) else None
        if not isinstance(edits, list) or not isinstance(fix.get("message"), str):
            return None
        for edit in edits:
            if not isinstance(edit, list) or len(edit) != 5 or not isinstance(edit[4], str):
                return None
            positions += [edit[0:2], edit[2:4]]
    if not all(isinstance(p, list) and len(p) == 2 and all(_is_count(n) for n in p) for p in positions):
        return None
    if record.get("cell") is not None and not _is_count(record["cell"]):
        return None
    try:
        diagnostic = diagnostic_from_record(record)
    except (KeyError, TypeError, ValueError):  # a severity, confidence or applicability we do not know
        return None
    # Exactly what we write, no key more or less: anything else is not our entry.
    return diagnostic if diagnostic_to_record(diagnostic) == record else None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _known_negatives(cache) -> Dict[str, str]:
    """The cache's list of files the prefilter ruled out ({path: digest}); empty when it does not validate."""
    entry = cache.get(_NEGATIVES_KEY, b"") if cache is not None else None
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()):
        return {}
    return files
