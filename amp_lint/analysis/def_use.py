"""The def-use index of one file: which statements bind which names, per scope, for the value resolution.

`DefUseIndex(module)` is one walk over the file's statements (no LibCST metadata): a `NameScope` per
module and function with its `Binding`s (the value assigned, the statement's position in the scope's
body, whether it is unconditional there, whether it is only taken without CUDA), parameters, returns
and `ctx["dev"] = ...` items; a `ClassInfo` per class with its `self.x` assignments and methods.
`values.FileValues` asks it which bindings can reach a use (`NameScope.position_of` places the use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from amp_lint.analysis.names import NameTable, dotted_name
from amp_lint.analysis.walk import code_fields


@dataclass(eq=False)
class Binding:
    value: Optional[cst.BaseExpression]  # None: bound in a way that is not followed (a for target, an import)
    position: int  # index of the statement of the scope's body that holds it
    direct: bool  # a statement of the scope's body itself (not under if/for/try/with)
    without_cuda: bool = False
    function: Optional["NameScope"] = None  # a `def`
    node: Optional[cst.CSTNode] = None  # the statement, for messages


@dataclass(eq=False)
class NameScope:
    node: Union[cst.Module, cst.FunctionDef]
    parent: Optional["NameScope"]
    names: NameTable
    body: Sequence[cst.CSTNode]
    cls: Optional["ClassInfo"] = None
    self_name: Optional[str] = None  # a method's first parameter
    bindings: Dict[str, List[Binding]] = field(default_factory=dict)
    params: Dict[str, Optional[cst.BaseExpression]] = field(default_factory=dict)
    declared_global: Set[str] = field(default_factory=set)
    declared_nonlocal: Set[str] = field(default_factory=set)
    items: Dict[Tuple[str, str], List[Binding]] = field(default_factory=dict)  # ctx["dev"] = ...
    mutated: Set[str] = field(default_factory=set)  # ctx[i] = ..., del ctx[...]
    returns: List[Tuple[Optional[cst.BaseExpression], int]] = field(default_factory=list)
    generator: bool = False
    decorators: Tuple[str, ...] = ()
    _positions: Optional[Dict[int, int]] = None
    _statement_index: Optional[Dict[int, int]] = None

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, cst.Module)

    def chain(self) -> Iterator["NameScope"]:
        scope: Optional[NameScope] = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def position_of(self, node: cst.CSTNode, parents: Optional[Dict[int, cst.CSTNode]] = None) -> Optional[int]:
        """The index of the statement of this scope's body that holds `node` (nested scopes excluded).

        With `parents` (node id -> the node above it, from the model's walk) it climbs from the node;
        otherwise it indexes the scope once.
        """
        if self._statement_index is None:
            self._statement_index = {id(statement): index for index, statement in enumerate(self.body)}
        if parents:
            current: Optional[cst.CSTNode] = node
            for _ in range(1000):
                if current is None:
                    break
                found = self._statement_index.get(id(current))
                if found is not None:
                    return found
                if isinstance(current, _OWN_NAMES) and current is not node:
                    return INSIDE_OWN_SCOPE
                current = parents.get(id(current))
        if self._positions is None:
            positions: Dict[int, int] = {}
            for index, statement in enumerate(self.body):
                stack: List[Tuple[cst.CSTNode, int]] = [(statement, index)]
                while stack:
                    current, here = stack.pop()
                    positions[id(current)] = here
                    if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                        if current is not statement:
                            continue
                        # Decorators, defaults and bases run in this scope; the body does not.
                        children: List[cst.CSTNode] = list(current.decorators)
                        children += [current.params] if isinstance(current, cst.FunctionDef) else list(current.bases)
                        stack.extend((child, here) for child in children)
                        continue
                    if isinstance(current, _OWN_NAMES):
                        here = INSIDE_OWN_SCOPE
                    for name in code_fields(type(current)):
                        value = getattr(current, name)
                        if isinstance(value, cst.CSTNode):
                            stack.append((value, here))
                        elif isinstance(value, (list, tuple)):
                            stack.extend((item, here) for item in value if isinstance(item, cst.CSTNode))
            self._positions = positions
        return self._positions.get(id(node))


# Expressions with names of their own (a lambda's parameters, a comprehension's targets): a use inside
# one is not resolved (`lambda device: torch.autocast(device)`).
_OWN_NAMES = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
INSIDE_OWN_SCOPE = -1


@dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    name: str
    bases: Tuple[str, ...]
    decorated: bool
    # `self.x = value` in a method (with the method's scope), `x = value` in the class body (scope None).
    attributes: Dict[str, List[Tuple[Binding, Optional[NameScope]]]] = field(default_factory=dict)
    methods: Dict[str, List[NameScope]] = field(default_factory=dict)
    enclosing: Optional[NameScope] = None


class DefUseIndex:
    """One walk over the file's statements: scopes, their bindings, classes, returns."""

    def __init__(self, module: cst.Module) -> None:
        self.scopes: Dict[int, NameScope] = {}
        self.classes: Dict[str, List[ClassInfo]] = {}
        self.foreign_attribute_writes: Set[str] = set()  # `obj.x = ...` with obj not `self`
        self.module_scope = self._new_scope(module, None, module.body, NameTable())
        self._block(module.body, self.module_scope, None, True, False, None)

    def release(self) -> None:
        """Break the index's reference cycles once no question will be asked of it (a binding of a `def`
        points at the function's scope, which points back at its parent's; a class at its methods' scopes,
        and they at it): the index, and the tree its scopes hold, then go with refcounting, not with the
        cyclic collector."""
        for scope in self.scopes.values():
            scope.parent, scope.cls, scope.bindings, scope.items = None, None, {}, {}
        for infos in self.classes.values():
            for info in infos:
                info.attributes, info.methods, info.enclosing = {}, {}, None

    def _new_scope(self, node, parent, body, names, cls=None) -> NameScope:
        scope = NameScope(node=node, parent=parent, names=names, body=body, cls=cls)
        self.scopes[id(node)] = scope
        return scope

    # --- statements ---
    def _block(self, body, scope: NameScope, position: Optional[int], direct: bool, without_cuda: bool, cls) -> None:
        for index, statement in enumerate(body):
            here = index if position is None else position
            self._statement(statement, scope, here, direct, without_cuda, cls)

    def _suite(self, suite, scope, position, without_cuda, cls) -> None:
        if isinstance(suite, cst.IndentedBlock):
            self._block(suite.body, scope, position, False, without_cuda, cls)
        elif isinstance(suite, cst.SimpleStatementSuite):
            self._small_statements(suite.body, suite, scope, position, False, without_cuda, cls)

    def _statement(self, statement, scope, position, direct, without_cuda, cls) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            self._small_statements(statement.body, statement, scope, position, direct, without_cuda, cls)
        elif isinstance(statement, cst.FunctionDef):
            self._function(statement, scope, position, direct, without_cuda, cls)
        elif isinstance(statement, cst.ClassDef):
            self._class(statement, scope, position, direct, without_cuda)
        elif isinstance(statement, cst.If):
            self._walrus(statement.test, scope, position)
            polarity = cuda_test(statement.test, (scope or self.module_scope).names)
            self._suite(statement.body, scope, position, without_cuda or polarity is False, cls)
            orelse = statement.orelse
            if isinstance(orelse, cst.If):
                self._statement(orelse, scope, position, False, without_cuda or polarity is True, cls)
            elif isinstance(orelse, cst.Else):
                self._suite(orelse.body, scope, position, without_cuda or polarity is True, cls)
        elif isinstance(statement, (cst.For, cst.While)):
            if isinstance(statement, cst.For):
                self._opaque_target(statement.target, scope, position, cls)
            else:
                self._walrus(statement.test, scope, position)
            self._suite(statement.body, scope, position, without_cuda, cls)
            if statement.orelse is not None:
                self._suite(statement.orelse.body, scope, position, without_cuda, cls)
        elif isinstance(statement, (cst.Try, cst.TryStar)):
            self._suite(statement.body, scope, position, without_cuda, cls)
            for handler in statement.handlers:
                if handler.name is not None:
                    self._opaque_target(handler.name.name, scope, position, cls)
                self._suite(handler.body, scope, position, without_cuda, cls)
            if statement.orelse is not None:
                self._suite(statement.orelse.body, scope, position, without_cuda, cls)
            if statement.finalbody is not None:
                self._suite(statement.finalbody.body, scope, position, without_cuda, cls)
        elif isinstance(statement, cst.With):
            for item in statement.items:
                if item.asname is not None:
                    self._opaque_target(item.asname.name, scope, position, cls)
            self._suite(statement.body, scope, position, without_cuda, cls)
        elif isinstance(statement, cst.Match):
            for case in statement.cases:
                for node in _walk(case.pattern):
                    name = None
                    if isinstance(node, (cst.MatchAs, cst.MatchStar)):
                        name = node.name
                    elif isinstance(node, cst.MatchMapping):
                        name = node.rest
                    if isinstance(name, cst.Name) and scope is not None:
                        self._bind(scope, name.value, Binding(None, position, False))
                self._suite(case.body, scope, position, without_cuda, cls)

    def _small_statements(self, smalls, statement, scope, position, direct, without_cuda, cls) -> None:
        for small in smalls:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    self._target(target.target, small.value, statement, scope, position, direct, without_cuda, cls)
                self._yields(small.value, scope)
            elif isinstance(small, cst.AnnAssign):
                if small.value is not None and scope is None:
                    # `device: str = "cuda:0"` in a class body: a field (dataclass, pydantic, NamedTuple)
                    # that the constructor may set.
                    self._opaque_target(small.target, scope, position, cls)
                elif small.value is not None:
                    self._target(small.target, small.value, statement, scope, position, direct, without_cuda, cls)
            elif isinstance(small, cst.AugAssign):
                self._opaque_target(small.target, scope, position, cls)
            elif isinstance(small, cst.Import):
                if scope is not None:
                    scope.names.bind_import(small)
                    for alias in small.names:
                        local = alias.asname.name if alias.asname is not None else alias.name
                        key = dotted_name(local) if isinstance(local, (cst.Name, cst.Attribute)) else None
                        if key is not None:
                            self._bind(scope, key.split(".")[0], Binding(None, position, direct))
            elif isinstance(small, cst.ImportFrom):
                if scope is not None:
                    scope.names.bind_import_from(small)
                    if not isinstance(small.names, cst.ImportStar):
                        for alias in small.names:
                            local = alias.asname.name if alias.asname is not None else alias.name
                            if isinstance(local, cst.Name):
                                self._bind(scope, local.value, Binding(None, position, direct))
            elif isinstance(small, cst.Global) and scope is not None:
                scope.declared_global.update(n.name.value for n in small.names)
            elif isinstance(small, cst.Nonlocal) and scope is not None:
                scope.declared_nonlocal.update(n.name.value for n in small.names)
            elif isinstance(small, cst.Del):
                self._opaque_target(small.target, scope, position, cls)
            elif isinstance(small, cst.Return) and scope is not None:
                scope.returns.append((small.value, position))
            elif isinstance(small, cst.Expr):
                self._yields(small.value, scope)

    def _yields(self, value, scope) -> None:
        if scope is not None and isinstance(value, cst.Yield):
            scope.generator = True

    def _walrus(self, expression, scope, position) -> None:
        """`if (d := pick()):` binds `d` in the scope (only tests are read: that is where walruses live)."""
        if scope is None:
            return
        pending = [expression]
        while pending:
            node = pending.pop()
            kind = type(node)
            if kind is cst.NamedExpr:
                if isinstance(node.target, cst.Name):
                    self._bind(scope, node.target.value, Binding(node.value, position, False))
                pending.append(node.value)
            elif kind is cst.BooleanOperation:
                pending += (node.left, node.right)
            elif kind is cst.UnaryOperation:
                pending.append(node.expression)
            elif kind is cst.Comparison:
                pending.append(node.left)
                pending += (c.comparator for c in node.comparisons)
            elif kind is cst.Call:
                pending.append(node.func)
                pending += (a.value for a in node.args)
            elif kind is cst.Attribute or kind is cst.Subscript:
                pending.append(node.value)
            elif kind is cst.Name or kind is cst.SimpleString or kind is cst.Integer:
                continue
            else:
                pending += [c for c in node.children if isinstance(c, cst.BaseExpression)]

    # --- targets ---
    def _target(self, target, value, statement, scope, position, direct, without_cuda, cls) -> None:
        if scope is None:  # a class body
            if isinstance(target, cst.Name) and cls is not None:
                cls.attributes.setdefault(target.value, []).append(
                    (Binding(None if cls.decorated else value, position, direct, without_cuda, node=statement), None)
                )
            return
        if isinstance(target, cst.Name):
            self._bind(scope, target.value, Binding(value, position, direct, without_cuda, node=statement))
        elif isinstance(target, cst.Attribute):
            owner = scope.cls
            if isinstance(target.value, cst.Name) and scope.self_name == target.value.value and owner is not None:
                owner.attributes.setdefault(target.attr.value, []).append(
                    (Binding(value, position, direct, without_cuda, node=statement), scope)
                )
            else:
                self.foreign_attribute_writes.add(target.attr.value)
        elif isinstance(target, cst.Subscript):
            self._item_target(target, Binding(value, position, direct, without_cuda, node=statement), scope)
        else:
            self._opaque_target(target, scope, position, cls)

    def _item_target(self, target: cst.Subscript, binding: Binding, scope: NameScope) -> None:
        if not isinstance(target.value, cst.Name):
            return
        key = subscript_key(target)
        if key is None:
            scope.mutated.add(target.value.value)
        else:
            scope.items.setdefault((target.value.value, key), []).append(binding)

    def _opaque_target(self, target, scope, position, cls) -> None:
        if scope is None:
            if isinstance(target, cst.Name) and cls is not None:
                cls.attributes.setdefault(target.value, []).append((Binding(None, position, False), None))
            return
        if isinstance(target, cst.Name):
            self._bind(scope, target.value, Binding(None, position, False))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._opaque_target(element.value, scope, position, cls)
        elif isinstance(target, cst.StarredElement):
            self._opaque_target(target.value, scope, position, cls)
        elif isinstance(target, cst.Attribute):
            if isinstance(target.value, cst.Name) and scope.self_name == target.value.value and scope.cls is not None:
                scope.cls.attributes.setdefault(target.attr.value, []).append((Binding(None, position, False), scope))
            else:
                self.foreign_attribute_writes.add(target.attr.value)
        elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            scope.mutated.add(target.value.value)

    def _bind(self, scope: NameScope, name: str, binding: Binding) -> None:
        if name in scope.declared_global and not scope.is_module:
            target = self.module_scope
            binding = Binding(None, 1 << 30, False)  # written by a function: not followed
        elif name in scope.declared_nonlocal:
            return  # the enclosing function's variable, written here: see _name (nonlocal makes it unknown)
        else:
            target = scope
        target.bindings.setdefault(name, []).append(binding)
        target.names.bind_local(name)

    # --- definitions ---
    def _function(self, node: cst.FunctionDef, scope, position, direct, without_cuda, cls) -> None:
        decorators = tuple(
            dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "" for d in node.decorators
        )
        if scope is None:  # a method: its scope's parent is the scope around the class
            parent = cls.enclosing
        else:
            parent = scope
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else (node.body,)
        function = self._new_scope(node, parent, body, NameTable(parent.names if parent else None))
        function.decorators = decorators
        params = node.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        if isinstance(params.star_arg, cst.Param):
            every.append(params.star_arg)
        if params.star_kwarg is not None:
            every.append(params.star_kwarg)
        for param in every:
            function.params[param.name.value] = param.annotation.annotation if param.annotation is not None else None
            function.names.bind_local(param.name.value)
        if scope is None and cls is not None:
            function.cls = cls
            positional = [*params.posonly_params, *params.params]
            if positional and "staticmethod" not in decorators and "classmethod" not in decorators:
                function.self_name = positional[0].name.value
            cls.methods.setdefault(node.name.value, []).append(function)
        elif scope is not None:
            self._bind(scope, node.name.value, Binding(None, position, direct, function=function, node=node))
        if isinstance(node.body, cst.IndentedBlock):
            self._block(body, function, None, True, False, None)
        else:
            self._suite(node.body, function, 0, False, None)

    def _class(self, node: cst.ClassDef, scope, position, direct, without_cuda) -> None:
        if scope is not None:
            self._bind(scope, node.name.value, Binding(None, position, direct))
        bases = tuple(dotted_name(b.value) or "" for b in node.bases)
        cls = ClassInfo(node, node.name.value, bases, bool(node.decorators), enclosing=scope or self.module_scope)
        self.classes.setdefault(node.name.value, []).append(cls)
        if isinstance(node.body, cst.IndentedBlock):
            self._block(node.body.body, None, None, True, False, cls)


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        stack.extend(current.children)


def subscript_key(node: cst.Subscript) -> Optional[str]:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    key = node.slice[0].slice.value
    if isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str):
        return key.evaluated_value
    return None


