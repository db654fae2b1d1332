"""The syntax tree's shape and what a statement reads, assigns and calls; small CST edits the conversion uses."""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.walk import children_in_source_order, visit_read_only

Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
Block = Union[cst.IndentedBlock, cst.Module]

# --- the syntax tree's shape --------------------------------------------------------------------------


class SyntaxTree:
    """Parents and source order of every node of the module (by id)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parent: Dict[int, cst.CSTNode] = {}
        self.order: Dict[int, int] = {}
        stack: List[cst.CSTNode] = [module]
        counter = 0
        while stack:
            node = stack.pop()
            self.order[id(node)] = counter
            counter += 1
            children = children_in_source_order(node)
            for child in children:
                self.parent[id(child)] = node
            stack.extend(reversed(children))

    def parent_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parent.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent.get(id(node))
        while current is not None:
            yield current
            current = self.parent.get(id(current))

    def position(self, node: cst.CSTNode) -> int:
        return self.order[id(node)]

    def is_inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return any(a is outer for a in self.ancestors(node))

    def block_of(self, statement: cst.CSTNode) -> Optional[Block]:
        """The block whose body lists the statement (None for a one-line suite or a nested expression)."""
        parent = self.parent_of(statement)
        if isinstance(parent, (cst.IndentedBlock, cst.Module)) and any(s is statement for s in parent.body):
            return parent
        return None

    def child_in(self, node: cst.CSTNode, block: Block) -> Optional[Statement]:
        """The statement of `block`'s body that is, or holds, `node`."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            parent = self.parent_of(current)
            if parent is block:
                return current if any(s is current for s in block.body) else None
            current = parent
        return None

    def enclosing_statement(self, node: cst.CSTNode) -> Optional[Statement]:
        """The innermost statement listed in a block that holds `node`."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            if isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and self.block_of(current):
                return current
            current = self.parent_of(current)
        return None

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor
        return None

    def loops_around(self, node: cst.CSTNode) -> List[Union[cst.For, cst.While]]:
        """Loops whose body holds `node`, inside its function, outermost first."""
        loops = []
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(ancestor, (cst.For, cst.While)) and child is ancestor.body:
                loops.append(ancestor)
            child = ancestor
        return list(reversed(loops))


# --- what a statement reads, assigns and calls ---------------------------------------------------------


class StatementFacts(cst.CSTVisitor):
    """Names a statement assigns and reads, and the calls it makes (nested functions and lambdas excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.assigned: Set[str] = set()
        self.reads: Set[str] = set()
        self.calls: List[cst.Call] = []
        self.attribute_reads: List[cst.Attribute] = []
        self._skip: Set[int] = set()

    def _target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._target(element.value)
        elif isinstance(target, cst.StarredElement):
            self._target(target.value)
        elif isinstance(target, cst.Subscript):
            key = dotted_name(target.value)
            if key is not None:
                self.assigned.add(key)
        else:
            key = dotted_name(target)
            if key is not None:
                self.assigned.add(key)
                self._mark_target(target)

    def _mark_target(self, target: cst.BaseExpression) -> None:
        self._skip.add(id(target))
        while isinstance(target, cst.Attribute):
            target = target.value
            self._skip.add(id(target))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node.name is not None:
            self.assigned.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.assigned.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._target(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        key = dotted_name(node.target)
        if key is not None:
            self.assigned.add(key)
            self.reads.add(key)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._target(node.asname.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        if id(node) in self._skip:
            return
        self.attribute_reads.append(node)
        key = dotted_name(node)
        if key is not None:
            self.reads.add(key)

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._skip:
            self.reads.add(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def statement_facts(node: cst.CSTNode) -> StatementFacts:
    facts = StatementFacts()
    visit_read_only(node, facts)
    return facts


def target_names(target: cst.BaseExpression) -> Set[str]:
    """Names an assignment target (`opt`, `(a, b)`, `x.y`) binds."""
    facts = StatementFacts()
    facts._target(target)
    return facts.assigned


def plain_assignments(statement: cst.CSTNode) -> Set[str]:
    """Names a simple statement overwrites (`x = ...`): an earlier value of them no longer flows on."""
    killed: Set[str] = set()
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    elements = target.target.elements if isinstance(target.target, cst.Tuple) else [target.target]
                    for element in elements:
                        value = getattr(element, "value", element)
                        key = dotted_name(value)
                        if key is not None:
                            killed.add(key)
    return killed


def unwrap_method_chain(value: cst.BaseExpression) -> cst.BaseExpression:
    """`Net().to(device).train()` -> `Net()`."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("to", "cuda", "cpu", "train", "eval", "float")
        and isinstance(value.func.value, cst.Call)
    ):
        value = value.func.value
    return value

def same_branch(a: Tuple[cst.If, bool], b: Tuple[cst.If, bool]) -> bool:
    return a[0] is b[0] and a[1] == b[1]


def without_parens(expression: cst.BaseExpression) -> cst.BaseExpression:
    if getattr(expression, "lpar", None) and getattr(expression, "rpar", None):
        return expression.with_changes(lpar=[], rpar=[])
    return expression


def step_through_scaler(scaler: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`optimizer.step(**kwargs)` -> `scaler.step(optimizer, **kwargs)` (GradScaler.step passes the arguments on)."""

    def change(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        first = cst.Arg(value=node.func.value)
        if node.args:
            first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return cst.Call(
            func=cst.Attribute(value=cst.parse_expression(scaler), attr=cst.Name("step")),
            args=[first, *node.args],
            lpar=node.lpar,
            rpar=node.rpar,
        )

    return change


def add_parameter(params: cst.CSTNode, name: str) -> cst.CSTNode:
    """Add `name` as the last parameter (keyword-only when defaults or `*args` come before it)."""
    assert isinstance(params, cst.Parameters)
    new = cst.Param(name=cst.Name(name))
    regular = list(params.params)
    keyword_only = list(params.kwonly_params)
    if not keyword_only and params.star_arg is cst.MaybeSentinel.DEFAULT and not any(p.default for p in regular):
        if params.star_kwarg is None:
            return params.with_changes(params=append_with_comma(regular, new))
    if params.star_arg is cst.MaybeSentinel.DEFAULT:
        return params.with_changes(star_arg=cst.ParamStar(), kwonly_params=append_with_comma(keyword_only, new))
    return params.with_changes(kwonly_params=append_with_comma(keyword_only, new))


def append_with_comma(items: List, new):
    """Append to a comma-separated list, keeping a trailing comma and a one-per-line layout."""
    if not items:
        return [new]
    last = items[-1]
    if isinstance(last.comma, cst.Comma):
        # `a,\n    b,\n)`: the new item takes the last one's trailing comma; the last one takes the previous layout.
        previous = items[-2].comma if len(items) > 1 and isinstance(items[-2].comma, cst.Comma) else None
        spacing = previous if previous is not None else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return items[:-1] + [last.with_changes(comma=spacing), new.with_changes(comma=last.comma)]
    return items + [new]


def add_keyword(node: cst.CSTNode, name: str) -> cst.CSTNode:
    assert isinstance(node, cst.Call)
    new = cst.Arg(
        value=cst.Name(name),
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    return node.with_changes(args=append_with_comma(list(node.args), new))


# --- the optimizer's checkpoint -------------------------------------------------------------------------


def restored_checkpoint(statement: cst.CSTNode, optimizer: str) -> Optional[str]:
    """`checkpoint` for the statement `optimizer.load_state_dict(checkpoint["optimizer"])`: the checkpoint the
    optimizer's state is restored from, where the scaler's restore beside it can read it again (a name or an
    attribute: `ckpt`, `state`, `self.resume_state`). None for any other statement, and for a checkpoint that
    is not a name: `torch.load(path)["optimizer"]` would be loaded a second time, and a whole state dict
    (`optimizer.load_state_dict(torch.load("optimizer.pt"))`) holds no scaler entry to read."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    call = small.value if isinstance(small, cst.Expr) else None
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "load_state_dict"
        and dotted_name(call.func.value) == optimizer
        and len(call.args) == 1
        and call.args[0].keyword is None
        and isinstance(call.args[0].value, cst.Subscript)
    ):
        return None
    checkpoint = call.args[0].value.value
    if dotted_name(checkpoint) is None:
        return None
    return cst.Module([]).code_for_node(checkpoint)


def guarded_scaler_restore(scaler: str, checkpoint: str, key: str) -> str:
    """`if "scaler" in checkpoint: scaler.load_state_dict(checkpoint["scaler"])`: a checkpoint written before
    the conversion has no scaler entry, and resuming from it must still work (the scaler starts afresh)."""
    return f"if {key} in {checkpoint}:\n    {scaler}.load_state_dict({checkpoint}[{key}])\n"
