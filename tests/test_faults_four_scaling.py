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


def _growth(make, n: int, repeats: int = 3) -> float:
    """Time at 2n over time at n."""
    _analysis_seconds(make(n // 4), 1)  # warm up imports and memos
    small, large = make(n), make(2 * n)
    return _retried(lambda: _analysis_seconds(large, repeats) / _analysis_seconds(small, repeats))


def _retried(measure, attempts: int = 3) -> float:
    """The least of up to `attempts` measurements of a ratio, measured again only while above the limit
    and below twice the limit: a busy machine can slow one measurement down, never a quadratic cost to
    below the limit."""
    ratio = float("inf")
    for _ in range(attempts):
        ratio = min(ratio, measure())
        if ratio < GROWTH_LIMIT or ratio > 2 * GROWTH_LIMIT:
            break
    return ratio


# --- item 7: many autocast blocks or dotted calls in one scope ------------------------------------------


@pytest.mark.parametrize("in_function", [True, False], ids=["in-a-function", "at-module-level"])
def test_many_autocast_blocks_in_one_scope_grow_linearly(in_function):
    # Each `torch.autocast(...)` is a dotted call held back for the summary providers, and each asked
    # whether its scope drives a scaler by reading all the scope's events (`calls.drives_a_scaler`).
    ratio = _growth(lambda n: _autocast_blocks(n, "m(x)", in_function), 1000)
    assert ratio < GROWTH_LIMIT, ratio


# --- item 9: per-file-ignores, compiled once per settings ------------------------------------------------


def _per_file_ignores_seconds(patterns: int, files: int = 30, repeats: int = 3) -> float:
    from amp_lint.files.settings import RuleSelection, Settings

    all_codes = registry.all_codes()
    pairs = tuple((f"generated/part_{i}/*.py", ("AMP001",)) for i in range(patterns)) + (("!keep_*.py", ("AMP070",)),)
    settings = Settings(per_file_ignores=pairs, root="/project")
    selection = RuleSelection.from_settings(settings, all_codes, registry.default_codes())
    # Every other file lies in a folder that a pattern names.
    paths = [f"/project/generated/part_{i if i % 2 == 0 else patterns + i}/module_{i}.py" for i in range(files)]
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        enabled = [selection.for_path(path, settings, all_codes) for path in paths]
        best = min(best, time.process_time() - start)
    assert "AMP001" not in enabled[0] and "AMP001" in enabled[-1] and "AMP070" not in enabled[0]
    return best


def test_per_file_ignores_cost_does_not_jump_past_a_cache_size():
    # 1,024 patterns fitted a cache of compiled patterns and 1,030 did not: each file compiled each again.
    ratio = _retried(lambda: _per_file_ignores_seconds(1_100) / _per_file_ignores_seconds(550))
    assert ratio < GROWTH_LIMIT, ratio


def test_per_file_ignores_are_compiled_once_per_settings(monkeypatch):
    from amp_lint.files import settings as settings_module

    compiled = []
    real = settings_module.compile_globs
    monkeypatch.setattr(settings_module, "compile_globs", lambda patterns: compiled.append(len(patterns)) or real(patterns))
    _per_file_ignores_seconds(1_100, files=50, repeats=1)
    # One matcher of paths and one of names per rule selector (and per negated pattern), not per file.
    assert len(compiled) <= 4, len(compiled)


# --- item 8: many star imports ------------------------------------------------------------------------


def _star_imports(n: int) -> str:
    stars = [f"from generated_{i} import *" for i in range(n)]
    return "\n".join(["import torch", *stars, "", "def forward(m, x):", "    with torch.autocast('cuda'):", "        return m(x)", ""])


def test_many_star_imports_grow_linearly():
    # Each name read (`generated_i` of each import among them) looked at every star module of the scope.
    ratio = _growth(_star_imports, 4_000)
    assert ratio < GROWTH_LIMIT, ratio
