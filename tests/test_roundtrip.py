"""LibCST gets a text it reproduces byte for byte; what it would drop comes back (`amp_lint.parse.roundtrip`).

LibCST 1.9 drops a lone CR that ends a file and form feeds that open a line of code; before the first
statement of a nested block its tokenizer refuses the file outright. CPython accepts all of these.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amp_lint.diagnostics import Location
from amp_lint.engine.checker import Checker
from amp_lint.parse.roundtrip import prepare

from snippets import MISSING_UPDATE

TRAIN = MISSING_UPDATE  # the AMP021 loop (tests/snippets.py)
STEP = "    scaler.step(optimizer)\n"
UPDATE = "    scaler.update()\n"  # AMP021's fix inserts this line after STEP


def round_trip(source: str) -> str:
    """What amp-lint writes back for `source` when no fix applies."""
    prepared = prepare(source)
    return prepared.restore(cst.parse_module(prepared.text).code).text


def fixed(source: str) -> str:
    result = Checker(frozenset({"AMP021"}), fix=True).check(source, "train.py")
    assert result.errors == [] and result.fixed == {"AMP021": 1}, result.errors
    return result.fixed_source


@pytest.mark.parametrize(
    "source",
    [
        "x = 1\n",
        "x = 1\r\ny = 2\r\n",
        "x = 1\ry = 2",
        "\x0c\nx = 1\n# page two\n\x0c\n",
        "if a:\n\x0c    # a comment after a form feed\n    b = 1\n",
    ],
    ids=["plain", "crlf", "cr-without-final-break", "form-feeds-on-their-own-lines", "form-feed-before-a-comment"],
)
def test_files_libcst_reproduces_are_given_as_they_are(source):
    prepared = prepare(source)
    assert prepared.text == source and not prepared.changed
    assert cst.parse_module(source).code == source


@pytest.mark.parametrize(
    "source",
    ["x = 1\ry = 2\r", "x = 1\r", "x = 1\n\r", "x = 1\r\n\r", "\r", "x = (1,\r2)  # done\r"],
    ids=["cr-file", "one-line", "after-lf", "after-crlf", "only-a-cr", "bracketed"],
)
def test_lone_final_cr_comes_back(source):
    assert cst.parse_module(source).code != source  # what this module is for
    prepared = prepare(source)
    assert prepared.trailing_cr and prepared.text == source[:-1]
    assert round_trip(source) == source


def test_crlf_file_is_given_as_it_is():
    source = TRAIN.replace("\n", "\r\n")
    assert not prepare(source).changed
    assert fixed(source) == TRAIN.replace(STEP, STEP + UPDATE).replace("\n", "\r\n")


def test_form_feed_before_indentation_comes_back():
    source = "for x in y:\n    a = 1\n\x0c    b = 2\n"
    assert cst.parse_module(source).code == "for x in y:\n    a = 1\n    b = 2\n"  # LibCST drops it
    prepared = prepare(source)
    assert prepared.text == "for x in y:\n    a = 1\n    b = 2\n" and prepared.form_feeds == {2: "\x0c"}
    assert round_trip(source) == source


def test_form_feed_before_the_first_statement_of_a_nested_block_parses():
    source = "if a:\n    with z:\n\x0c        b = 2\n"
    compile(source, "nested.py", "exec")
    with pytest.raises(cst.ParserSyntaxError):
        cst.parse_module(source)
    assert round_trip(source) == source


def test_several_form_feeds_and_a_final_cr_in_one_file():
    source = "\x0cimport torch\r\x0c\x0cx = 1\rif x:\r\x0c    y = 2\r\x0celse:\r    y = 3\r"
    prepared = prepare(source)
    assert prepared.form_feeds == {0: "\x0c", 1: "\x0c\x0c", 3: "\x0c", 4: "\x0c"} and prepared.trailing_cr
    assert "\x0c" not in prepared.text
    assert round_trip(source) == source


def test_form_feed_inside_a_string_stays_in_the_string():
    source = 's = """\n\x0cpage two"""\n\x0cz = 1\n'
    prepared = prepare(source)
    assert prepared.text == 's = """\n\x0cpage two"""\nz = 1\n'
    assert round_trip(source) == source


def test_file_python_cannot_read_is_given_as_it_is():
    source = "\x0cx = = 1\n"
    assert prepare(source).text == source


def test_fix_that_inserts_lines_before_a_form_feed_line_keeps_it():
    source = TRAIN.replace("    optimizer.zero_grad()", "\x0c    optimizer.zero_grad()")
    assert fixed(source) == source.replace(STEP, STEP + UPDATE)


def test_fix_after_a_form_feed_line_in_a_cr_file_keeps_both():
    source = TRAIN.replace(STEP, "\x0c" + STEP).replace("\n", "\r")
    assert fixed(source) == TRAIN.replace(STEP, "\x0c" + STEP + UPDATE).replace("\n", "\r")


def test_form_feed_goes_back_on_its_line_after_others_move():
    prepared = prepare("a = 1\n\x0cb = 2\nc = 3\n")
    restored = prepared.restore("new = 0\na = 1\nb = 2\nc = 3\n")
    assert restored.text == "new = 0\na = 1\n\x0cb = 2\nc = 3\n"
    assert restored.form_feeds == {3: "\x0c"}


def test_line_a_fix_rewrote_keeps_its_form_feed():
    prepared = prepare("a = 1\n\x0cb = 2\nc = 3\n")
    assert prepared.restore("a = 1\nb = 3\nc = 3\n").text == "a = 1\n\x0cb = 3\nc = 3\n"


def test_form_feed_of_a_deleted_line_is_not_put_on_another():
    prepared = prepare("a = 1\n\x0cb = 2\nc = 3\n")
    assert prepared.restore("a = 1\nc = 3\n").text == "a = 1\nc = 3\n"


def test_final_cr_comes_back_after_a_line_added_at_the_end():
    prepared = prepare("x = 1\ry = 2\r")
    assert prepared.restore("x = 1\ry = 2\rz = 3").text == "x = 1\ry = 2\rz = 3\r"


def test_finding_on_a_form_feed_line_points_at_the_original_characters():
    [plain] = Checker(frozenset({"AMP021"})).check(TRAIN, "train.py").diagnostics
    source = TRAIN.replace(STEP, "\x0c\x0c" + STEP)
    [diagnostic] = Checker(frozenset({"AMP021"})).check(source, "train.py").diagnostics
    assert (plain.location, diagnostic.location) == (Location(8, 5), Location(8, 7))
    assert diagnostic.end_location == Location(8, plain.end_location.column + 2)
    assert diagnostic.source_line == "\x0c\x0c" + STEP.rstrip("\n")
    start, end = diagnostic.location.column - 1, diagnostic.end_location.column - 1
    assert diagnostic.source_line[start:end] == "scaler.step(optimizer)"


# Two loops without a scaler: AMP010 (no fix) on both backward lines; AMP001 moves the second one
# out of its autocast block.
NO_SCALER = textwrap.dedent(
    """\
    import torch

    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
    \x0c    loss.backward()
        optimizer.step()
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
            loss.backward()
        optimizer.step()
    """
)


def test_finding_on_a_form_feed_line_of_a_fixed_file_points_at_the_original_characters():
    result = Checker(frozenset({"AMP001", "AMP010"}), fix=True).check(NO_SCALER, "train.py")
    assert result.fixed == {"AMP001": 1}
    assert result.fixed_source == NO_SCALER.replace("        loss.backward()", "    loss.backward()")
    first, second = result.diagnostics
    assert (first.code, first.location, first.end_location) == ("AMP010", Location(6, 6), Location(6, 21))
    assert first.source_line == "\x0c    loss.backward()"
    assert (second.location, second.source_line) == (Location(11, 5), "    loss.backward()")


def test_what_cannot_be_put_back_is_still_not_fixed():
    # A blank before the form feed: LibCST drops both, and only form feeds that open a line are taken out.
    source = TRAIN.replace("scaler = torch", " \x0cscaler = torch")
    compile(source, "train.py", "exec")
    result = Checker(frozenset({"AMP021"}), fix=True).check(source, "train.py")
    assert result.fixed_source is None
    assert [error.message for error in result.errors] == [
        "not fixed: LibCST cannot reproduce this file byte for byte (form feeds or lone CR line endings)"
    ]
