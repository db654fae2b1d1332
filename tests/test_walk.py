"""`walk.children_in_source_order` and `walk.visit_read_only` must do exactly what LibCST's own do."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amp_lint.analysis.walk import children_in_source_order, visit_read_only

ROOT = Path(__file__).resolve().parent.parent

# Every kind of statement and expression LibCST has a node for, or near enough.
EVERYTHING = '''
from __future__ import annotations
import a.b as c, d
from .. import (e as f, g)
from . import *
@dec(1, *xs, k=2, **kw)
async def h(p, /, q: int = 1, *args, r, s=2, **kwargs) -> "T":
    """doc"""
    global G
    nonlocal_ = lambda x, *y, z=3, **w: (x, y)
    async with a as (b, c), d:
        async for i in j:
            await k
            yield l
            yield from m
    try:
        pass
    except (E1, E2) as err:
        raise X from err
    except E3:
        pass
    else:
        del n[1:2:3], o.p
    finally:
        assert q, "r"
    while s:
        break
    else:
        continue
    if t := u:
        v += 1
    elif w:
        x: int = 2
    else:
        return
    match y:
        case [1, *rest] | {"k": v, **kw} if rest:
            pass
        case Point(x=0, y=_) as pt:
            pass
    z = [i for i in range(3) if i] + {i: j for i, j in k} - {*s} @ (g for g in h)
    f"{a!r:>{w}} {b=}" "y" 'z', b"x"
    print(not a, -b, a if b else c, a < b <= c is not d in e, a and b or c, ...)
type Alias[T] = list[T]
class C[T](B, metaclass=M):
    x: int
    def m(self): return self.x; pass
'''


def _sources():
    yield pytest.param(EVERYTHING, id="everything")
    for path in sorted((ROOT / "fixtures").rglob("*.py"))[::5]:
        yield pytest.param(path.read_text(encoding="utf-8"), id=str(path.relative_to(ROOT)))
    yield pytest.param((ROOT / "amp_lint" / "conversion" / "planner.py").read_text(encoding="utf-8"), id="amp_lint/conversion/planner.py")


def _nodes(module: cst.Module):
    pending, nodes = [module], []
    while pending:
        node = pending.pop()
        nodes.append(node)
        pending.extend(node.children)
    return nodes


@pytest.mark.parametrize("text", list(_sources()))
def test_children_in_source_order_are_libcsts_children(text):
    module = cst.parse_module(text)
    for node in _nodes(module):
        assert [id(c) for c in children_in_source_order(node)] == [id(c) for c in node.children], type(node).__name__


class _Recorder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.calls.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)  # a skipped subtree, too

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.calls.append(("leave", id(original_node)))


@pytest.mark.parametrize("text", list(_sources()))
def test_a_read_only_visit_makes_libcsts_calls_in_libcsts_order(text):
    module = cst.parse_module(text)
    ours, libcsts = _Recorder(), _Recorder()
    visit_read_only(module, ours)
    module.visit(libcsts)
    assert ours.calls == libcsts.calls


def test_a_visitor_with_attribute_hooks_gets_libcsts_own_visit():
    seen = []

    class WithFieldHook(cst.CSTVisitor):
        def visit_Call_func(self, node: cst.Call) -> None:
            seen.append(node)

    visit_read_only(cst.parse_module("f(g(1))\n"), WithFieldHook())
    assert len(seen) == 2
