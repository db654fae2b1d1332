"""Issue 45, "cost that grows faster than the input": per-scope work stays linear.

Growth tests (no absolute timings): the analysis of a shape at 2N takes less than 2.5 times its time at N
(the best of a few runs each, in CPU time, to beat a busy machine's noise). A quadratic cost gives 4.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import pytest

from amp_lint import rules as registry
from amp_lint.engine.checker import Checker, SourceResult
from amp_lint.parse.gc_pause import no_cyclic_gc
from amp_lint.parse.cst_parse import parse_module

GROWTH_LIMIT = 2.5

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import faults_scaling  # noqa: E402  (the shapes the bench measures up to 16,000)


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


def _retried(measure, attempts: int = 5) -> float:
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


# --- items 7 and 8: one training iteration with many events: the bound the size guards cannot foresee ---


from amp_lint.analysis.iteration_limit import MAX_ITERATION_EVENTS  # noqa: E402

_ABOVE_THE_LIMIT = MAX_ITERATION_EVENTS + 100  # a size whose order analysis is skipped


def _scaler_steps(n: int) -> str:
    """N `scaler.step(o_i)` in one training loop (the issue's shape for item 8)."""
    lines = [
        "import torch",
        "",
        "def train(model, data, loss_fn):",
        "    scaler = torch.amp.GradScaler('cuda')",
        "    for x, y in data:",
        "        with torch.autocast('cuda'):",
        "            loss = loss_fn(model(x), y)",
        "        scaler.scale(loss).backward()",
    ]
    lines += [f"        scaler.step(o_{i})" for i in range(n)]
    return "\n".join(lines + ["        scaler.update()"]) + "\n"


def test_many_scaler_steps_in_one_loop_grow_linearly():
    # Each step asked pairwise path questions of every other event of the iteration, and the protocol
    # engine kept states as large as the optimizers before each event: 1,000 steps took 44 s, 2,000 239 s.
    ratio = _growth(_scaler_steps, _ABOVE_THE_LIMIT)
    assert ratio < GROWTH_LIMIT, ratio


def _analysis_peak_bytes(source: str) -> int:
    """The peak memory (tracemalloc) of the model and the default rules over `source` (parsed first)."""
    import tracemalloc

    checker = Checker(frozenset(registry.default_codes()))
    module = _parsed(source)
    tracemalloc.start()
    try:
        findings, model = checker._rule_findings(module, source, "many.py", SourceResult(), frozenset())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    model.release()
    assert findings == []
    return peak


def test_many_scaler_steps_in_one_loop_take_linear_memory():
    # 1.43 GB at 5,000 steps in a 114 KB file: the states before each event held every optimizer.
    _analysis_peak_bytes(_scaler_steps(100))  # the imports and memos of a first analysis are not its growth
    small = _analysis_peak_bytes(_scaler_steps(_ABOVE_THE_LIMIT))
    assert _analysis_peak_bytes(_scaler_steps(2 * _ABOVE_THE_LIMIT)) / small < GROWTH_LIMIT


def _check(source: str, **options):
    return Checker(frozenset(registry.default_codes()), **options).check(source, "many.py")


def test_an_iteration_too_large_to_analyse_is_a_note_at_its_loop():
    result = _check(_scaler_steps(_ABOVE_THE_LIMIT))
    assert result.diagnostics == []
    events, limit = _ABOVE_THE_LIMIT + 4, MAX_ITERATION_EVENTS  # the backward, the update, the loss's calls
    assert [(e.message, e.location.row) for e in result.errors] == [
        (f"not fully analysed: {events:,} events in one training iteration (the limit is {limit:,}); the order rules skipped it", 5)
    ]


def test_a_note_does_not_fail_the_run_and_the_formats_say_what_it_is(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "many.py").write_text(_scaler_steps(_ABOVE_THE_LIMIT))

    def run(*options):
        done = subprocess.run(
            [sys.executable, "-m", "amp_lint", "check", "--no-cache", *options, "many.py"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    concise = run("--output-format", "concise")
    assert concise.returncode == 0, concise.stdout + concise.stderr  # checked, nothing found: as Ruff's warnings
    assert f"many.py:5:5: warning: not fully analysed: {_ABOVE_THE_LIMIT + 4:,} events" in concise.stdout
    assert "All checks passed!" not in concise.stdout  # not all of it was checked
    records = json.loads(run("--output-format", "json").stdout)
    assert [r["code"] for r in records] == ["not-fully-analysed"]
    sarif = json.loads(run("--output-format", "sarif").stdout)
    invocation = sarif["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is True
    assert [n["level"] for n in invocation["toolExecutionNotifications"]] == ["warning"]
    assert run("--output-format", "github").stdout.startswith("::warning file=many.py,line=5,col=5,")
    junit = run("--output-format", "junit").stdout
    assert 'errors="0"' in junit and 'skipped="1"' in junit


def _missing_updates(n: int) -> str:
    """A small loop that steps without `update()` (AMP021), then a loop of N steps without one either."""
    small = ["    for x in data:", "        scaler.scale(model(x)).backward()", "        scaler.step(opt)"]
    large = ["    for x in data:", "        scaler.scale(model(x)).backward()"] + [f"        scaler.step(o_{i})" for i in range(n)]
    return "\n".join(["import torch", "", "def train(model, data, opt):", "    scaler = torch.amp.GradScaler('cuda')"] + small + large) + "\n"


def test_skipping_an_iteration_only_removes_its_own_findings(monkeypatch):
    from amp_lint.analysis import iteration_limit

    source = _missing_updates(30)
    whole = _check(source)
    monkeypatch.setattr(iteration_limit, "MAX_ITERATION_EVENTS", 20)
    capped = _check(source)
    seen = lambda result: [(d.code, d.location.row, d.message) for d in result.diagnostics]  # noqa: E731
    # The large loop's finding is gone, nothing is added, and the small loop is still analysed.
    assert set(seen(capped)) < set(seen(whole))
    assert [row for code, row, _ in seen(capped) if code == "AMP021"] == [7]
    assert [row for code, row, _ in seen(whole) if code == "AMP021"] == [7, 10 + 30 - 1]
    assert [e.location.row for e in capped.errors] == [8]


def test_a_fix_that_makes_an_iteration_too_large_to_analyse_is_not_kept(monkeypatch):
    from amp_lint.analysis import iteration_limit

    source = "\n".join([
        "import torch", "", "def train(model, data, opt):", "    scaler = torch.amp.GradScaler('cuda')",
        "    for x in data:", "        scaler.scale(model(x)).backward()", "        scaler.step(opt)", "",
    ])
    fixed = _check(source, fix=True)
    assert fixed.fixed.get("AMP021") == 1 and "scaler.update()" in fixed.fixed_source
    # The fix adds `scaler.update()` to the iteration: one event more than the limit now allows.
    from amp_lint.analysis.builder import build_model

    (step,) = build_model(_parsed(source)).steps
    monkeypatch.setattr(iteration_limit, "MAX_ITERATION_EVENTS", len(step.events))
    refused = _check(source, fix=True)
    assert refused.fixed_source is None
    assert any("not fixed" in e.message and "too large to analyse" in e.message for e in refused.errors), refused.errors


# --- item 7's neighbours: shapes the iteration limit does not bound ----------------------------------------


def test_many_training_loops_in_one_function_grow_linearly():
    # Path questions walked from each loop to the function's entry, the protocol engine walked every node
    # below each loop, and each loop's events, regions and steppers were found by scanning the function's:
    # 200 loops took 3.7 s, 400 about 13 s.
    ratio = _growth(faults_scaling.loops, 200)
    assert ratio < GROWTH_LIMIT, ratio


def test_autocast_blocks_each_with_a_scaled_backward_grow_linearly():
    # Past the iteration limit the order rules skip the loop, but AMP012 and AMP014 still list the regions
    # feeding each backward: every block's region for every backward, N * N (4.3 GB at 8,000 blocks).
    ratio = _growth(faults_scaling.scaled_blocks, 600)
    assert ratio < GROWTH_LIMIT, ratio
    _analysis_peak_bytes(faults_scaling.scaled_blocks(100))
    small = _analysis_peak_bytes(faults_scaling.scaled_blocks(600))
    assert _analysis_peak_bytes(faults_scaling.scaled_blocks(1200)) / small < GROWTH_LIMIT


def test_the_check_previews_many_fixes_with_a_bounded_number_of_analyses(monkeypatch):
    # A plain check marks a fix `[*]` only if `--fix` would keep it; it tried each fix of an order rule alone,
    # one analysis of the file per fix (17 s at 100 clips). Now the fixes go together, as `--fix` checks a
    # pass, and a fix whose finding the kept ones remove counts as fixable without an analysis of its own.
    analyses = []
    original = Checker._analysed

    def counted(self, *args, **kwargs):
        analyses.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Checker, "_analysed", counted)
    for n in (10, 40):
        analyses.clear()
        result = _check(faults_scaling.clips(n))
        assert [d.code for d in result.diagnostics] == ["AMP030"] * n
        assert all(d.fix is not None for d in result.diagnostics)
        assert len(analyses) <= 3, (n, len(analyses))
    fixed = _check(faults_scaling.clips(40), fix=True)
    assert fixed.fixed == {"AMP030": 40} and fixed.fixed_source.count("scaler.unscale_(opt)") == 1
