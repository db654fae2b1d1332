"""`amp_lint.parse.cst_parse`: LibCST's parse with its leaves' re-validation skipped builds the same tree,
refuses what LibCST refuses, and leaves validation on for every node built outside a parse."""

from __future__ import annotations

import threading
from pathlib import Path

import libcst as cst
import pytest
from libcst._nodes.whitespace import Comment, SimpleWhitespace

from amp_lint.parse.cst_parse import parse_module

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_the_tree_is_libcsts_own():
    texts = [path.read_text(encoding="utf-8") for path in sorted(FIXTURES.rglob("*.py"))]
    texts.append("x = (a  \\\n    + b)  # c\n\f\nif  x :\tpass\r\n")
    for text in texts:
        try:
            expected = cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue
        parsed = parse_module(text)
        assert parsed.deep_equals(expected) and parsed.code == expected.code


def test_what_libcst_refuses_to_build_is_still_refused():
    with pytest.raises(cst.CSTValidationError, match="space after 'in'"):
        parse_module("for x in*a:\n    pass\n")


def test_nodes_built_outside_a_parse_are_validated():
    parse_module("x = 1  # done\n")
    for build in (lambda: cst.Name("not a name"), lambda: SimpleWhitespace("x"), lambda: Comment("no hash")):
        with pytest.raises(cst.CSTValidationError):
            build()


def test_parses_in_several_threads_leave_validation_on():
    text = "def f(a, b):\n    return a + b  # sum\n" * 200
    errors = []

    def parse_many():
        try:
            for _ in range(20):
                assert parse_module(text).code == text
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")
