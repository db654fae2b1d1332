"""`positions.node_positions` must give exactly LibCST's PositionProvider ranges, for any node it is asked about."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amp_lint.parse.positions import NodeLocator, node_positions

ROOT = Path(__file__).resolve().parent.parent

EDGE_CASES = {
    "empty": "",
    "no-newline-at-end": "x = 1",
    "crlf": "import torch\r\nx = (1,\r\n     2)\r\n",
    "cr-only": "a = 1\rb = 2\r",
    "mixed": "a = 1\r\nb = 2\rc = 3\n",
    "form-feed-lines": "a = 1\n\x0c\n# page two\nb = 2\n",
    "decorators-and-comments": "# head\n\n@dec\n# between\n@other(1)\ndef f(x):  # trailing\n    '''doc'''\n    return x\n",
    "semicolons-and-blocks": "if a: b; c\nelse:\n    while d:\n        e()\n\n\n    f = [\n        1,\n    ]\n",
    "strings": 'x = """line\nline"""\ny = f"{x!r:>{w}}"\nz = b"\\x00"\n',
    "tabs": "if x:\n\tif y:\n\t\tz = 1\n",
    "with-items": "with (a as b, c as d):\n    pass\nwith torch.autocast('cuda'):\n    loss.backward()\n",
    "repeated-statements": "for x in y:\n    loss.backward()\nfor x in y:\n    loss.backward()\n"
    "def f():\n    for x in y:\n        loss.backward()\n",
    "nested-indents": "class A:\n  def f(self):\n      if x:\n       y = 1\n      else:\n          y = 2\n",
}


def _all_nodes(module: cst.Module):
    nodes = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nodes.append(node)
            return True

    module.visit(Collect())
    return nodes


def _sources():
    for name, text in EDGE_CASES.items():
        yield pytest.param(text, id=name)
    for path in sorted((ROOT / "fixtures").rglob("*.py"))[::7]:
        yield pytest.param(path.read_text(encoding="utf-8"), id=str(path.relative_to(ROOT)))
    yield pytest.param((ROOT / "amp_lint" / "analysis" / "builder.py").read_text(encoding="utf-8"), id="amp_lint/analysis/builder.py")


@pytest.mark.parametrize("text", list(_sources()))
def test_every_node_has_position_providers_range(text):
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _all_nodes(module)
    ranges = node_positions(module, nodes)
    assert {id(node): expected[node] for node in nodes} == ranges


@pytest.mark.parametrize("text", list(_sources()))
def test_a_few_nodes_alone_and_the_early_stop(text):
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _all_nodes(module)
    step = max(1, len(nodes) // 9)
    for node in nodes[::step]:
        assert node_positions(module, [node]) == {id(node): expected[node]}, type(node).__name__
    assert node_positions(module, nodes[-1:] + nodes[:1]) == {id(n): expected[n] for n in (nodes[0], nodes[-1])}


def test_nodes_of_another_tree_have_no_position():
    module = cst.parse_module("x = 1\n")
    stranger = cst.parse_expression("y")
    assert node_positions(module, [stranger]) == {}
    assert node_positions(module, []) == {}


@pytest.mark.parametrize("text", list(_sources()))
def test_placed_through_the_statements_above_them_every_node_has_position_providers_range(text, monkeypatch):
    """With the module's text and the model's parent map, nodes are placed through a statement whose
    text is unique in the file; the ranges and line spans must be the same as a whole-module pass."""
    import amp_lint.engine.checker  # noqa: F401 (the rules before the model: their modules import each other)
    from amp_lint.parse import positions
    from amp_lint.analysis.builder import build_model

    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _all_nodes(module)
    through_module = set()
    whole_pass = positions._generate_until_found

    def counted(tree, wanted):
        through_module.update(wanted)
        return whole_pass(tree, wanted)

    monkeypatch.setattr(positions, "_generate_until_found", counted)
    monkeypatch.setattr(positions, "_STATEMENT_PLACEMENTS", 10**9)  # every node through statements, however many
    parents = build_model(module).parents
    locator = NodeLocator(module, text, parents)
    locator.want(id(node) for node in nodes)
    assert {id(node): locator.range_of(id(node)) for node in nodes} == {id(node): expected[node] for node in nodes}
    code_nodes = {id(node) for node in nodes if id(node) in parents}  # what the model walked: what findings name
    placed_by_a_whole_pass = len(through_module & code_nodes)
    plain = NodeLocator(module)
    plain.want(id(node) for node in nodes)
    assert [locator.line_span_of(id(n)) for n in nodes] == [plain.line_span_of(id(n)) for n in nodes]
    if module.code == text and len(nodes) > 200:
        assert placed_by_a_whole_pass < len(code_nodes) // 10, "code nodes should be placed through a statement"


def test_a_statement_repeated_in_the_file_is_placed_through_the_unique_one_above_it():
    import amp_lint.engine.checker  # noqa: F401
    from amp_lint.analysis.builder import build_model

    text = "def f():\n    loss.backward()\n\n\ndef g():\n    loss.backward()\n"
    module = cst.parse_module(text)
    calls = [node for node in _all_nodes(module) if isinstance(node, cst.Call)]
    locator = NodeLocator(module, text, build_model(module).parents)
    locator.want(id(call) for call in calls)
    assert [locator.range_of(id(call)).start.line for call in calls] == [2, 6]


@pytest.mark.parametrize("text", list(_sources()))
def test_many_nodes_are_placed_by_one_whole_pass_with_the_same_ranges(text):
    """Past `_STATEMENT_PLACEMENTS` nodes, one generation of the module (linear) places them all."""
    import amp_lint.engine.checker  # noqa: F401
    from amp_lint.analysis.builder import build_model

    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _all_nodes(module)
    locator = NodeLocator(module, text, build_model(module).parents)
    locator.want(id(node) for node in nodes)
    assert {id(node): locator.range_of(id(node)) for node in nodes} == {id(node): expected[node] for node in nodes}
