"""Small readers of LibCST nodes that every step of the analysis shares.

A node's source text (`code_of`), literal values (`literal_string`, `literal_bool`), the argument a call
binds to a parameter (`argument`), the alternatives of a conditional value (`alternatives`), the tensor an
expression passes on unchanged in magnitude (`tensor_source`), and the
statement and loop node types the model records events in. Nothing here knows about AMP.
"""

from __future__ import annotations

import re

from typing import Callable, Iterator, Optional, Tuple, Union

import libcst as cst

Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
Loop = Union[cst.For, cst.While]


# methods that pass a tensor on unchanged in magnitude: `scaler.scale(loss).mean()` is still scaled
MAGNITUDE_PRESERVING_METHODS = frozenset(
    {"mean", "sum", "float", "half", "double", "to", "squeeze", "view", "reshape", "contiguous", "clone", "type_as"}
)


def tensor_source(
    expr: cst.BaseExpression, is_cast: Optional[Callable[[cst.BaseExpression], bool]] = None
) -> cst.BaseExpression:
    """The tensor an expression passes on unchanged in magnitude: `x.mean()`, `x.sum()`, an element or slice
    `x[0]`, and `cast(T, x)` where `is_cast(func)` says the callee is `typing.cast`."""
    for _ in range(8):
        if isinstance(expr, cst.Subscript):
            expr = expr.value
            continue
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in MAGNITUDE_PRESERVING_METHODS:
                expr = func.value
                continue
            if is_cast is not None and len(expr.args) == 2 and is_cast(func):
                expr = expr.args[1].value
                continue
        break
    return expr


def literal_string(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def literal_bool(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def argument(call: cst.Call, position: Optional[int], keyword: str) -> Optional[cst.Arg]:
    """The argument bound to a parameter, by keyword or by position (None when absent or unknown)."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is not None and position < len(positional):
        # A *args before the position makes the position unknowable.
        for arg in call.args[: call.args.index(positional[position])]:
            if arg.star:
                return None
        return positional[position]
    return None


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def alternatives(value: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """`a if c else b` may be either side; `(x)` is x.

    A loop, not recursion: nested generators would cost the square of a long `a or b or ...` chain.
    """
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.IfExp):
            pending += (node.orelse, node.body)
        elif isinstance(node, cst.BooleanOperation):
            pending += (node.right, node.left)
        else:
            yield node


def guarded_alternatives(value: cst.BaseExpression) -> Iterator[Tuple[cst.BaseExpression, Tuple[Tuple[cst.BaseExpression, bool], ...]]]:
    """`alternatives`, each with the tests of the conditional values that choose it: `GradScaler() if amp else
    None` gives (`GradScaler()`, ((amp, True),)) and (`None`, ((amp, False),))."""
    pending = [(value, ())]
    while pending:
        node, tests = pending.pop()
        if isinstance(node, cst.IfExp):
            pending += ((node.orelse, tests + ((node.test, False),)), (node.body, tests + ((node.test, True),)))
        elif isinstance(node, cst.BooleanOperation):
            pending += ((node.right, tests), (node.left, tests))
        else:
            yield node, tests


def own_nodes(body: cst.CSTNode):
    """The nodes of a function body (or any block), nested functions, classes and lambdas left out: what
    runs when the block runs."""
    stack = [body]
    while stack:
        node = stack.pop()
        yield node
        for child in node.children:
            if not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                stack.append(child)


def own_returns(function: cst.FunctionDef) -> list:
    """The values `function` itself returns (not those of functions and classes nested in it)."""
    return [node.value for node in own_nodes(function.body) if isinstance(node, cst.Return) and node.value is not None]


def names_in(node: cst.CSTNode) -> set:
    """The plain names an expression reads: `a` of `a.b.c` (not `b`, `c`), keyword arguments' values (not
    their keywords)."""
    found, pending = set(), [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        elif isinstance(current, cst.Attribute):
            pending.append(current.value)
        elif isinstance(current, cst.Arg):
            pending.append(current.value)
        else:
            pending.extend(current.children)
    return found


def ifs_in(loop: cst.CSTNode) -> set:
    """The ids of the `if` statements a loop's body runs (not those of functions defined in it)."""
    return {id(node) for node in own_nodes(loop.body) if isinstance(node, cst.If)}


def loop_counters(loop: cst.CSTNode) -> set:
    """What a loop advances by one on every pass, as code: the target of `for i in range(...)`, the index
    of `for i, batch in enumerate(...)`, and whatever its body increments (`step += 1`,
    `self.global_step += 1`). A test of one (`if i % 2:`) need not go the same way on two passes in a row;
    a batch (`for x in loader`) is data, not a counter."""
    found = set()
    if isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call):
        called = code_of(loop.iter.func)
        target = loop.target
        if called == "enumerate" and isinstance(target, (cst.Tuple, cst.List)) and target.elements:
            target = target.elements[0].value
        if called in ("range", "enumerate") and isinstance(target, cst.Name):
            found.add(target.value)
    for node in own_nodes(loop.body):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
            found.add(code_of(node.target))
    return found


def tests_any(test: cst.CSTNode, names: set) -> bool:
    """Does the test's code name any of `names` (plain or dotted, as whole names)?"""
    text = code_of(test)
    return any(re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", text) for name in names)
