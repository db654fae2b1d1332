"""Starting a child as a terminal would, and reading how it holds SIGINT: the Ctrl-C and --watch tests.

Round five saw those children ignore SIGINT in the full xdist suite only (exit 0 after Ctrl-C, a --watch that never
stopped), though the pytest worker itself never held SIGINT ignored or blocked around any test (conftest.py checks).
Started through `as_from_a_terminal` (a `preexec_fn`, which also makes `subprocess` fork rather than vfork), all of
them take Ctrl-C in the full suite (round six, one run at load 9-16). `sigint_report` is in their failure messages.
"""

import os
import signal
from typing import Dict, List


def as_from_a_terminal() -> None:
    """In the child before exec: SIGINT at its default and not blocked, as a terminal's Ctrl-C finds a program it
    starts. Both an ignored and a blocked SIGINT are inherited across exec from the process that starts it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_bits(pid: int) -> Dict[str, bool]:
    state: Dict[str, bool] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("SigBlk", "SigIgn", "SigCgt"):
                    state[key] = bool(int(value.split()[0], 16) & (1 << (signal.SIGINT - 1)))
    except OSError:
        pass
    return state


def sigint_report(pid: int) -> str:
    """How `pid` and its descendants hold SIGINT (blocked, ignored, caught), for an assertion message."""
    lines: List[str] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        lines.append(f"{current}: {_sigint_bits(current)}")
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as children:
                    pending.extend(int(child) for child in children.read().split())
        except OSError:
            pass
    return "; ".join(lines)

