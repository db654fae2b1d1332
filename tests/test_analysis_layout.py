"""The analysis package reads as its pipeline: small modules, each saying what it holds, and one way of
normalising a branch test for the lexical checks (`Branch.condition`) and the flow graph (`conditions`)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amp_lint.analysis.conditions import atom_of
from amp_lint.analysis.events import Branch

ANALYSIS = Path(__file__).resolve().parent.parent / "amp_lint" / "analysis"
MAX_LINES = 600


@pytest.mark.parametrize("path", sorted(ANALYSIS.glob("*.py")), ids=lambda path: path.name)
def test_module_is_small_and_says_what_it_holds(path):
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") < MAX_LINES, f"{path.name}: split it along its steps"
    docstring = cst.parse_module(text).body[0] if text.strip() else None
    assert docstring is not None and "\"\"\"" in cst.Module([docstring]).code, f"{path.name} has no module docstring"


def _branches(source: str):
    module = cst.parse_module(source)
    return [statement for statement in module.body if isinstance(statement, cst.If)]


@pytest.mark.parametrize(
    "first,second,agree",
    [
        ("if amp:\n    pass\n", "if not amp:\n    pass\n", False),
        ("if self.scaler is not None:\n    pass\n", "if self.scaler:\n    pass\n", True),
        ("if scaler is None:\n    pass\n", "if scaler:\n    pass\n", False),
        # The forms the flow graph already normalised and the event list did not (it called them unrelated).
        ("if use_amp is True:\n    pass\n", "if not use_amp:\n    pass\n", False),
        ("if (use_amp):\n    pass\n", "if use_amp:\n    pass\n", True),
        ("if use_amp == False:\n    pass\n", "if use_amp:\n    pass\n", False),
    ],
)
def test_branch_condition_is_the_flow_graphs_atom(first, second, agree):
    (one,), (other,) = _branches(first), _branches(second)
    here, there = Branch(node=one, taken=True).condition, Branch(node=other, taken=True).condition
    assert here == tuple(atom_of(one.test, True)) and there == tuple(atom_of(other.test, True))
    assert here[0] == there[0]
    assert (here[1] == there[1]) is agree
