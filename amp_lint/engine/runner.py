"""Run the checker over files: read, prefilter, check in parallel, write fixes, collect a `Report`.

The main process reads every file and applies the prefilter (cheap); only files that can hold a finding
are handed to worker processes, largest first so that one huge file does not stall the rest. Results
come back in a stable order whatever the scheduling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import Diagnostic, FileError, Report
from amp_lint.engine import stored
from amp_lint.engine.stored import NEGATIVES_KEY as _NEGATIVES_KEY  # noqa: F401  (tests name it here)
from amp_lint.parse.gc_pause import no_cyclic_gc

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.engine.workers import Scheduler

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
    not_written: str = ""  # why this file is checked but never fixed (a symlink out of the checked paths), or ""


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
    # A fix that changes other files too: (path, text as read, new text) of this file and of each of them,
    # written (or shown by --diff) all or none by the main process (`amp_lint.engine.multi_file`).
    file_group: Tuple[Tuple[str, str, str], ...] = ()


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
    prefilter = _PREFILTER_OF_CONFIG.get(config)  # asked once per file: a dictionary look-up
    if prefilter is not None:
        return prefilter
    from amp_lint import rules as registry

    codes = config.enabled
    if not dict(config.rule_options).get("preview"):  # a preview rule does not run: its words gate nothing
        codes = codes - frozenset(registry.preview_codes())
    prefilter = _PREFILTERS.get(codes)
    if prefilter is None:
        from amp_lint.parse.prefilter import Prefilter

        prefilter = _PREFILTERS[codes] = Prefilter(registry.entries(codes))
    _PREFILTER_OF_CONFIG[config] = prefilter
    return prefilter


_PREFILTER_OF_CONFIG: Dict[CheckConfig, object] = {}


def _callers_key(path: str, text: str) -> bytes:
    """What a cached result of `path` depends on through the callers of its functions in other modules
    (AMP013: a scaler built in a function another module calls once per epoch): computed at each lookup,
    because a new file can become a caller. Empty, at once, for a file that never names a GradScaler."""
    if "GradScaler" not in text or path.endswith(".ipynb"):
        return b""
    remember_caller_scans()
    from amp_lint.analysis.callers import caller_dependencies

    try:
        found = caller_dependencies(Path(path), text)
    except (OSError, RecursionError, ValueError):
        return b""
    return "".join(f"{caller}\0{digest}\n" for caller, digest in found).encode("utf-8", "surrogateescape")


def may_match(text: str, config: CheckConfig, first_step_passed: bool = False) -> bool:
    return bool(config.enabled) and _prefilter(config).may_match(text, first_step_passed=first_step_passed)


def text_may_match(text: str, config: CheckConfig, gate_words: Optional[FrozenSet[str]] = None) -> bool:
    return bool(config.enabled) and _prefilter(config).text_may_match(text, gate_words)


def forget_parsed() -> None:
    """Drop the `ast` tree of the file just checked, kept for reuse while it was (`python_ast.parse`): freed
    here, by refcounting, rather than scanned by the cyclic collector when it runs again after the file
    (each collection scanned the whole kept tree: a tenth of the workers' time on torch's package)."""
    from amp_lint.parse import python_ast

    python_ast.forget()


def check_text(
    text: str, display_name: str, config: CheckConfig, path: Optional[str] = None, first_step_passed: bool = False
) -> FileOutcome:
    """Check source text (a file's or stdin's) in a thread with room for deep recursion; `path`, the
    file's place on disk (None for stdin and notebooks), lets the analysis follow its imports.
    `first_step_passed`: the main process ran the prefilter's first step on this text (`text_may_match`)."""
    outcome = FileOutcome(display_name)
    box: dict = {}

    def work() -> None:
        try:
            with no_cyclic_gc():  # the prefilter's `ast` parse too, not only the checker's work
                if not first_step_passed and not text_may_match(text, config):
                    return  # most files: the first step alone decides
                # Before any parse, `ast`'s included: memory follows tokens, not bytes.
                from amp_lint.parse.guard import check_memory

                refusal = check_memory(text, display_name)
                if refusal is not None:
                    box["refusal"] = refusal
                    return
                if not may_match(text, config, first_step_passed=True):  # the first step: just above
                    forget_parsed()
                    return  # what the checker would decide first, decided without loading it
                remember_caller_scans()
                box["result"] = _checker(config).check(text, display_name, path=path, prefiltered=True)
                forget_parsed()
        except RecursionError:
            box["error"] = "too deeply nested to analyse"
        except Exception as error:  # never a traceback for the user: report and go on
            box["error"] = f"internal error: {type(error).__name__}: {error}"

    _run_with_large_stack(work)
    if "refusal" in box:
        outcome.errors.append(box["refusal"])
        return outcome
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
    outcome.file_group = tuple((e.path, e.before, e.after) for e in result.other_files)
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


