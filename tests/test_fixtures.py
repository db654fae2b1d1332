"""Golden fixtures, run through the real command line.

- `fixtures/check/NAME.py` + `NAME.expected`: the concise diagnostics (`row:col: CODE [*] message`, file
  name stripped). `bad_*` fixtures hold bugs, `good_*` fixtures are correct code that must stay silent.
- `fixtures/fix/NAME.in.py` + `NAME.out.py`: the exact bytes `amp-lint --fix --unsafe-fixes --select CODES`
  produces; CODES come from a `# amp-lint-fix: --select AMP001,AMP021` comment at the top of the input.
  A fixture named `*refuse*` is code the fix must leave alone: its output is its input.
- `fixtures/run/NAME.in.py`: small CPU training scripts with fixable bugs; fixed, then executed.

A fixture whose first line starts with `# KNOWN-ISSUE` documents a bug in amp-lint: its expectation is the
correct behaviour, and the test is a strict xfail until amp-lint is fixed.

`AMP_LINT_UPDATE_SNAPSHOTS=1 pytest tests/test_fixtures.py` rewrites `.expected` and `.out.py` from the
current behaviour (never for KNOWN-ISSUE fixtures, whose expectations are written by hand).
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
import re
import shutil
from pathlib import Path
from typing import List, Tuple

import libcst as cst
import pytest
from click.testing import CliRunner

from amp_lint.cli import main
from torch_scripts import run_script

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CHECK_FIXTURES = sorted((FIXTURES / "check").glob("*.py"))
FIX_FIXTURES = sorted((FIXTURES / "fix").glob("*.in.py"))
RUN_FIXTURES = sorted((FIXTURES / "run").glob("*.in.py"))

UPDATE = os.environ.get("AMP_LINT_UPDATE_SNAPSHOTS") == "1"
KNOWN_ISSUE = b"# KNOWN-ISSUE"
_FIX_HEADER = re.compile(rb"^# amp-lint-fix: --select (?P<codes>[A-Z0-9,]+)\r?$")
_LOSS = re.compile(r"\bloss[ =:]+(?P<value>\S+)")
# Options that keep the repository's own configuration and cache out of every run.
BASE_OPTIONS = ["--isolated", "--no-cache", "--color", "never"]


def _params(paths: List[Path]):
    params = []
    for path in paths:
        first_line = path.read_bytes().split(b"\n", 1)[0].rstrip(b"\r")
        marks = ()
        if first_line.startswith(KNOWN_ISSUE):
            reason = first_line[len(KNOWN_ISSUE) :].lstrip(b": ").decode()
            marks = (pytest.mark.xfail(strict=True, reason=f"known issue: {reason}"),)
        params.append(pytest.param(path, id=path.name, marks=marks))
    return params


def _is_known_issue(path: Path) -> bool:
    return path.read_bytes().startswith(KNOWN_ISSUE)


def amp_lint(*args: str) -> Tuple[int, str]:
    """Run the real command line in-process; returns (exit code, everything it printed)."""
    result = CliRunner().invoke(main, [*BASE_OPTIONS, *args], catch_exceptions=False)
    return result.exit_code, result.output


def concise(path: Path, *options: str) -> List[str]:
    """amp-lint's concise diagnostics for one file, without the file name."""
    code, out = amp_lint("--output-format", "concise", *options, str(path))
    assert code in (0, 1), f"amp-lint failed (exit {code}):\n{out}"
    prefix = f"{path}:"
    return [line[len(prefix) :] for line in out.splitlines() if line.startswith(prefix)]


def byte_diff(expected: bytes, actual: bytes) -> str:
    """A unified diff that shows line endings and tabs, for byte comparisons."""
    show = lambda data: [repr(line)[2:-1] + "\n" for line in data.splitlines(keepends=True)]  # noqa: E731
    return "".join(difflib.unified_diff(show(expected), show(actual), "expected", "actual"))


# --- fixtures/check -----------------------------------------------------------------------------------