def cuda_test(test: cst.BaseExpression, names: NameTable) -> Optional[bool]:
    """True for `torch.cuda.is_available()`, False for `not torch.cuda.is_available()`, else None."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        negated = not negated
        test = test.expression
    if isinstance(test, cst.Call) and not test.args and names.qualify(test.func) == "torch.cuda.is_available":
        return not negated
    return None


def dict_entry(value: Optional[cst.BaseExpression], key: str, names: NameTable) -> Optional[cst.BaseExpression]:
    if isinstance(value, cst.Dict):
        found = None
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return None  # `**other`
            if isinstance(element.key, cst.SimpleString) and element.key.evaluated_value == key:
                found = element.value
        return found
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if any(a.keyword is None for a in value.args):
            return None
        return next((a.value for a in value.args if a.keyword is not None and a.keyword.value == key), None)
    return None


def always_returns(body: Sequence[cst.CSTNode]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in last.body)
    if isinstance(last, cst.If):
        if last.orelse is None:
            return False
        orelse = [last.orelse] if isinstance(last.orelse, cst.If) else _suite_body(last.orelse.body)
        return always_returns(_suite_body(last.body)) and always_returns(orelse)
    return False


def _suite_body(suite) -> Sequence[cst.CSTNode]:
    if isinstance(suite, cst.IndentedBlock):
        return suite.body
    return (suite,)


def name_tables(table: Optional[NameTable]) -> Iterator[NameTable]:
    while table is not None:
        yield table
        table = table.parent


def used_otherwise(name: str, scope: NameScope, fine) -> bool:
    """Is `name` used in its scope otherwise than as an assignment's target or where `fine(node, parent)` says
    (a dict read by `name[...]`, a dict splatted by `**name`): a method call, an alias, an argument?"""
    for statement in scope.body:
        stack: List[Tuple[cst.CSTNode, Optional[cst.CSTNode]]] = [(statement, None)]
        while stack:
            node, parent = stack.pop()
            if isinstance(node, cst.Name) and node.value == name:
                if isinstance(parent, cst.AssignTarget) or fine(node, parent):
                    continue
                return True
            if isinstance(node, cst.Attribute):
                stack.append((node.value, node))  # not the attribute's name
                continue
            if isinstance(node, cst.FunctionDef) and node is not statement:
                stack.append((node.body, node))
                continue
            for child in node.children:
                stack.append((child, node))
    return False
