"""Every rule's own examples, run by one harness: they are the rules' documentation and their tests."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amp_lint.engine.checker import Checker
from amp_lint.parse.prefilter import Prefilter
from amp_lint.rules import ALL_RULES

VALID = [(rule, i, code) for rule in ALL_RULES for i, code in enumerate(rule.valid)]
INVALID = [(rule, i, example) for rule in ALL_RULES for i, example in enumerate(rule.invalid)]
FIXED = [(rule, i, example) for rule, i, example in INVALID if example.fixed is not None]


def _id(item):
    rule, index, _ = item
    return f"{rule.code}-{index}"


def _codes(source: str, code: str, **options):
    # Preview mode on: a preview rule's examples are its tests too.
    result = Checker(frozenset({code}), rule_options={"preview": True}, **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return result


@pytest.mark.parametrize("item", VALID, ids=[_id(i) for i in VALID])
def test_valid_example_has_no_finding(item):
    rule, _, source = item
    result = _codes(source, rule.code)
    assert [d.message for d in result.diagnostics] == []


@pytest.mark.parametrize("item", INVALID, ids=[_id(i) for i in INVALID])
def test_invalid_example_is_found(item):
    rule, _, example = item
    # An example shows the rule, findings that rest on an assumption too (the default hides those).
    result = _codes(example.code, rule.code, show_assumed=True)
    assert [d.code for d in result.diagnostics] == [rule.code] * example.count, [d.message for d in result.diagnostics]


@pytest.mark.parametrize("item", INVALID, ids=[_id(i) for i in INVALID])
def test_what_is_marked_fixable_is_fixed_with_the_check_on(item):
    """Issue 27, item 4: a finding that carries a fix ("fixable") gets a fix that passes the check before
    writing (no "not fixed: ..."), and the finding is gone after it."""
    rule, _, example = item
    source = textwrap.dedent(example.code)
    # As --fix runs: an assumed finding is fixed only where it is shown (--show-assumed).
    assumed = not any(d.code == rule.code for d in _codes(source, rule.code).diagnostics)
    found = _codes(source, rule.code, show_assumed=assumed)
    fixable = [d for d in found.diagnostics if d.fix is not None]
    if not fixable:
        return
    options = dict(rule_options={"preview": True}, fix=True, unsafe_fixes=True, show_assumed=assumed)
    result = Checker(frozenset({rule.code}), **options).check(source, "example.py")
    assert [e.message for e in result.errors] == []
    assert result.fixed_source is not None, [d.message for d in fixable]
    cst.parse_module(result.fixed_source)
    assert [d.message for d in result.diagnostics if d.code == rule.code and d.fix is not None] == []


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.fix_applicability is not None], ids=lambda r: r.code)
def test_every_rule_with_a_fix_shows_it_fixed(rule):
    """Every rule that offers a fix has an INVALID example with its fixed code (checked above)."""
    assert any(example.fixed is not None for example in rule.invalid), rule.code


@pytest.mark.parametrize("item", FIXED, ids=[_id(i) for i in FIXED])
def test_fix_produces_expected_code_and_is_idempotent(item):
    rule, _, example = item
    source = textwrap.dedent(example.code)
    # A finding that rests on an assumption is fixed only where it is shown (--show-assumed).
    assumed = not any(d.code == rule.code for d in _codes(source, rule.code).diagnostics)
    first = _codes(source, rule.code, fix=True, unsafe_fixes=True, show_assumed=assumed)
    assert first.fixed_source is not None, "nothing was fixed"
    assert first.fixed_source == textwrap.dedent(example.fixed)
    cst.parse_module(first.fixed_source)
    assert [d.code for d in first.diagnostics if d.code == rule.code] == []
    second = _codes(first.fixed_source, rule.code, fix=True, unsafe_fixes=True, show_assumed=assumed)
    assert second.fixed_source is None and not second.fixed


@pytest.mark.parametrize("item", INVALID, ids=[_id(i) for i in INVALID])
def test_prefilter_keeps_every_invalid_example(item):
    rule, _, example = item
    source = textwrap.dedent(example.code)
    assert Prefilter([rule]).text_may_match(source), "the text step drops it"
    assert Prefilter([rule]).may_match(source, always_second_step=True), "the identifier step drops it"


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_rule_is_documented(rule):
    text = rule.explanation()
    for section in ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References"):
        assert f"## {section}" in text, f"{rule.code} lacks '## {section}'"
    assert rule.invalid, f"{rule.code} has no invalid example"
    assert rule.valid, f"{rule.code} has no valid example"
    if rule.fix_applicability is not None:
        assert any(e.fixed for e in rule.invalid), f"{rule.code} has a fix but no fixed example"
