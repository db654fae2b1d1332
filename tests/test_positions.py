"""`positions.node_positions` must give exactly LibCST's PositionProvider ranges, for any node it is asked about."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amp_lint.positions import node_positions

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
    yield pytest.param((ROOT / "amp_lint" / "model.py").read_text(encoding="utf-8"), id="amp_lint/model.py")


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
