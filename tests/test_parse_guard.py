"""The guard against files that LibCST's parser would take minutes on (`amp_lint.parse.guard`).

Every chain shape that LibCST parses in super-linear time is refused in well under a second once it
is past the limit, and let through below it; long shapes that LibCST parses in linear time (lists,
`and` chains, comparisons, `elif` chains) are analysed whatever their length.
"""

from __future__ import annotations

import ast
import sys
import time

import pytest

from amp_lint.parse import guard as parse_guard
from amp_lint.diagnostics import Location
from amp_lint.parse.guard import PARSE_COST_LIMIT, check_parse_cost, costliest_chain
from amp_lint.engine.runner import CheckConfig, check_text

from snippets import MISSING_UPDATE

TRAIN = MISSING_UPDATE  # the AMP021 loop (tests/snippets.py)

# Expressions of `links` links, one per shape that LibCST parses in time growing with the square of
# the chain (with LibCST 1.9, 1,000 links take 0.1 s to 0.9 s, 2,000 four or five times as long).
CHAINS = {
    "sum": lambda links: "+".join(["1"] * (links + 1)),
    "sums of products": lambda links: "".join(f"a{'+-*/'[i % 4]}" for i in range(2 * links)) + "a",
    "shifts": lambda links: "<<".join(["a"] * (links + 1)),
    "power": lambda links: "**".join(["2"] * (links + 1)),
    "attributes": lambda links: "a" + ".b" * links,
    "calls": lambda links: "f" + "(1)" * links,
    "subscripts": lambda links: "a" + "[0]" * links,
    "method calls": lambda links: "a" + ".b()" * (links // 2),
    "unary minus": lambda links: "- " * links + "x",
    "not": lambda links: "not " * links + "x",
    "lambdas": lambda links: "lambda: " * links + "1",
    "conditionals": lambda links: "a if b else " * links + "a",
    "sum over lines": lambda links: "(\n" + "".join(f"    + term_{i}  # comment\n" for i in range(links)) + ")",
    "methods over lines": lambda links: "(\n    b\n" + "".join(f"    .add({i})\n" for i in range(links // 2)) + ")",
    "calls broken inside": lambda links: "f" + "(\n    1\n)" * links,
    "continued lines": lambda links: " \\\n".join(["1 +"] * links) + " 1",
}


@pytest.fixture
def deep_recursion():
    """The recursion limit amp-lint's check thread runs with: Python's `ast` recurses per link."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(60_000)
    yield
    sys.setrecursionlimit(previous)


def statement(expression: str) -> str:
    return TRAIN + "total = " + expression + "\n"


@pytest.mark.parametrize("shape", CHAINS)
def test_chain_past_the_limit_is_refused_in_well_under_a_second(deep_recursion, shape):
    source = statement(CHAINS[shape](2_000))
    compile(source, "deep.py", "exec")
    started = time.process_time()  # CPU seconds: the load of other processes does not count
    error = check_parse_cost(source, "deep.py")
    assert time.process_time() - started < 1.0
    assert error is not None, "not refused"
    assert error.message.startswith("not analysed: an expression ")


@pytest.mark.parametrize("shape", CHAINS)
def test_chain_well_under_the_limit_is_let_through(shape):
    assert check_parse_cost(statement(CHAINS[shape](300)), "ok.py") is None


def test_refusal_says_how_long_the_chain_is_and_where_it_starts(deep_recursion):
    error = check_parse_cost(statement("+".join(["1"] * 2_000)), "deep.py")
    assert "an expression with 1,999 chained operations is too long for LibCST's parser" in error.message
    assert error.location == Location(TRAIN.count("\n") + 1, len("total = ") + 1)


def test_short_chain_on_a_huge_operand_is_refused(deep_recursion):
    # LibCST copies the operand at every link: 100 attribute accesses on a 20,000-element list take seconds.
    error = check_parse_cost(statement("[" + ", ".join(["1"] * 20_000) + "]" + ".b" * 100), "deep.py")
    assert error is not None and "100 chained operations" in error.message


def test_chain_deeper_than_pythons_own_parser_allows_is_refused():
    started = time.process_time()
    error = check_parse_cost(statement("-" * 100_000 + "x"), "deep.py")
    assert time.process_time() - started < 1.0
    assert error is not None and "nested too deeply even for Python's own parser" in error.message


def test_cost_is_the_sum_of_the_sizes_each_link_extends():
    # a.b.c: Attribute(Attribute(Name)) -> links of size 3 and 2.
    chain = costliest_chain(ast.parse("x = a.b.c"))
    assert (chain.cost, chain.links) == (5, 2)
    # Brackets end a chain: the list and its elements are no link.
    assert costliest_chain(ast.parse("x = [1 + 1, 2]")).cost == 3
    sum_1000 = costliest_chain(ast.parse("+".join(["1"] * 1_000)))
    assert sum_1000.links == 999 and sum_1000.cost <= PARSE_COST_LIMIT


LINEAR = {
    "100 kB list": "[" + ", ".join(["1"] * 35_000) + "]",
    "and chain": " and ".join(["flag"] * 20_000),
    "or chain": " or ".join(["flag"] * 20_000),
    "comparisons": " < ".join(["a"] * 20_000),
    "string concatenation": "(" + " ".join(["'a'"] * 3_000) + ")",
    "dict": "{" + ", ".join(f"'k{i}': f(x.{i % 7 and 'a' or 'b'})" for i in range(10_000)) + "}",
    "199 nested brackets": "[" * 199 + "]" * 199,
    "f-string": "f'" + "{a}" * 20_000 + "'",
}


@pytest.mark.parametrize("shape", LINEAR)
def test_long_linear_shapes_are_let_through(deep_recursion, shape):
    assert check_parse_cost(statement(LINEAR[shape]), "data.py") is None


def test_elif_chain_is_let_through():
    assert check_parse_cost(TRAIN + "if a:\n    pass\n" + "elif a:\n    pass\n" * 5_000, "branches.py") is None


@pytest.mark.parametrize(
    "expression", [LINEAR["100 kB list"], " and ".join(["flag"] * 2_000)], ids=["100 kB list", "and chain"]
)
def test_long_linear_shapes_are_analysed(expression):
    config = CheckConfig(frozenset({"AMP021"}), fix=False, unsafe_fixes=False, with_edits=False, write=False)
    outcome = check_text(statement(expression), "data.py", config)
    assert outcome.errors == []
    assert [(d.code, d.location.row) for d in outcome.diagnostics] == [("AMP021", 8)]


def test_ordinary_files_do_not_pay_for_pythons_parser(monkeypatch):
    # Long files of ordinary code: no logical line is long enough to hold a costly chain.
    step = "def step_{0}(model, batch):\n    return model(batch.to('cuda')).loss * {0} + 1\n"
    big = TRAIN + "".join(step.format(i) for i in range(5_000))
    black_style = TRAIN + "result = (\n" + "".join(f"    first_{i}\n    + second_{i}\n" for i in range(50)) + ")\n"

    def refuse(*args, **kwargs):
        raise AssertionError("the text test should have let this file through")

    monkeypatch.setattr(parse_guard.ast, "parse", refuse)
    assert check_parse_cost(big, "big.py") is None
    assert check_parse_cost(black_style, "black.py") is None
    assert check_parse_cost(big.replace("\n", "\r\n"), "crlf.py") is None
