"""Test isolation shared by every module."""

import signal
import warnings

import pytest


@pytest.fixture(autouse=True, scope="module")
def _sigint_left_as_found(request):
    """Ctrl-C reaches the processes the tests start only while this process leaves SIGINT at its default: an
    ignored SIGINT (SIG_IGN) is inherited across exec, and a Python child started with it keeps ignoring Ctrl-C
    (`nohup` semantics, which amp-lint rightly respects). A module that leaves it ignored would make the Ctrl-C
    tests of whichever module runs next in the same worker fail for a reason of its own: put it back and say
    which module did it."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before if before is not None else signal.default_int_handler)
        warnings.warn(f"{request.module.__name__} left SIGINT as {after!r} (was {before!r}); put back", stacklevel=1)
