"""Run training scripts for the tests without paying for `import torch` each time.

A test that runs a fixed or converted training script used to start a new interpreter for it, and importing
torch there cost 2-4 s of the suite per script. Here one server process per test worker imports torch once;
each script runs in a fork of it, made before any tensor work (so no thread pool is forked), in the script's
folder, with its arguments, as `__main__` (or `python -m module`), its standard output and error to files.
What the script does is what a new interpreter would do; only the import of torch is shared.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Optional, Sequence

_SERVER = r"""
import json, os, runpy, sys, traceback
import torch, torch.nn, torch.optim  # noqa: F401  (the point of the server)

replies = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    job = json.loads(line)
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.chdir(job["cwd"])
            for fd, name in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdin = open(os.devnull)
            sys.argv = [job["target"], *job["args"]]
            if job["module"]:
                sys.path[0] = os.getcwd()
                run = lambda: runpy.run_module(job["target"], run_name="__main__", alter_sys=True)
            else:
                sys.path[0] = os.path.dirname(os.path.abspath(job["target"]))
                run = lambda: runpy.run_path(job["target"], run_name="__main__")
            try:
                run()
                code = 0
            except SystemExit as stop:
                if stop.code is None or isinstance(stop.code, int):
                    code = stop.code or 0
                else:
                    print(stop.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
    _, status = os.waitpid(child, 0)
    replies.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    replies.flush()
"""

# Every script runs with these (the server's environment is fixed when it starts).
ENVIRONMENT = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


class _Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **ENVIRONMENT},
            start_new_session=True,
        )
        self.lock = threading.Lock()

    def run(self, target: str, cwd: Path, args: Sequence[str], module: bool, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory() as folder, self.lock:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            job = {"target": target, "cwd": str(cwd), "args": list(args), "module": module, "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            reply = self.process.stdout.readline() if ready else ""
            if not reply:
                self.close()
                raise subprocess.TimeoutExpired(target, timeout) if not ready else RuntimeError("the script server died")
            read = lambda path: path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            command = [sys.executable, *(["-m"] if module else []), target, *args]
            return subprocess.CompletedProcess(command, json.loads(reply), read(out), read(err))

    def close(self) -> None:
        if self.process.poll() is None:
            import signal

            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except OSError:
                pass
            self.process.wait()


_server: Optional[_Server] = None


def run_script(script, cwd=None, args: Sequence[str] = (), timeout: float = 300) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS...` in `cwd` (the script's folder by default), as the tests' `subprocess.run` did."""
    return _run(str(script), Path(cwd) if cwd is not None else Path(script).parent, args, False, timeout)


def run_module(module: str, cwd, args: Sequence[str] = (), timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS...` in `cwd`."""
    return _run(module, Path(cwd), args, True, timeout)


def _run(target: str, cwd: Path, args: Sequence[str], module: bool, timeout: float) -> subprocess.CompletedProcess:
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = _Server()
        atexit.register(_server.close)
    return _server.run(target, cwd, args, module, timeout)
