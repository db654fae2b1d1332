"""Properties of amp-lint over generated AMP training scripts (see tests/amp_programs.py).

For every generated program: the check never crashes and never errors; a correct program has no
finding; a program with one injected bug reports exactly the rules that bug implies; `--fix` output
parses, is idempotent, removes every finding it has a fix for, and turns the program into the correct
one (same AST); and the fixed script really trains on CPU. The checks call the engine in-process
(`Checker.check`, what each worker runs) for speed; one property runs the real command.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import FrozenSet, List

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_lint import rules
from amp_lint.diagnostics import Applicability
from amp_lint.engine.checker import Checker, SourceResult

from amp_programs import BUGS, UNFIXABLE, Program, Shape, build, buggy_programs, correct_programs, one_program_per_kind, programs

CODES = frozenset(rules.default_codes())
CHECKER = Checker(CODES)
FIXER = Checker(CODES, fix=True)


def bounded(max_examples: int):
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,  # the same examples on every run: CI stays deterministic
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def check(source: str) -> SourceResult:
    result = CHECKER.check(source, "gen.py")
    assert result.errors == [], [error.message for error in result.errors]
    assert result.parsed
    return result


def codes(result: SourceResult) -> FrozenSet[str]:
    return frozenset(diagnostic.code for diagnostic in result.diagnostics)


def describe(result: SourceResult) -> List[str]:
    return [f"{d.location.row}:{d.location.column} {d.code} {d.message}" for d in result.diagnostics]


def has_safe_fix(diagnostic) -> bool:
    return diagnostic.fix is not None and diagnostic.fix.applicability is Applicability.SAFE


def fixable_codes(result: SourceResult) -> FrozenSet[str]:
    """Rules all of whose findings carry a fix that --fix applies."""
    found = codes(result)
    return frozenset(code for code in found if all(has_safe_fix(d) for d in result.diagnostics if d.code == code))


def fix(source: str) -> str:
    result = FIXER.check(source, "gen.py")
    assert result.errors == [], [error.message for error in result.errors]
    return result.fixed_source if result.fixed_source is not None else source


def same_code(left: str, right: str) -> bool:
    """Equal up to comments and layout."""
    return ast.dump(ast.parse(left)) == ast.dump(ast.parse(right))


def bug_is_fixable(program: Program, result: SourceResult) -> bool:
    return program.bug is not None and program.bug not in UNFIXABLE and program.bug in fixable_codes(result)


# --- checking ------------------------------------------------------------------------------------


@bounded(60)
@given(correct_programs())
def test_correct_programs_have_no_findings(program):
    result = check(program.source)
    assert describe(result) == []


@bounded(150)
@given(buggy_programs())
def test_a_buggy_program_reports_exactly_its_bug(program):
    result = check(program.source)
    assert codes(result) == program.expected, describe(result)


# --- fixing --------------------------------------------------------------------------------------


@bounded(120)
@given(programs())
def test_fix_parses_is_idempotent_and_removes_what_it_fixes(program):
    before = check(program.source)
    fixed = fix(program.source)
    cst.parse_module(fixed)
    ast.parse(fixed)
    assert fix(fixed) == fixed, "fixing the fixed program changed it again"
    after = check(fixed)
    # Only findings without a (safe) fix may remain.
    assert codes(after) <= codes(before) - fixable_codes(before), describe(after)
    if bug_is_fixable(program, before) and program.fixed_equivalent is not None:
        assert same_code(fixed, program.fixed_equivalent), fixed
    if program.bug in UNFIXABLE:
        assert fixed == program.source


@pytest.mark.parametrize("bug", [code for code in BUGS if code not in UNFIXABLE])
def test_every_injected_bug_is_fixed_in_a_training_loop(bug):
    for level in ("module", "function", "method"):
        for variant in (False, True):
            program = build(Shape(level=level, bug=bug, variant=variant, clip=bug == "AMP030", optimizers=2))
            result = check(program.source)
            assert bug in fixable_codes(result), (level, variant, describe(result))
            assert same_code(fix(program.source), program.fixed_equivalent)


HELPER_LOSES_FIX = ()  # fixed: the fixable copy of a helper's finding wins


@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(code, marks=HELPER_LOSES_FIX if code in ("AMP011", "AMP020", "AMP022", "AMP023", "AMP030") else ())
        for code in BUGS
        if code not in UNFIXABLE
    ],
)
def test_a_bug_in_a_step_function_called_from_the_loop_is_fixed(bug):
    program = build(Shape(level="step function", bug=bug, clip=bug == "AMP030"))
    result = check(program.source)
    assert codes(result) == program.expected, describe(result)
    assert bug in fixable_codes(result), describe(result)
    assert same_code(fix(program.source), program.fixed_equivalent)


def test_a_helper_call_is_named_once_in_a_message():
    program = build(Shape(level="step function", bug="AMP011"))
    [diagnostic] = check(program.source).diagnostics
    # Reported from the step function's own step (with its fix), or through the call: never twice.
    assert diagnostic.message.count("reached through") <= 1, diagnostic.message


def test_two_events_reached_through_one_call_name_it_once():
    from libcst.metadata import CodePosition, CodeRange

    from amp_lint.engine.checker import _related_text

    backward, step = object(), object()  # two nodes of the same call line, inlined twice
    where = {id(n): CodeRange(CodePosition(20, 4), CodePosition(20, 30)) for n in (backward, step)}
    label = "reached through `train_step(model, x, y, optimizer, scaler)`"
    text = _related_text([(label, backward), (label, step)], where.get)
    assert text == f" ({label} at line 20)"


# --- running the fixed programs -------------------------------------------------------------------

_RUNNER = textwrap.dedent(
    """\
    import json, runpy, sys, traceback, warnings
    import torch

    torch.set_num_threads(1)
    failures = {}
    for path in sys.argv[1:]:
        try:
            with warnings.catch_warnings():
                # A fixed program must not use the deprecated AMP API any more.
                warnings.filterwarnings("error", category=FutureWarning, message=".*amp.*")
                runpy.run_path(path, run_name="__main__")
        except BaseException:
            failures[path] = traceback.format_exc(limit=-3)
    print(json.dumps(failures))
    """
)


@bounded(2)
@given(one_program_per_kind())
def test_fixed_programs_train_on_cpu(batch):
    pytest.importorskip("torch")
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index, program in enumerate(batch):
            result = check(program.source)
            if program.bug is not None and program.bug not in UNFIXABLE and not bug_is_fixable(program, result):
                continue  # nothing to run: the fix is not offered
            path = Path(folder) / f"program_{index}_{program.bug or 'correct'}.py"
            path.write_text(fix(program.source))
            paths.append(str(path))
        assert len(paths) >= len(batch) - 2
        runner = Path(folder) / "run_all.py"
        runner.write_text(_RUNNER)
        completed = subprocess.run(
            [sys.executable, str(runner), *paths], capture_output=True, text=True, timeout=300, cwd=folder
        )
        assert completed.returncode == 0, completed.stderr
        failures = json.loads(completed.stdout.strip().splitlines()[-1])
        assert failures == {}, "\n\n".join(f"{name}:\n{Path(name).read_text()}\n{error}" for name, error in failures.items())


# --- the real command ------------------------------------------------------------------------------


@bounded(2)
@given(st.lists(programs(), min_size=8, max_size=8))
def test_the_command_line_agrees_and_fix_is_idempotent(batch):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for index, program in enumerate(batch):
            (root / f"gen_{index}.py").write_text(program.source)

        def amp_lint(*arguments: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-m", "amp_lint", "--isolated", "--no-cache", *arguments, "."],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=300,
            )

        result = amp_lint("--output-format", "json")
        assert "Traceback" not in result.stderr, result.stderr
        expected_exit = 1 if any(program.expected for program in batch) else 0
        assert result.returncode == expected_exit, result.stderr
        found = {}
        for record in json.loads(result.stdout):
            found.setdefault(Path(record["filename"]).name, set()).add(record["code"])
        for index, program in enumerate(batch):
            assert found.get(f"gen_{index}.py", set()) == program.expected, (index, program.source)

        first = amp_lint("--fix")
        assert first.returncode in (0, 1) and "Traceback" not in first.stderr, first.stdout + first.stderr
        fixed = {path.name: path.read_bytes() for path in root.glob("gen_*.py")}
        for index, program in enumerate(batch):
            assert fixed[f"gen_{index}.py"].decode() == fix(program.source)
        second = amp_lint("--fix")
        assert second.returncode == first.returncode
        assert {path.name: path.read_bytes() for path in root.glob("gen_*.py")} == fixed
