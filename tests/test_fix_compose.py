"""Fixes compose: any subset of the rules selected gives code that is right for those rules, parses, runs,
and a second --fix leaves alone; two findings that want the same statement get it once."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amp_lint.diagnostics import Applicability
from amp_lint.engine.checker import Checker
from amp_lint.fixes.apply import apply_fixes, select_compatible
from amp_lint.fixes.builder import FixBuilder

ROOT = Path(__file__).resolve().parent.parent
SEVERAL = ROOT / "tests" / "fix_pairs" / "several_findings.py"
CODES = ("AMP001", "AMP013", "AMP030", "AMP031")
SUBSETS = [subset for size in range(1, len(CODES) + 1) for subset in itertools.combinations(CODES, size)]


def test_the_file_has_each_finding():
    found = Checker(frozenset(CODES)).check(SEVERAL.read_text(), "several.py")
    assert sorted(d.code for d in found.diagnostics) == ["AMP001", "AMP013", "AMP030", "AMP030", "AMP031"]


@pytest.fixture(scope="module")
def fixed_by_subset(tmp_path_factory):
    """Each subset fixed by the real CLI, all at once (one process each)."""
    folder = tmp_path_factory.mktemp("compose")
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    running = {}
    for subset in SUBSETS:
        copy = folder / f"several_{'_'.join(subset)}.py"
        copy.write_text(SEVERAL.read_text())
        command = [sys.executable, "-m", "amp_lint", "check", "--isolated", "--no-cache", "--fix", "--select", ",".join(subset), str(copy)]
        running[subset] = (copy, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment))
    return {subset: (copy, process.communicate(timeout=120)[0], process.returncode) for subset, (copy, process) in running.items()}


@pytest.mark.parametrize("subset", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_any_subset_of_fixes_gives_code_that_runs(subset, fixed_by_subset):
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tests" / "fix_pairs"))
    import harness

    copy, output, returncode = fixed_by_subset[subset]
    text = copy.read_text()
    assert returncode == 0 and "error:" not in output and "not fixed" not in output, output  # all fixed, none dropped
    cst.parse_module(text)
    assert text.count("scaler.unscale_(optimizer)") == (1 if "AMP030" in subset else 0)
    _, recorder = harness.run_script(copy)
    assert len(harness.iterations(recorder.events)) == 4
    if "AMP030" in subset:
        assert harness.documented_order(recorder.events) == []
    again = Checker(frozenset(subset), fix=True).check(text, str(copy))
    assert again.fixed_source is None and not again.errors and not again.diagnostics
    # Right for the selected rules, and nothing new for the others: what is left is what was not selected.
    left = Checker(frozenset(CODES)).check(text, str(copy))
    expected = sorted(c for c in ["AMP001", "AMP013", "AMP030", "AMP030", "AMP031"] if c not in subset)
    assert sorted(d.code for d in left.diagnostics) == expected


# --- the same insertion, once ---
LOOP = textwrap.dedent(
    """\
    for x in loader:
        scaler.scale(model(x)).backward()
        clip(a)
        clip(b)
        scaler.step(optimizer)
        step_done()
    """
)


def _statements(module):
    body = module.body[0].body.body
    return {cst.Module([]).code_for_node(s).strip(): s for s in body}


def _fix(module, side, anchor, code):
    builder = FixBuilder(module)
    statement = builder.statement(code + "\n")
    (builder.insert_before if side == "before" else builder.insert_after)(_statements(module)[anchor], statement)
    return builder.build("test", Applicability.SAFE)


def _applied(fixes, module):
    chosen = select_compatible(fixes, module)
    assert len(chosen) == len(fixes)  # one pass: inserting next to the same statement is no overlap
    return apply_fixes(module, chosen).code


def test_two_fixes_inserting_the_same_statement_at_one_anchor_insert_it_once():
    module = cst.parse_module(LOOP)
    fixes = [_fix(module, "after", "scaler.step(optimizer)", "scaler.update()") for _ in range(2)]
    assert _applied(fixes, module).count("scaler.update()") == 1


def test_the_same_gap_from_both_sides_gets_one_statement():
    module = cst.parse_module(LOOP)
    fixes = [_fix(module, "after", "scaler.step(optimizer)", "scaler.update()"), _fix(module, "before", "step_done()", "scaler.update()")]
    code = _applied(fixes, module)
    assert code.count("scaler.update()") == 1
    assert code.index("scaler.step(optimizer)") < code.index("scaler.update()") < code.index("step_done()")


def test_consecutive_anchors_wanting_the_same_statement_before_them_get_it_once_before_the_first():
    module = cst.parse_module(LOOP)
    fixes = [_fix(module, "before", "clip(a)", "scaler.unscale_(optimizer)"), _fix(module, "before", "clip(b)", "scaler.unscale_(optimizer)")]
    code = _applied(fixes, module)
    assert code.count("scaler.unscale_(optimizer)") == 1
    assert code.index("scaler.unscale_(optimizer)") < code.index("clip(a)")


def test_different_statements_or_a_statement_between_keep_both():
    module = cst.parse_module(LOOP)
    fixes = [_fix(module, "before", "clip(a)", "scaler.unscale_(optimizer)"), _fix(module, "before", "scaler.step(optimizer)", "scaler.unscale_(optimizer)")]
    assert _applied(fixes, module).count("scaler.unscale_(optimizer)") == 2  # clip(b) between wants nothing
    fixes = [_fix(module, "before", "clip(a)", "first()"), _fix(module, "before", "clip(b)", "second()")]
    code = _applied(fixes, module)
    assert code.count("first()") == 1 and code.count("second()") == 1


def test_one_fix_may_insert_a_statement_twice():
    module = cst.parse_module(LOOP)
    builder = FixBuilder(module)
    twice = [builder.statement("tick()\n") for _ in range(2)]
    builder.insert_after(_statements(module)["clip(a)"], *twice)
    assert _applied([builder.build("test", Applicability.SAFE)], module).count("tick()") == 2
