"""The cyclic garbage collector, paused while one file is parsed and analysed.

Python's cyclic collector runs as objects pile up, and each full pass scans every live object. Parsing
builds hundreds of thousands of small objects (`ast` and LibCST nodes), so it triggers pass after pass
over a heap that only grows: measured on torch's package, a third of LibCST's parse time, and 0.3 s for
the `ast` parse of a 35 kB file once a worker's heap was big. A file's trees hold no cycles worth
collecting before the file is done; the collector runs again between files.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