def check_options(path: Path) -> List[str]:
    """Options a check fixture asks for in its first line: `# amp-lint-check: --show-assumed` (a finding that
    rests on an assumption is hidden by default)."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    prefix = "# amp-lint-check:"
    return first[len(prefix) :].split() if first.startswith(prefix) else []


@pytest.mark.parametrize("path", _params(CHECK_FIXTURES))
def test_check_fixture_matches_snapshot(path: Path):
    expected_path = path.with_suffix(".expected")
    actual = concise(path, *check_options(path))
    if UPDATE and not _is_known_issue(path):
        if path.name.startswith("good_") and actual:
            pytest.fail(f"{path.name} is correct code but amp-lint reports:\n" + "\n".join(actual))
        expected_path.write_text("".join(line + "\n" for line in actual), encoding="utf-8")
    assert expected_path.exists(), f"{expected_path.name} is missing (AMP_LINT_UPDATE_SNAPSHOTS=1 writes it)"
    expected = expected_path.read_text(encoding="utf-8").splitlines()
    assert actual == expected


@pytest.mark.parametrize("path", CHECK_FIXTURES, ids=[p.name for p in CHECK_FIXTURES])
def test_check_fixture_is_named_for_what_it_holds(path: Path):
    """good_* fixtures are silent by definition; bad_* fixtures expect at least one finding."""
    assert path.name.startswith(("good_", "bad_")), path.name
    expected = path.with_suffix(".expected")
    if not expected.exists():
        pytest.skip("no snapshot yet")
    lines = expected.read_text(encoding="utf-8").splitlines()
    if path.name.startswith("good_"):
        assert lines == [], f"{expected.name} must be empty: good_ fixtures are correct code"
    else:
        assert lines, f"{expected.name} is empty: a bad_ fixture must expect a finding"
    cst.parse_module(path.read_bytes())


# --- fixtures/fix -------------------------------------------------------------------------------------


def _fix_codes(source: bytes) -> str:
    for line in source.splitlines()[:3]:
        match = _FIX_HEADER.match(line)
        if match:
            return match.group("codes").decode()
    raise AssertionError("no `# amp-lint-fix: --select CODES` comment in the first lines")


def _output_name(path: Path) -> str:
    return path.name[: -len(".in.py")] + ".py"


@pytest.mark.parametrize("path", _params(FIX_FIXTURES))
def test_fix_fixture_produces_golden_output(path: Path, tmp_path: Path):
    source = path.read_bytes()
    codes = _fix_codes(source)
    expected_path = path.with_name(path.name[: -len(".in.py")] + ".out.py")
    refusal = "refuse" in path.name
    target = tmp_path / _output_name(path)
    shutil.copyfile(path, target)

    code, out = amp_lint("--fix", "--unsafe-fixes", "--select", codes, str(target))
    assert code in (0, 1), f"amp-lint --fix failed (exit {code}):\n{out}"
    fixed = target.read_bytes()
    if UPDATE and not _is_known_issue(path):
        expected_path.write_bytes(fixed)
    assert expected_path.exists(), f"{expected_path.name} is missing (AMP_LINT_UPDATE_SNAPSHOTS=1 writes it)"
    expected = expected_path.read_bytes()
    if refusal:
        assert expected == source, f"{expected_path.name} must equal its input: the fix must not apply"
    assert fixed == expected, byte_diff(expected, fixed)

    cst.parse_module(fixed)
    if refusal:
        assert fixed == source
    else:
        assert fixed != source, "nothing was fixed"
        fixable = [line for line in concise(target, "--select", codes) if " [*] " in line]
        assert fixable == [], "fixable findings remain after --fix:\n" + "\n".join(fixable)

    code, out = amp_lint("--fix", "--unsafe-fixes", "--select", codes, str(target))
    assert code in (0, 1), out
    assert target.read_bytes() == fixed, "a second --fix changed the file again"
    assert "Fixed" not in out, f"a second --fix reported fixes:\n{out}"


@pytest.mark.parametrize("path", FIX_FIXTURES, ids=[p.name for p in FIX_FIXTURES])
def test_fix_fixture_input_is_valid_python(path: Path):
    source = path.read_bytes()
    _fix_codes(source)
    cst.parse_module(source)
    if path.name.startswith("crlf_"):
        assert b"\r\n" in source and b"\n" not in source.replace(b"\r\n", b""), "a crlf_ fixture must use CRLF only"
    if path.name.startswith("tabs_"):
        assert b"\n\t" in source, "a tabs_ fixture must indent with tabs"


# --- fixtures/run -------------------------------------------------------------------------------------


def _losses(stdout: str) -> List[float]:
    return [float(m.group("value")) for m in _LOSS.finditer(stdout)]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("path", _params(RUN_FIXTURES))
def test_fixed_training_script_runs_and_learns(path: Path, tmp_path: Path):
    script = tmp_path / _output_name(path)
    shutil.copyfile(path, script)
    code, out = amp_lint("--fix", "--unsafe-fixes", str(script))
    assert code in (0, 1), f"amp-lint --fix failed (exit {code}):\n{out}"
    assert script.read_bytes() != path.read_bytes(), "amp-lint fixed nothing"
    fixable = [line for line in concise(script) if " [*] " in line]
    assert fixable == [], "fixable findings remain after --fix:\n" + "\n".join(fixable)

    run = run_script(script, cwd=tmp_path)  # with PYTHONHASHSEED=0 and OMP_NUM_THREADS=1 (tests/torch_scripts.py)
    assert run.returncode == 0, f"the fixed script failed:\n{run.stdout}\n{run.stderr}"
    assert "is deprecated" not in run.stderr, f"the fixed script still uses deprecated AMP APIs:\n{run.stderr}"
    losses = _losses(run.stdout)
    assert len(losses) >= 2, f"no losses printed:\n{run.stdout}"
    first, last = losses[0], losses[-1]
    assert math.isfinite(last), f"final loss is {last}"
    assert last < first, f"the loss did not go down: first {first}, final {last}"