def check_file(path: str, config: CheckConfig, prefiltered: bool = False) -> FileOutcome:
    """Read, check and (with --fix) rewrite one file. Runs in a worker process. `prefiltered`: the main
    process let the file through the prefilter's first step (`_prefilter_and_schedule`), which for a
    notebook ran on its JSON, not on its cells' source."""
    from amp_lint.files.sources import SourceError, read_source

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
    outcome = check_text(
        text, path, config, path=None if notebook is not None else path, first_step_passed=prefiltered and notebook is None
    )
    if notebook is not None:
        outcome.diagnostics = [_in_cell(d, notebook) for d in outcome.diagnostics]
        outcome.errors = [_error_in_cell(e, notebook) for e in outcome.errors]
    if outcome.fixed_text is None:
        return outcome
    if config.not_written:
        return _unfixed(text, path, config, notebook, f"not fixed: {config.not_written}")
    if outcome.file_group:  # with other files: written or shown together, by the main process
        outcome.file_group = ((os.path.abspath(path), text, outcome.fixed_text),) + outcome.file_group
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
        from amp_lint.fixes.unified_diff import unified_diff  # only --diff needs it: not imported at start-up

        outcome.diff = unified_diff(source.text, new_text, f"a/{path}", f"b/{path}")
        return outcome
    from amp_lint.files.sources import write_atomic  # only a run that writes loads the writing code

    try:
        write_atomic(Path(path), new_text, source)
    except (SourceError, OSError) as error:
        message = error.message if isinstance(error, SourceError) else (error.strerror or str(error))
        return _unfixed(text, path, config, notebook, f"fixes not written: {message}")
    return outcome


def _unfixed(text: str, path: str, config: CheckConfig, notebook, why: str) -> FileOutcome:
    """Nothing was written: the findings of the file as it is, and why it was not fixed."""
    unfixed = check_text(text, path, dataclasses.replace(config, fix=False))
    if notebook is not None:
        unfixed.diagnostics = [_in_cell(d, notebook) for d in unfixed.diagnostics]
    unfixed.errors.append(FileError(path, why))
    return unfixed


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
    # The `stat` of each file as the walk found it (`discover(stats=)`): not asked again. Optional.
    stats: Dict[str, os.stat_result] = field(default_factory=dict)


def execute(
    plan: RunPlan, *, jobs: Optional[int], cache=None, progress=None, scheduler: "Optional[Scheduler]" = None
) -> Tuple[Report, List[str]]:
    """Check every planned file; returns the report and the diffs (for --diff). `scheduler`: one made
    before the files were known, whose workers may have started already (`Scheduler.start_early`).

    SIGTERM stops the run as Ctrl-C does (a `KeyboardInterrupt`): the workers end at once (a write in
    progress is finished first), files not yet written are left alone.
    """
    global _RUN_SCOPE
    outer = _RUN_SCOPE
    with terminate_as_interrupt(), contextlib.ExitStack() as scope:
        _RUN_SCOPE = [scope, False]
        try:
            return _execute(plan, jobs=jobs, cache=cache, scheduler=scheduler)
        finally:
            _RUN_SCOPE = outer


# The run in progress: its exit stack, and whether it remembers the caller searches yet (`remember_caller_scans`).
_RUN_SCOPE: Optional[list] = None


def remember_caller_scans() -> None:
    """Within the run in progress, each package's caller search set is walked once (`callers.remembered_scans`).
    Entered when a caller search is first needed (or before workers fork), not at the start of every run:
    importing the analysis costs a warm run or a pre-commit run that never searches more than the search."""
    if _RUN_SCOPE is None or _RUN_SCOPE[1]:
        return
    from amp_lint.analysis.callers import remembered_scans

    _RUN_SCOPE[0].enter_context(remembered_scans())
    _RUN_SCOPE[1] = True


class Terminated(KeyboardInterrupt):
    """SIGTERM during a run: stopped as Ctrl-C stops it, and the process exits 143 (128 + 15), the convention."""

    exit_code = 143


