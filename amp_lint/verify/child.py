"""One bootstrap child of ``amp-lint verify``, run to its end and no further: in a process group of its own, read in
chunks, under a time limit.

* The child starts a new session (so a new process group). A training script may leave a process behind that
  still holds the output pipe (``subprocess.Popen(["sleep", "400"])``, a detached logger, a TensorBoard): reading
  stops once the child itself has exited (after a short drain), and the whole group is killed, so nothing the run
  started outlives it and verify never waits for a grandchild.
* The output is read in chunks of :data:`CHUNK_BYTES`, never a line at a time: a line of a gigabyte costs no more
  than :data:`MAX_LINE_CHARS` characters; only the last :data:`TAIL_LINES` lines are kept (for a crash without a
  traceback). Progress lines are handed to ``on_progress`` as they come.
* ``timeout`` (seconds, None: no limit) bounds the child's whole run: past it the group is killed and the run is
  reported as timed out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Seconds one run (one side of a script, every seed) may take by default before it is stopped as "timed out".
DEFAULT_TIMEOUT = 1800.0
#: Bytes read from the child's output at a time.
CHUNK_BYTES = 1 << 16
#: Characters kept of one output line (a longer one keeps its start and says how much was left out).
MAX_LINE_CHARS = 2000
#: Lines of the child's own output kept for a crash that left no traceback.
TAIL_LINES = 10
#: Seconds the output is still read after the child exited (what it wrote last is usually already in the pipe).
DRAIN_SECONDS = 1.0


@dataclass
class ChildRun:
    """How a child ended: its exit code (None when it was killed at the time limit), the last lines it wrote."""

    returncode: int | None
    timed_out: bool
    seconds: float
    output_tail: list[str] = field(default_factory=list)


class _LineTail:
    """Splits the byte stream into lines, keeps the last :data:`TAIL_LINES` of them (each at most
    :data:`MAX_LINE_CHARS` characters) that ``on_line`` (called with every complete line) says to keep."""

    def __init__(self, on_line: Callable[[str], bool]) -> None:
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self._on_line = on_line
        self._partial = bytearray()  # the start of the line being read, at most MAX_LINE_CHARS * 4 bytes
        self._dropped = 0  # bytes of that line left out

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = MAX_LINE_CHARS * 4 - len(self._partial)  # a character is at most 4 bytes of UTF-8
            self._partial += piece[: max(room, 0)]
            self._dropped += max(len(piece) - max(room, 0), 0)
            if end < 0:
                return
            self._end_line()
            start = end + 1

    def close(self) -> None:
        if self._partial or self._dropped:
            self._end_line()

    def _end_line(self) -> None:
        text = self._partial.decode("utf-8", errors="replace").rstrip("\r")
        if len(text) > MAX_LINE_CHARS or self._dropped:
            text = f"{text[:MAX_LINE_CHARS]}... ({self._dropped + len(self._partial):,} bytes in all)"
        self._partial, self._dropped = bytearray(), 0
        if self._on_line(text):
            self.lines.append(text)


def run_child(
    command: Sequence[str],
    *,
    env: dict[str, str],
    cwd: str | os.PathLike[str],
    timeout: float | None,
    on_line: Callable[[str], bool],
) -> ChildRun:
    """Run ``command`` with stdout and stderr on one pipe, hand each output line to ``on_line`` (which returns
    whether to keep it in the run's output tail), and stop at its
    exit or at ``timeout`` seconds, whichever comes first; what it started is killed with it."""
    started = time.monotonic()
    child = subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=os.name == "posix",
    )
    assert child.stdout is not None
    tail = _LineTail(on_line)
    reader = threading.Thread(target=_read_all, args=(child.stdout, tail), daemon=True, name="amp-lint-verify-output")
    reader.start()
    timed_out = False
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also on Ctrl-C: the run's processes go with it
        _kill_group(child)
    child.wait()
    # The pipe ends when every process holding it has gone; one in a session of its own may hold it for ever:
    # the reader is then left behind (a daemon thread, which closes the pipe when it ends).
    reader.join(DRAIN_SECONDS)
    lines = list(tail.lines)
    return ChildRun(None if timed_out else child.returncode, timed_out, time.monotonic() - started, lines)


def _read_all(stream, tail: _LineTail) -> None:
    try:
        while True:
            chunk = os.read(stream.fileno(), CHUNK_BYTES)
            if not chunk:
                break
            tail.feed(chunk)
        tail.close()
    except (OSError, ValueError):  # the pipe was closed under us
        pass
    finally:
        stream.close()


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child's process group (the child, and whatever it started that stayed in its group)."""
    if os.name == "posix":
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    elif child.poll() is None:
        child.kill()
