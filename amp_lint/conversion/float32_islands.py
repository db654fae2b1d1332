"""Products that float16 cannot hold: a Gram matrix (`torch.mm(f, f.t())`, `features.bmm(features_t)` with
`features_t = features.transpose(1, 2)`, `x @ x.T`) sums h*w products of a feature map with itself; on a
400x400 map that is 160,000 terms, and the sum overflows float16 (65504) long before any division after it.

Under float16 autocast `mm`/`bmm`/`matmul` run in float16, so the conversion keeps such a product in float32:

    with torch.amp.autocast(f.device.type, enabled=False):
        G = torch.mm(f.float(), f.t().float())

(autocast off for that statement, its inputs cast up; the device comes from the tensor itself, so a helper needs
no device of its own). A product written inline in the training loop's forward slice is refused with the reason
instead (its statement is inside the autocast block the conversion writes; move it into a function).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import libcst as cst

from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.steps import callee_scope
from amp_lint.analysis.walk import visit_read_only
from amp_lint.fixes.reindent import shifted

PRODUCTS = ("mm", "bmm", "matmul")
TRANSPOSES = ("t", "transpose", "permute", "T", "mT", "swapaxes")
MAX_DEPTH = 3


@dataclass(eq=False)
class SelfProduct:
    """One Gram-like product: the call (or `@` operation), its operands, the statement holding it, its scope."""

    node: cst.CSTNode  # cst.Call or cst.BinaryOperation
    operands: List[cst.BaseExpression]
    base: str  # the tensor multiplied by its own transpose
    statement: cst.CSTNode
    scope: Scope


def _transposed_base(expression: cst.BaseExpression, aliases: Dict[str, str]) -> Optional[str]:
    """`f.t()`, `f.transpose(1, 2)`, `f.T` -> "f"; a name assigned from one of those -> its base."""
    if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
        if expression.func.attr.value in TRANSPOSES:
            return dotted_name(expression.func.value)
    if isinstance(expression, cst.Attribute) and expression.attr.value in ("T", "mT"):
        return dotted_name(expression.value)
    key = dotted_name(expression)
    return aliases.get(key) if key is not None else None


def _operands(node: cst.CSTNode, qualify) -> Optional[List[cst.BaseExpression]]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return [node.left, node.right]
    if not isinstance(node, cst.Call):
        return None
    func = node.func
    args = [a.value for a in node.args if a.keyword is None and not a.star]
    qualified = qualify(func) or ""
    if qualified in tuple(f"torch.{p}" for p in PRODUCTS) and len(args) == 2:
        return args
    if isinstance(func, cst.Attribute) and func.attr.value in PRODUCTS and not qualified and len(args) == 1:
        return [func.value, args[0]]
    return None


def self_products(scope: Scope, statements: List[cst.CSTNode], tree) -> List[SelfProduct]:
    """The Gram-like products in `statements` (of `scope`)."""
    aliases: Dict[str, str] = {}
    for key, values in scope.assignments.items():
        if len(values) == 1:
            base = _transposed_base(values[0][0], {})
            if base is not None:
                aliases[key] = base
    found: List[SelfProduct] = []
    for statement in statements:
        nodes: List[cst.CSTNode] = []

        class Collect(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return False

            def visit_Call(self, node: cst.Call) -> None:
                nodes.append(node)

            def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
                nodes.append(node)

        visit_read_only(statement, Collect())
        for node in nodes:
            operands = _operands(node, scope.names.qualify)
            if operands is None:
                continue
            first, second = dotted_name(operands[0]), _transposed_base(operands[1], aliases)
            if first is None or first != second:
                first, second = _transposed_base(operands[0], aliases), dotted_name(operands[1])
            if first is not None and first == second:
                found.append(SelfProduct(node, operands, first, tree.enclosing_statement(node) or statement, scope))
    return found


def products_through_calls(ctx, scope: Scope, statements: List[cst.CSTNode]) -> List[SelfProduct]:
    """The products in the helpers (functions and methods of this file) that `statements` call, a few levels down."""
    found: List[SelfProduct] = []
    seen: Set[int] = set()

    def visit(owner: Scope, nodes: List[cst.CSTNode], depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        for event in owner.events:
            if event.kind is not EventKind.CALL or not any(ctx.tree.is_inside(event.call, n) or event.call is n for n in nodes):
                continue
            callee = callee_scope(ctx.model, event)
            if callee is None or id(callee.node) in seen or not isinstance(callee.node, cst.FunctionDef):
                continue
            seen.add(id(callee.node))
            body = list(callee.node.body.body) if isinstance(callee.node.body, cst.IndentedBlock) else []
            found.extend(self_products(callee, body, ctx.tree))
            visit(callee, body, depth + 1)

    visit(scope, statements, 1)
    return found


def keep_in_float32(node: cst.CSTNode, product: SelfProduct, torch_name: str, indent: str = "    ") -> cst.CSTNode:
    """The statement wrapped in `with torch.amp.autocast(<base>.device.type, enabled=False):`, operands `.float()`."""
    assert isinstance(node, cst.BaseStatement)

    def up(expression: cst.BaseExpression) -> cst.BaseExpression:
        inner = expression
        if not isinstance(inner, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            inner = inner.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return cst.Call(func=cst.Attribute(value=inner, attr=cst.Name("float")))

    original = product.node
    if isinstance(original, cst.BinaryOperation):
        new: cst.CSTNode = original.with_changes(left=up(original.left), right=up(original.right))
    else:
        assert isinstance(original, cst.Call)
        func = original.func
        if isinstance(func, cst.Attribute) and len(product.operands) == 2 and product.operands[0] is func.value:
            args = list(original.args)
            new = original.with_changes(
                func=func.with_changes(value=up(func.value)), args=[args[0].with_changes(value=up(args[0].value))]
            )
        else:
            args = [a.with_changes(value=up(a.value)) if a.keyword is None and not a.star else a for a in original.args]
            new = original.with_changes(args=args)
    body = node.deep_replace(original, new)
    assert isinstance(body, cst.BaseStatement)
    device = f"{product.base}.device.type"
    item = cst.WithItem(cst.parse_expression(f"{torch_name}.amp.autocast({device}, enabled=False)"))
    return cst.With(
        items=[item],
        body=cst.IndentedBlock(body=[shifted(body.with_changes(leading_lines=()), indent)]),
        leading_lines=body.leading_lines,
    )
