"""`fix_edits.text_edits` (the edits JSON and SARIF output carry): applied to the old text, they give the new."""

from __future__ import annotations

import functools
import random

import pytest

import amp_lint.engine.checker  # noqa: F401 (imports the rules before the fixer: their modules import each other)
from amp_lint.fixes.text_edits import text_edits
from amp_lint.files.lines import lines_with_ends


def apply(old: str, edits) -> str:
    lines = lines_with_ends(old)
    for edit in sorted(edits, key=lambda e: e.location.row, reverse=True):
        lines[edit.location.row - 1 : edit.end_location.row - 1] = [edit.content]
    return "".join(lines)


CASES = {
    "same": ("a\nb\n", "a\nb\n"),
    "insert-first": ("a\nb\n", "x\na\nb\n"),
    "insert-last": ("a\nb\n", "a\nb\nx\n"),
    "insert-middle": ("a\nb\nc\n", "a\nb\nx\nc\n"),
    "delete": ("a\nb\nc\n", "a\nc\n"),
    "replace": ("a\nb\nc\n", "a\nB\nc\n"),
    "repeated-lines": ("x\nx\nx\n", "x\nx\nx\nx\n"),
    "no-final-newline": ("a\nb", "a\nb\nc"),
    "crlf": ("a\r\nb\r\n", "a\r\nx\r\nb\r\n"),
    "everything": ("a\nb\n", "c\nd\ne\n"),
    "empty-old": ("", "a\n"),
}


@pytest.mark.parametrize("old, new", CASES.values(), ids=list(CASES))
def test_edits_turn_old_into_new(old, new):
    edits = text_edits(old, new)
    assert apply(old, edits) == new
    assert (edits == ()) == (old == new)


def test_one_changed_line_in_a_big_file_is_one_small_edit():
    old = "".join(f"line_{i} = {i}\n" for i in range(20_000))
    new = old.replace("line_12345 = 12345\n", "line_12345 = 12345\nscaler.update()\n")
    [edit] = text_edits(old, new)
    assert (edit.location.row, edit.end_location.row, edit.content) == (12347, 12347, "scaler.update()\n")


def test_random_changes():
    rng = random.Random(3)
    for _ in range(200):
        old_lines = [rng.choice("abc") + "\n" for _ in range(rng.randint(0, 12))]
        new_lines = list(old_lines)
        for _ in range(rng.randint(0, 3)):
            position = rng.randint(0, len(new_lines))
            if new_lines and rng.random() < 0.5:
                del new_lines[min(position, len(new_lines) - 1)]
            else:
                new_lines.insert(position, rng.choice("abcd") + "\n")
        old, new = "".join(old_lines), "".join(new_lines)
        assert apply(old, text_edits(old, new)) == new


def _fixable_sources():
    import textwrap
    from pathlib import Path

    from amp_lint.rules import ALL_RULES

    root = Path(__file__).resolve().parent.parent / "fixtures"
    sources = [path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py"))]
    sources += [textwrap.dedent(example.code) for rule in ALL_RULES for example in rule.invalid]
    return sources


@functools.lru_cache(maxsize=None)
def _fixable_modules():
    """(source, parsed module, its model, the fixes its findings carry) for every fixture and rule
    example that LibCST parses; built once for the tests that read them (LibCST's trees are immutable)."""
    import libcst as cst

    from amp_lint.analysis.builder import build_model
    from amp_lint.rules import ALL_RULES

    rules = [rule() for rule in ALL_RULES]
    modules = []
    for source in _fixable_sources():
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        model = build_model(module)
        modules.append((source, module, model, [f.fix for rule in rules for f in rule.check(model) if f.fix is not None]))
    return tuple(modules)


def test_edits_made_statement_by_statement_give_the_fully_regenerated_text():
    """`EditsOfFixes` regenerates only the statements a fix changed and diffs each alone. Applied to the
    source, its edits must give exactly the whole regenerated file, and touch no line that a diff of the
    whole file leaves alone, for every fix of every fixture and rule example."""
    from amp_lint.fixes.text_edits import EditsOfFixes
    from amp_lint.fixes.apply import apply_fixes

    compared = 0
    for source, module, _, fixes in _fixable_modules():
        edits_of = EditsOfFixes(module, source, fixes)
        for fix in fixes:
            fixed = apply_fixes(module, [fix]).code
            edits = edits_of.edits(fix)
            assert apply(source, edits) == fixed
            whole = text_edits(source, fixed)
            assert bool(edits) == bool(whole)
            if whole:
                first, last = whole[0].location.row, max(edit.end_location.row for edit in whole)
                assert all(first <= edit.location.row and edit.end_location.row <= last for edit in edits)
            compared += 1
    assert compared > 100


def test_edits_of_two_statements_far_apart_are_two_small_edits():
    """A fix that changes a statement at the top and one at the bottom of a long file: two edits of one
    line each, not one edit over everything between them."""
    import libcst as cst

    from amp_lint.fixes.text_edits import EditsOfFixes
    from amp_lint.analysis.builder import build_model
    from amp_lint.rules import ALL_RULES

    filler = "".join(f"value_{i} = {i}\n" for i in range(3_000))
    source = (
        "import torch\n"
        "from torch.cuda.amp import GradScaler\n"
        + filler
        + "scaler = GradScaler()\n"
    )
    module = cst.parse_module(source)
    model = build_model(module)
    fixes = [f.fix for rule in ALL_RULES for f in rule().check(model) if f.fix is not None and rule.code == "AMP072"]
    assert fixes
    edits = EditsOfFixes(module, source, fixes).edits(fixes[0])
    assert apply(source, edits) == source.replace("from torch.cuda.amp import GradScaler", "from torch.amp import GradScaler").replace(
        "scaler = GradScaler()", 'scaler = GradScaler("cuda")'
    )
    assert [edit.end_location.row - edit.location.row for edit in edits] == [1, 1]


def test_fix_targets_ancestors_from_the_models_parent_map_equal_a_walk():
    """The fixer takes a target's ancestors from the analysis model's parent map when it can; they must
    be exactly what a walk of the tree finds, for every fix target of every fixture and rule example."""
    from amp_lint.fixes.apply import _ancestry

    answered = compared = 0
    for _, module, model, fixes in _fixable_modules():
        targets = {node for fix in fixes for node in fix.replacements}
        if not targets:
            continue
        assert _ancestry(module, targets, model.parents) == _ancestry(module, targets)
        answered += sum(1 for node in targets if id(node) in model.parents)
        compared += len(targets)
    assert compared > 100 and answered > compared // 2
