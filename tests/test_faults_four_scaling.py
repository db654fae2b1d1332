"""Issue 45, "cost that grows faster than the input": per-scope work stays linear.

Growth tests (no absolute timings): the analysis of a shape at 2N takes less than 2.5 times its time at N
(the best of a few runs each, in CPU time, to beat a busy machine's noise). A quadratic cost gives 4.
"""

from __future__ import annotations

import functools
import time

import pytest

from amp_lint import rules as registry
from amp_lint.engine.checker import Checker, SourceResult
from amp_lint.parse.gc_pause import no_cyclic_gc
from amp_lint.parse.cst_parse import parse_module

GROWTH_LIMIT = 2.5


def _autocast_blocks(n: int, call: str = "m(x)", in_function: bool = True) -> str:
    indent = "    " if in_function else ""
    lines = ["import torch", ""]
    if in_function:
        lines.append("def forward_many(m, x):")
    for i in range(n):
        lines += [f"{indent}with torch.autocast('cuda'):", f"{indent}    y_{i} = {call}"]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=2)
def _parsed(source: str):
    return parse_module(source)


def _analysis_seconds(source: str, repeats: int = 3) -> float:
    """The best CPU time of the model and the default rules over `source` (parsed once, untimed)."""
    checker = Checker(frozenset(registry.default_codes()))
    module = _parsed(source)
    best = float("inf")
    for _ in range(repeats):
        with no_cyclic_gc():  # as a check runs
            start = time.process_time()
            findings, model = checker._rule_findings(module, source, "many.py", SourceResult(), frozenset())
            best = min(best, time.process_time() - start)
        model.release()
        assert findings == []
    return best


def _growth(make, n: int, repeats: int = 3, attempts: int = 3) -> float:
    """Time at 2n over time at n; measured again (up to `attempts` times) while above the limit: a busy
    machine can slow one measurement down, never a quadratic cost to below the limit."""
    _analysis_seconds(make(n // 4), 1)  # warm up imports and memos
    small, large = make(n), make(2 * n)
    ratio = float("inf")
    for _ in range(attempts):
        ratio = min(ratio, _analysis_seconds(large, repeats) / _analysis_seconds(small, repeats))
        if ratio < GROWTH_LIMIT:
            break
    return ratio


# --- item 7: many autocast blocks or dotted calls in one scope ------------------------------------------


@pytest.mark.parametrize("in_function", [True, False], ids=["in-a-function", "at-module-level"])
def test_many_autocast_blocks_in_one_scope_grow_linearly(in_function):
    # Each `torch.autocast(...)` is a dotted call held back for the summary providers, and each asked
    # whether its scope drives a scaler by reading all the scope's events (`calls.drives_a_scaler`).
    ratio = _growth(lambda n: _autocast_blocks(n, "m(x)", in_function), 1000)
    assert ratio < GROWTH_LIMIT, ratio