@contextlib.contextmanager
def terminate_as_interrupt():
    import signal

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        yield
        return

    def interrupt(signum, frame):
        raise Terminated

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
    known_negatives = stored.known_negatives(cache)
    negatives: Dict[str, str] = {}
    # Files whose result is stored, by content digest: a warm run finds their entry without reading them.
    known = stored.Known(known_negatives, stored.known_files(cache, stored.POSITIVES_KEY), {}, {})
    if scheduler is None:
        from amp_lint.engine.workers import Scheduler

        scheduler = Scheduler(jobs)
    try:
        _prefilter_and_schedule(plan, scheduler, report, outcomes, cache, known, negatives)
    except BaseException:  # Ctrl-C while the prefilter runs: the workers must not go on writing fixes
        scheduler.close()
        raise
    for outcome, raw in scheduler.results():
        outcomes[outcome.path] = outcome
        if cache is not None and raw is not None and not outcome.errors and not outcome.fixed and outcome.fixed_text is None:
            callers = _callers_key(outcome.path, raw.decode("utf-8", errors="replace"))
            cache.put(Path(outcome.path), raw, stored.to_payload(outcome), outcome.dependencies, callers)
            known.remember(outcome.path, raw, callers)
    if any(o.file_group or any(d.fix is not None and d.fix.files for d in o.diagnostics) for o in outcomes.values()):
        from amp_lint.engine.multi_file import settle_multi_file_fixes  # fixes that change several files

        settle_multi_file_fixes(outcomes, dict(plan.files), check_file)
    if cache is not None and any(known_negatives.get(p) != d for p, d in negatives.items()):
        cache.put(stored.NEGATIVES_KEY, b"", {"files": stored.merged_negatives(known_negatives, negatives, outcomes)})
    if cache is not None and any(known.positives.get(p) != d for p, d in known.found.items()):
        planned = {path for path, _ in plan.files}
        kept = {p: d for p, d in known.positives.items() if p not in planned and os.path.isfile(p)}
        kept.update(known.found)
        cache.put(stored.POSITIVES_KEY, b"", {"files": dict(list(kept.items())[: stored.NEGATIVES_LIMIT])})
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


def _prefilter_and_schedule(plan, scheduler, report, outcomes, cache, known_files: "stored.Known", negatives) -> None:
    """Read each file, rule out what cannot hold a finding (or is cached), and schedule the rest.

    Largest first: the files that take longest start first, and the workers are busy with them while
    the prefilter still reads the small ones.
    """
    from amp_lint.files.sources import SourceError, read_bytes

    known_negatives = known_files.negatives
    # One `stat` per file (the walk's, where it made one): the order, and the warm run's key.
    walked = plan.stats
    infos = {path: walked.get(path) or stored.stat_of(path) for path, _ in plan.files}
    known_files.signatures = {path: stored.signature(info) for path, info in infos.items()}
    for path, config in sorted(plan.files, key=lambda item: -(infos[item[0]].st_size if infos[item[0]] else 0)):
        report.files_checked += 1
        # A warm run: a file the prefilter ruled out, not changed since (the same size, times and inode,
        # as Ruff's cache asks), is not read again nor hashed (most of a package's files).
        known = known_negatives.get(path) if cache is not None and not config.fix else None
        signature = known_files.signatures[path]
        if known is not None and signature is not None and known.endswith(signature):
            negatives[path] = known
            continue
        if cache is not None and not config.fix and signature is not None:
            # A file whose result is stored, not changed since: its entry is found by the digest recorded
            # with its `stat`, without reading it (only files whose key needs nothing but their content).
            recorded = known_files.positives.get(path)
            if recorded is not None and recorded.endswith(signature):
                hit = cache.get(Path(path), b"", digest_of_content=recorded.split("@")[0])
                cached = _outcome_from_payload(path, hit) if hit is not None else None
                if cached is not None:
                    outcomes[path] = cached
                    known_files.found[path] = recorded
                    continue
        try:
            # Non-blocking, regular files only, size-limited: a FIFO or a device must not hang the run.
            raw = read_bytes(path)
        except SourceError:
            raw = None  # the worker reports it properly
        if raw is not None and b"\0" not in raw:
            digest = _blake2b(raw) if cache is not None else None
            if digest is not None and signature is not None:
                digest += signature  # what `negatives` keeps: the content's digest, then the file's stat
            if digest is not None and known is not None and known.split("@")[0] == digest.split("@")[0]:
                negatives[path] = digest  # the same bytes (a `touch`, a checkout): ruled out again
                continue
            notebook = path.endswith(".ipynb")
            gate_words = None if notebook or not config.enabled else _prefilter(config).gate_words_in(raw)
            text = raw.decode("utf-8", errors="replace") if notebook or gate_words is None or gate_words else None
            if not notebook and (text is None or not text_may_match(text, config, gate_words)):
                if digest is not None:
                    negatives[path] = digest
                continue
            if cache is not None and not config.fix:
                callers = _callers_key(path, text)
                hit = cache.get(Path(path), raw, callers)
                cached = _outcome_from_payload(path, hit) if hit is not None else None
                if cached is not None:
                    outcomes[path] = cached
                    known_files.remember(path, raw, callers)
                    continue
        scheduler.add(path, config, len(raw) if raw is not None else 0, raw)


def _unique(errors: Sequence[FileError]) -> List[FileError]:
    seen, out = set(), []
    for error in errors:
        if error not in seen:
            seen.add(error)
            out.append(error)
    return out


def _blake2b(raw: bytes) -> str:
    from amp_lint.files.cache import content_digest  # only a run with a cache needs hashlib

    return content_digest(raw)


def _outcome_from_payload(path: str, payload: dict) -> Optional[FileOutcome]:
    """The outcome a cache entry stored (`stored.stored_outcome`), or None for a miss."""
    found = stored.stored_outcome(path, payload)
    return None if found is None else FileOutcome(path, diagnostics=found[0], unsafe_fixable=found[1])
