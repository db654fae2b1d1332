"""A process pool whose workers fork from a helper process (the *zygote*) rather than from the main one.

A big cold run starts its workers while it is still walking the tree (`Scheduler.start_early`). The
workers need LibCST and the rules, a sixth of a second of CPU to import. Imported by the main process
before it forks them, that sixth of a second stops the walk and leaves the second core idle. Instead the
main process forks the zygote at once (it is small then, and forking it costs milliseconds). The zygote
imports the checker on the second core while the main process walks and prefilters on the first. Then
it starts the real pool, whose workers fork from it with everything loaded.

`ZygotePool` has the part of `ProcessPoolExecutor` that the scheduler uses: `submit` gives a
`concurrent.futures.Future`, and `shutdown`. Tasks go to the zygote through one pipe and results come
back through another. A worker that dies breaks the zygote's pool, and the scheduler sees
`BrokenProcessPool` as it would from its own pool. So does a zygote that dies.

How the processes end:
- At the end of a run the main process closes the watchdog pipe (the workers end at once, as forked
  workers do: `workers._start_worker`) and then the task pipe: the zygote waits for its workers and
  exits, so that their CPU time is counted in the main process's.
- If the main process dies, the kernel kills the zygote (PR_SET_PDEATHSIG) and the workers with it
  (theirs is the zygote). The zygote is used on Linux only, where forking is the start method.
- The zygote ignores Ctrl-C, as the workers do: the main process stops the run and reports it once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Dict, Tuple

_DIED = "the process that starts the workers ended"


class ZygotePool:
    def __init__(self, workers: int, stop, watchdog: Tuple[int, int], prepare: Callable[[], None], start_worker) -> None:
        """Fork the zygote now. It runs `prepare` (imports the checker) and then a pool of `workers`
        processes, each started with `start_worker(stop, zygote_pid, (watchdog read end, None))`."""
        from multiprocessing import get_context

        context = get_context("fork")
        self._tasks_in, self._tasks_out = context.Pipe(duplex=False)
        self._results_in, self._results_out = context.Pipe(duplex=False)
        self._futures: Dict[int, Future] = {}
        self._lock = threading.Lock()
        self._next = 0
        main = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # the zygote
            code = 1
            try:
                self._tasks_out.close()
                self._results_in.close()
                os.close(watchdog[1])  # only the main process may hold the write end
                _serve(self._tasks_in, self._results_out, workers, stop, watchdog[0], main, prepare, start_worker)
                code = 0
            finally:
                os._exit(code)
        self._tasks_in.close()
        self._results_out.close()
        self._reader = threading.Thread(target=self._read_results, name="amp-lint-zygote-results", daemon=True)
        self._reader.start()

    def submit(self, function, *args) -> Future:
        future: Future = Future()
        with self._lock:
            key = self._next
            self._next += 1
            self._futures[key] = future
            try:
                self._tasks_out.send((key, function, args))
            except (OSError, ValueError):  # the zygote is gone
                del self._futures[key]
                future.set_exception(BrokenProcessPool(_DIED))
        return future

    def _read_results(self) -> None:
        while True:
            try:
                key, ok, value = self._results_in.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._futures.pop(key, None)
            if future is not None:
                future.set_result(value) if ok else future.set_exception(value)
        with self._lock:  # the zygote ended: whatever it had not answered will not be
            left, self._futures = list(self._futures.values()), {}
        for future in left:
            if not future.done():
                future.set_exception(BrokenProcessPool(_DIED))

    def kill(self) -> None:
        """End the zygote now; its workers die with it."""
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                self._tasks_out.close()  # the zygote's end of the run: it lets its pool finish and exits
        if wait:
            self._reader.join()
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)


def _serve(tasks, results, workers: int, stop, watchdog_read: int, main: int, prepare, start_worker) -> None:
    from amp_lint.engine import workers as worker_module

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    worker_module.die_with_parent()
    if os.getppid() != main:  # the main process died before any of this was in place
        return
    prepare()
    import gc
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    gc.freeze()  # what is loaded now lives as long as the workers (see `Scheduler._start_pool`)
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("fork"),
        initializer=start_worker,
        initargs=(stop, os.getpid(), (watchdog_read, None)),
    )
    lock = threading.Lock()

    def answer(key: int, future) -> None:
        error = future.exception()
        reply = (key, False, error) if error is not None else (key, True, future.result())
        with lock:
            try:
                results.send(reply)
            except (OSError, ValueError):  # the main process is gone: nothing to answer
                pass
            except Exception as problem:  # a result that will not pickle: say so rather than hang
                results.send((key, False, RuntimeError(f"{type(problem).__name__}: {problem}")))

    pool.submit(int)  # the pool forks its workers at the first task: now, with the checker loaded
    try:
        while True:
            try:
                key, function, args = tasks.recv()
            except (EOFError, OSError):
                break
            try:
                future = pool.submit(function, *args)
            except BrokenProcessPool as error:
                future = Future()
                future.set_exception(error)
            future.add_done_callback(lambda done, key=key: answer(key, done))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        with lock:
            results.close()
