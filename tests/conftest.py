"""Test isolation shared by every module."""

import signal
import warnings

import pytest


def _sigint_state():
    """(Python's SIGINT handler, SIGINT blocked in this thread, SIGINT ignored by the process at the OS level)."""
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ignored = False
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("SigIgn:"):
                    ignored = bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except OSError:
        pass
    return signal.getsignal(signal.SIGINT), blocked, ignored


@pytest.fixture(autouse=True)
def _sigint_left_as_found(request):
    """Ctrl-C reaches the processes the tests start only while this process leaves SIGINT deliverable: an ignored
    SIGINT (SIG_IGN) is inherited across exec, and so is a blocked one (the signal mask), and a child started with
    either never sees Ctrl-C (`nohup` semantics, which amp-lint rightly respects). A test that leaves SIGINT
    ignored or blocked would make the Ctrl-C tests that run after it in the same worker fail for a
    reason of its own: put it back after each test and say which test did it."""
    before = _sigint_state()
    yield
    after = _sigint_state()
    if after != before:
        handler, blocked, ignored = before
        if after[1] and not blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        if after[0] is not handler or after[2] != ignored:
            signal.signal(signal.SIGINT, handler if handler is not None else signal.default_int_handler)
        warnings.warn(f"{request.node.nodeid} left SIGINT as {after!r} (was {before!r}); put back", stacklevel=1)


# The modules that take longest (end-to-end runs: Ctrl-C on big trees, verify's and conversion's training runs,
# whole-project checks, the pre-commit hooks) go to the workers first: with `--dist loadfile` a long module that
# starts last keeps one worker busy while the other has nothing left to do. Order only: every test still runs.
_LONGEST_FIRST = (
    "test_robustness.py", "test_verify.py", "test_convert.py", "test_project_analysis.py", "test_ci_gate.py",
    "test_daily_use.py", "test_daily_round3.py", "test_properties.py", "test_catalog_v3.py", "test_fixtures.py",
    "test_guard.py", "test_fix_check.py", "test_faults.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
