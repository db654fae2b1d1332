"""The dense training code benchmark (bench/dense_gen.py) and what keeps its check from redoing work.

No timing here: the generator's shape, its one bug, and counts of derivations (a function's fix-check hazards
derived again only when its text changed; one analysis of a file whose fixable order finding is previewed; the
AMP013 escape walk only for a scaler whose function has a caller).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from dense_gen import UNIT_LINES, dense_training_file, line_of, units_in  # noqa: E402

from amp_lint import rules as registry  # noqa: E402
from amp_lint.engine.runner import CheckConfig, check_text  # noqa: E402


def _default_config() -> CheckConfig:
    return CheckConfig(frozenset(registry.default_codes()), False, False, False, False)


@pytest.mark.parametrize("lines", [1000, 3000, 6000])
def test_the_generator_writes_exactly_the_lines_asked_for_made_of_training_units(lines):
    text = dense_training_file(lines)
    assert text.count("\n") == lines and text.endswith("\n")
    tree = ast.parse(text)
    trains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("train_")]
    evaluates = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("evaluate_")]
    assert len(trains) == len(evaluates) == units_in(text) == (lines - 10) // UNIT_LINES
    # Most of the file is training code: the padding after the last unit is less than one unit.
    assert lines - trains[-1].lineno < 2 * UNIT_LINES
    rows = text.split("\n")
    sources = {f.name: "\n".join(rows[f.lineno - 1 : f.end_lineno]) for f in trains}  # (a segment each: linear)
    for function in trains:
        for needed in ("GradScaler(", "torch.autocast(", ".backward()", "clip_grad_norm_(", "scaler.step(", "scaler.update()", "logger.info("):
            assert needed in sources[function.name], (function.name, needed)
    # Exactly one unit clips before unscaling: the bug the file keeps.
    assert sum("scaler.unscale_(" not in source for source in sources.values()) == 1


def test_a_check_of_the_dense_file_finds_its_one_bug_and_nothing_else():
    text = dense_training_file(1000)
    outcome = check_text(text, "dense.py", _default_config())
    assert not outcome.errors
    assert [d.code for d in outcome.diagnostics] == ["AMP030"]
    buggy = units_in(text) // 2
    clip_row = line_of(text, "clip_grad_norm_(", unit=buggy) + 1
    assert outcome.diagnostics[0].location.row == clip_row
    assert outcome.diagnostics[0].fix is not None  # `--fix` would keep the fix it offers: the preview ran


def test_the_fix_check_derives_again_only_the_function_an_edit_changed(monkeypatch):
    from amp_lint.fixes import verify_fix

    derived = []
    original = verify_fix._FunctionCheck.run

    def counting(self, body):
        derived.append(self.function)
        return original(self, body)

    monkeypatch.setattr(verify_fix._FunctionCheck, "run", counting)
    monkeypatch.setattr(verify_fix, "_FUNCTION_HAZARDS", type(verify_fix._FUNCTION_HAZARDS)())
    text = dense_training_file(400)
    before = verify_fix.hazards(text)
    trains = [f"train_{n}" for n in range(units_in(text))]
    assert set(trains) <= set(derived)
    derived.clear()
    row = line_of(text, "scaler.step(optimizer)", unit=1)
    lines = text.split("\n")
    lines[row] = lines[row].replace("scaler.step(optimizer)", "scaler.step(optimizer)\n            scaler.step(optimizer)")
    after = verify_fix.hazards("\n".join(lines))
    # The module body (never kept: it is the whole file) and the edited function, nothing else.
    assert sorted(derived) == ["", "train_1"]
    assert [h.shape for h in after if h.function == "train_1"] == [("step-twice", "train_1", "scaler", "optimizer")]
    assert [h for h in after if h.function != "train_1"] == list(before)
    # The rows of a hazard found again are the edited text's (one line more above the functions below).
    assert verify_fix.hazards("\n".join(lines)) == after
    assert all(h.line == row + 2 for h in after if h.function == "train_1")


def test_a_previewed_fix_is_checked_against_the_analysis_already_made(monkeypatch):
    from amp_lint.engine import checker as checker_module

    analysed = []
    original = checker_module.Checker._analysed

    def counting(self, module, code, *args, **kwargs):
        analysed.append(code == module.code)
        return original(self, module, code, *args, **kwargs)

    monkeypatch.setattr(checker_module.Checker, "_analysed", counting)
    text = dense_training_file(200)
    outcome = checker_module.Checker(frozenset(registry.default_codes())).check(text, "dense.py")
    assert [d.code for d in outcome.diagnostics] == ["AMP030"]
    # Only the fixed code is analysed again (the code before the fix was the check's own analysis).
    assert len(analysed) == 1
    with_all = checker_module.Checker(frozenset(registry.all_codes())).check(text, "dense.py")
    assert [d.code for d in with_all.diagnostics if d.code == "AMP030"] == ["AMP030"]


def test_the_escape_walk_of_amp013_runs_only_for_a_function_someone_calls(monkeypatch):
    from amp_lint.rules import amp013_scaler_in_loop as amp013

    walked = []
    original = amp013._kept

    def counting(function, key):
        walked.append(function.name.value)
        return original(function, key)

    monkeypatch.setattr(amp013, "_kept", counting)
    text = dense_training_file(300)
    caller = "\n\nfor epoch in range(10):\n    train_0(model, loader, optimizer, scheduler)\n"
    outcome = check_text(text + caller, "dense.py", _default_config())
    assert set(walked) == {"train_0"}  # (once per analysis) the others have no caller: no walk
    assert "AMP013" in [d.code for d in outcome.diagnostics]  # and the called one is still judged
