"""What the few values the rules read can be: device strings and device types, dtypes, flags.

`FileValues.resolve(expression, scope_node)` answers, for one expression of the file, the values it may
have at run time, as a `Value`: a tuple of alternatives (`Atom`s), one per definition that may reach
it. An alternative is a known literal (`"cuda:0"`, `torch.float16`, `True`), a known *kind* with what is
known about it ("a torch.device", "a device string that may carry an index"), or unknown. Rules ask
their question of all alternatives and stay silent when one is unknown.

The resolution follows, within one file:
- names: the assignments of the function (those that can reach the use: one in a statement of the
  function body before the use is final for what came before it), of enclosing functions and of the
  module (the last unconditional one at module level wins over earlier ones);
- `self.x`: the assignments to `self.x` in every method of the class (and of its bases and subclasses
  in the file), properties' returns, plain class attributes of undecorated classes;
- `ctx["dev"]` of a dict literal that nothing else touches;
- `str(x)`, f-strings, `"cuda:" + str(i)`, `torch.device(x)`, `x.type`, `x.device`, `x.split(":")[0]`;
- calls of the file's own functions and methods (their returns);
- `a if torch.cuda.is_available() else b`, and `if torch.cuda.is_available(): ... else: ...`: `b`
  is noted as taken only without CUDA.

It does not follow arguments into parameters (a parameter is unknown unless annotated as a
`torch.device`), nor anything in other files. The index is one walk over the file's statements (no
LibCST metadata), made on the first question a rule asks about the file.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from amp_lint.analysis.names import NameTable, dotted_name
from amp_lint.analysis.walk import code_fields

# --- what is known about a value ----------------------------------------------------------------------


class Kind(enum.Enum):
    UNKNOWN = "unknown"
    STRING = "str"
    DEVICE = "torch.device"
    DTYPE = "torch.dtype"
    BOOL = "bool"
    NUMBER = "number"
    NONE = "None"


class Index(enum.Enum):
    """Whether a device (or a device string) carries an index (`cuda:0`)."""

    NO = "no"
    YES = "yes"
    MAYBE = "maybe"


_CUDA_LIKE = frozenset({"cuda", "xpu", "mps", "mtia", "hpu"})

TORCH_DTYPES = frozenset(
    {
        "torch.float16",
        "torch.half",
        "torch.bfloat16",
        "torch.float32",
        "torch.float",
        "torch.float64",
        "torch.double",
        "torch.int8",
        "torch.uint8",
        "torch.int16",
        "torch.short",
        "torch.int32",
        "torch.int",
        "torch.int64",
        "torch.long",
        "torch.bool",
        "torch.complex64",
        "torch.complex128",
        "torch.float8_e4m3fn",
        "torch.float8_e5m2",
    }
)

# Objects whose `.device` is usually a user's setting (often a string), not a tensor's torch.device.
_SETTING_WORDS = ("arg", "cfg", "conf", "opt", "param", "setting", "hparam", "trainer", "accelerator", "state")


@dataclass(frozen=True)
class Atom:
    """One alternative of a value."""

    kind: Kind
    literal: object = None  # the text of a str, a dtype's qualified name, a bool
    device_type: Optional[str] = None  # devices and device strings: "cuda"
    index: Index = Index.MAYBE  # devices and device strings
    certain: bool = True  # False: the kind rests on a guess (`x.device` of an object nobody knows)
    stringified: bool = False  # made by str() (or an f-string) of a torch.device (`str(x.device)`)
    without_cuda: bool = False  # only taken where CUDA is not available (`... else "cpu"`)
    defined_at: Optional[cst.CSTNode] = field(default=None, compare=False, repr=False)  # the definition it came from

    @property
    def is_unknown(self) -> bool:
        return self.kind is Kind.UNKNOWN


UNKNOWN_ATOM = Atom(Kind.UNKNOWN, certain=False)


@dataclass(frozen=True)
class Value:
    """The alternatives of a value; each is what one reaching definition gives."""

    atoms: Tuple[Atom, ...]

    @property
    def known(self) -> bool:
        """Every alternative's kind is known."""
        return bool(self.atoms) and all(not a.is_unknown for a in self.atoms)

    @property
    def kind(self) -> Kind:
        """The kind all alternatives share, else UNKNOWN."""
        kinds = {a.kind for a in self.atoms}
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    @property
    def certain(self) -> bool:
        """Known, and no alternative rests on a guess."""
        return self.known and all(a.certain for a in self.atoms)

    @property
    def literals(self) -> Optional[Tuple[object, ...]]:
        """Every alternative's literal, when every one has a literal."""
        if not self.known or any(a.literal is None for a in self.atoms):
            return None
        return tuple(dict.fromkeys(a.literal for a in self.atoms))

    @property
    def literal(self) -> Optional[object]:
        found = self.literals
        return found[0] if found is not None and len(found) == 1 else None

    def device_types(self, with_cuda: bool = False) -> Optional[frozenset]:
        """The device types of all alternatives (of those taken on a CUDA host, with_cuda), None if one
        is unknown."""
        atoms = [a for a in self.atoms if not (with_cuda and a.without_cuda)]
        if not atoms or any(a.device_type is None or a.kind not in (Kind.STRING, Kind.DEVICE) for a in atoms):
            return None
        return frozenset(a.device_type for a in atoms)

    @property
    def device_type(self) -> Optional[str]:
        types = self.device_types()
        return next(iter(types)) if types is not None and len(types) == 1 else None

    def indexed(self) -> List[Atom]:
        """The alternatives that certainly carry a device index."""
        return [a for a in self.atoms if a.kind in (Kind.STRING, Kind.DEVICE) and a.index is Index.YES]

    @property
    def no_index(self) -> bool:
        """Every alternative is a device or device string without an index."""
        return self.known and all(a.index is Index.NO for a in self.atoms)

    @property
    def definitions(self) -> List[cst.CSTNode]:
        seen: List[cst.CSTNode] = []
        for atom in self.atoms:
            if atom.defined_at is not None and all(atom.defined_at is not s for s in seen):
                seen.append(atom.defined_at)
        return seen


UNKNOWN = Value((UNKNOWN_ATOM,))


def _value(*atoms: Atom) -> Value:
    return Value(tuple(atoms))


def _join(values: Iterable[Value]) -> Value:
    atoms: List[Atom] = []
    for value in values:
        for atom in value.atoms:
            if atom not in atoms:
                atoms.append(atom)
            if len(atoms) > _MAX_ALTERNATIVES:
                return UNKNOWN
    return Value(tuple(atoms)) if atoms else UNKNOWN


def _map(value: Value, change) -> Value:
    return Value(tuple(change(a) for a in value.atoms))


def device_string(text: str, **extra) -> Atom:
    """A str literal read as a device: "cuda:0" is device type "cuda" with an index."""
    head, colon, _ = text.partition(":")
    return Atom(Kind.STRING, literal=text, device_type=head, index=Index.YES if colon else Index.NO, **extra)


def is_cuda_like(device_type: Optional[str]) -> bool:
    return device_type in _CUDA_LIKE


# Decorators that keep what a function returns.
_TRANSPARENT_DECORATORS = frozenset(
    {"staticmethod", "classmethod", "lru_cache", "cache", "functools.lru_cache", "functools.cache", "cached_property"}
)

_PROPERTY = frozenset({"property", "cached_property", "functools.cached_property"})

_MAX_DEPTH = 12
_MAX_ALTERNATIVES = 16


# --- the index -------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Binding:
    value: Optional[cst.BaseExpression]  # None: bound in a way that is not followed (a for target, an import)
    position: int  # index of the statement of the scope's body that holds it
    direct: bool  # a statement of the scope's body itself (not under if/for/try/with)
    without_cuda: bool = False
    function: Optional["_Scope"] = None  # a `def`
    node: Optional[cst.CSTNode] = None  # the statement, for messages


@dataclass(eq=False)
class _Scope:
    node: Union[cst.Module, cst.FunctionDef]
    parent: Optional["_Scope"]
    names: NameTable
    body: Sequence[cst.CSTNode]
    cls: Optional["_Class"] = None
    self_name: Optional[str] = None  # a method's first parameter
    bindings: Dict[str, List[_Binding]] = field(default_factory=dict)
    params: Dict[str, Optional[cst.BaseExpression]] = field(default_factory=dict)
    declared_global: Set[str] = field(default_factory=set)
    declared_nonlocal: Set[str] = field(default_factory=set)
    items: Dict[Tuple[str, str], List[_Binding]] = field(default_factory=dict)  # ctx["dev"] = ...
    mutated: Set[str] = field(default_factory=set)  # ctx[i] = ..., del ctx[...]
    returns: List[Tuple[Optional[cst.BaseExpression], int]] = field(default_factory=list)
    generator: bool = False
    decorators: Tuple[str, ...] = ()
    _positions: Optional[Dict[int, int]] = None
    _statement_index: Optional[Dict[int, int]] = None

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, cst.Module)

    def chain(self) -> Iterator["_Scope"]:
        scope: Optional[_Scope] = self
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
class _Class:
    node: cst.ClassDef
    name: str
    bases: Tuple[str, ...]
    decorated: bool
    # `self.x = value` in a method (with the method's scope), `x = value` in the class body (scope None).
    attributes: Dict[str, List[Tuple[_Binding, Optional[_Scope]]]] = field(default_factory=dict)
    methods: Dict[str, List[_Scope]] = field(default_factory=dict)
    enclosing: Optional[_Scope] = None


class _IndexBuilder:
    """One walk over the file's statements: scopes, their bindings, classes, returns."""

    def __init__(self, module: cst.Module) -> None:
        self.scopes: Dict[int, _Scope] = {}
        self.classes: Dict[str, List[_Class]] = {}
        self.foreign_attribute_writes: Set[str] = set()  # `obj.x = ...` with obj not `self`
        self.module_scope = self._new_scope(module, None, module.body, NameTable())
        self._block(module.body, self.module_scope, None, True, False, None)

    def _new_scope(self, node, parent, body, names, cls=None) -> _Scope:
        scope = _Scope(node=node, parent=parent, names=names, body=body, cls=cls)
        self.scopes[id(node)] = scope
        return scope

    # --- statements ---
    def _block(self, body, scope: _Scope, position: Optional[int], direct: bool, without_cuda: bool, cls) -> None:
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
            polarity = _cuda_test(statement.test, (scope or self.module_scope).names)
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
                        self._bind(scope, name.value, _Binding(None, position, False))
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
                            self._bind(scope, key.split(".")[0], _Binding(None, position, direct))
            elif isinstance(small, cst.ImportFrom):
                if scope is not None:
                    scope.names.bind_import_from(small)
                    if not isinstance(small.names, cst.ImportStar):
                        for alias in small.names:
                            local = alias.asname.name if alias.asname is not None else alias.name
                            if isinstance(local, cst.Name):
                                self._bind(scope, local.value, _Binding(None, position, direct))
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
                    self._bind(scope, node.target.value, _Binding(node.value, position, False))
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
                    (_Binding(None if cls.decorated else value, position, direct, without_cuda, node=statement), None)
                )
            return
        if isinstance(target, cst.Name):
            self._bind(scope, target.value, _Binding(value, position, direct, without_cuda, node=statement))
        elif isinstance(target, cst.Attribute):
            owner = scope.cls
            if isinstance(target.value, cst.Name) and scope.self_name == target.value.value and owner is not None:
                owner.attributes.setdefault(target.attr.value, []).append(
                    (_Binding(value, position, direct, without_cuda, node=statement), scope)
                )
            else:
                self.foreign_attribute_writes.add(target.attr.value)
        elif isinstance(target, cst.Subscript):
            self._item_target(target, _Binding(value, position, direct, without_cuda, node=statement), scope)
        else:
            self._opaque_target(target, scope, position, cls)

    def _item_target(self, target: cst.Subscript, binding: _Binding, scope: _Scope) -> None:
        if not isinstance(target.value, cst.Name):
            return
        key = _subscript_key(target)
        if key is None:
            scope.mutated.add(target.value.value)
        else:
            scope.items.setdefault((target.value.value, key), []).append(binding)

    def _opaque_target(self, target, scope, position, cls) -> None:
        if scope is None:
            if isinstance(target, cst.Name) and cls is not None:
                cls.attributes.setdefault(target.value, []).append((_Binding(None, position, False), None))
            return
        if isinstance(target, cst.Name):
            self._bind(scope, target.value, _Binding(None, position, False))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._opaque_target(element.value, scope, position, cls)
        elif isinstance(target, cst.StarredElement):
            self._opaque_target(target.value, scope, position, cls)
        elif isinstance(target, cst.Attribute):
            if isinstance(target.value, cst.Name) and scope.self_name == target.value.value and scope.cls is not None:
                scope.cls.attributes.setdefault(target.attr.value, []).append((_Binding(None, position, False), scope))
            else:
                self.foreign_attribute_writes.add(target.attr.value)
        elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            scope.mutated.add(target.value.value)

    def _bind(self, scope: _Scope, name: str, binding: _Binding) -> None:
        if name in scope.declared_global and not scope.is_module:
            target = self.module_scope
            binding = _Binding(None, 1 << 30, False)  # written by a function: not followed
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
            self._bind(scope, node.name.value, _Binding(None, position, direct, function=function, node=node))
        if isinstance(node.body, cst.IndentedBlock):
            self._block(body, function, None, True, False, None)
        else:
            self._suite(node.body, function, 0, False, None)

    def _class(self, node: cst.ClassDef, scope, position, direct, without_cuda) -> None:
        if scope is not None:
            self._bind(scope, node.name.value, _Binding(None, position, direct))
        bases = tuple(dotted_name(b.value) or "" for b in node.bases)
        cls = _Class(node, node.name.value, bases, bool(node.decorators), enclosing=scope or self.module_scope)
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


def _subscript_key(node: cst.Subscript) -> Optional[str]:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    key = node.slice[0].slice.value
    if isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str):
        return key.evaluated_value
    return None


def _cuda_test(test: cst.BaseExpression, names: NameTable) -> Optional[bool]:
    """True for `torch.cuda.is_available()`, False for `not torch.cuda.is_available()`, else None."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        negated = not negated
        test = test.expression
    if isinstance(test, cst.Call) and not test.args and names.qualify(test.func) == "torch.cuda.is_available":
        return not negated
    return None


# --- resolution ------------------------------------------------------------------------------------


class FileValues:
    """The values of one file's expressions, resolved on demand."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._index = _IndexBuilder(module)
        self._memo: Dict[Tuple[int, int, Optional[int]], Value] = {}
        self._active: Set[int] = set()

    def scope(self, scope_node: Optional[cst.CSTNode]) -> _Scope:
        found = self._index.scopes.get(id(scope_node)) if scope_node is not None else None
        return found or self._index.module_scope

    def resolve(
        self,
        expression: Optional[cst.BaseExpression],
        scope_node: Optional[cst.CSTNode] = None,
        parents: Optional[Dict[int, cst.CSTNode]] = None,
    ) -> Value:
        """The values `expression`, written in the function `scope_node` (the module when None), may have.

        `parents` (node id -> the node above it), when the caller has it, saves a walk of the scope.
        """
        if expression is None:
            return UNKNOWN
        scope = self.scope(scope_node)
        position = scope.position_of(expression, parents)
        if position == INSIDE_OWN_SCOPE:
            return UNKNOWN
        return self._expression(expression, scope, position, 0)

    def torch_name(self, scope_node: Optional[cst.CSTNode]) -> Optional[str]:
        """A name that means the torch module in that scope (`torch`, `T`), if any."""
        scope = self.scope(scope_node)
        for table in _tables(scope.names):
            for local, qualified in table.imported.items():
                if qualified == "torch" and scope.names.lookup(local) == "torch":
                    return local
        return None

    # --- expressions ---
    def _expression(self, node: cst.BaseExpression, scope: _Scope, position: Optional[int], depth: int) -> Value:
        if depth > _MAX_DEPTH:
            return UNKNOWN
        key = (id(node), id(scope), position)
        if key in self._memo:
            return self._memo[key]
        if id(node) in self._active:
            return UNKNOWN  # `x = x + 1`
        self._active.add(id(node))
        try:
            value = self._compute(node, scope, position, depth + 1)
        finally:
            self._active.discard(id(node))
        self._memo[key] = value
        return value

    def _compute(self, node: cst.BaseExpression, scope: _Scope, position: Optional[int], depth: int) -> Value:
        if isinstance(node, cst.SimpleString):
            text = node.evaluated_value
            return _value(device_string(text)) if isinstance(text, str) else UNKNOWN
        if isinstance(node, cst.ConcatenatedString):
            text = node.evaluated_value
            return _value(device_string(text)) if isinstance(text, str) else _value(Atom(Kind.STRING))
        if isinstance(node, cst.FormattedString):
            return self._fstring(node, scope, position, depth)
        if isinstance(node, cst.Name):
            if node.value in ("True", "False"):
                return _value(Atom(Kind.BOOL, literal=node.value == "True"))
            if node.value == "None":
                return _value(Atom(Kind.NONE))
            return self._name(node.value, scope, position, depth)
        if isinstance(node, cst.Attribute):
            return self._attribute(node, scope, position, depth)
        if isinstance(node, cst.Call):
            return self._call(node, scope, position, depth)
        if isinstance(node, cst.Subscript):
            return self._subscript(node, scope, position, depth)
        if isinstance(node, cst.IfExp):
            polarity = _cuda_test(node.test, scope.names)
            body = self._expression(node.body, scope, position, depth)
            orelse = self._expression(node.orelse, scope, position, depth)
            if polarity is not None:
                side = orelse if polarity else body
                side = _map(side, lambda a: replace(a, without_cuda=True))
                body, orelse = (body, side) if polarity else (side, orelse)
            return _join((body, orelse))
        if isinstance(node, cst.BooleanOperation):
            return _join(
                (self._expression(node.left, scope, position, depth), self._expression(node.right, scope, position, depth))
            )
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = self._expression(node.expression, scope, position, depth)
            if inner.kind is Kind.BOOL and inner.literal is not None:
                return _value(Atom(Kind.BOOL, literal=not inner.literal))
            return _value(Atom(Kind.BOOL))
        if isinstance(node, cst.Comparison):
            return _value(Atom(Kind.BOOL))
        if isinstance(node, (cst.Integer, cst.Float)):
            return _value(Atom(Kind.NUMBER, literal=node.evaluated_value))
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node, scope, position, depth)
        return UNKNOWN

    def _fstring(self, node: cst.FormattedString, scope, position, depth) -> Value:
        parts = list(node.parts)
        texts = [p for p in parts if isinstance(p, cst.FormattedStringText)]
        if not any(isinstance(p, cst.FormattedStringExpression) for p in parts):
            return _value(device_string("".join(p.value for p in texts)))
        head = parts[0]
        if isinstance(head, cst.FormattedStringText) and ":" in head.value:
            return _value(Atom(Kind.STRING, device_type=head.value.split(":")[0], index=Index.YES))
        if (
            len(parts) >= 2
            and isinstance(head, cst.FormattedStringExpression)
            and isinstance(parts[1], cst.FormattedStringText)
            and parts[1].value.startswith(":")
        ):
            inner = self._str_of(self._expression(head.expression, scope, position, depth))
            return _value(Atom(Kind.STRING, device_type=inner.device_type if inner.no_index else None, index=Index.YES))
        if len(parts) == 1 and isinstance(head, cst.FormattedStringExpression) and head.format_spec is None:
            return self._str_of(self._expression(head.expression, scope, position, depth))
        return _value(Atom(Kind.STRING))

    def _binary(self, node: cst.BinaryOperation, scope, position, depth) -> Value:
        left = self._expression(node.left, scope, position, depth)
        if left.kind is not Kind.STRING:
            return UNKNOWN
        text = left.literal
        if isinstance(node.operator, cst.Add):
            right = self._expression(node.right, scope, position, depth)
            if isinstance(text, str) and isinstance(right.literal, str) and right.kind is Kind.STRING:
                return _value(device_string(text + right.literal))
            if isinstance(text, str) and ":" in text:
                return _value(Atom(Kind.STRING, device_type=text.split(":")[0], index=Index.YES))
            return _value(Atom(Kind.STRING))
        if isinstance(node.operator, cst.Modulo) and isinstance(text, str):
            if ":" in text and "%" not in text.split(":")[0]:
                return _value(Atom(Kind.STRING, device_type=text.split(":")[0], index=Index.YES))
            return _value(Atom(Kind.STRING))
        return UNKNOWN

    def _str_of(self, value: Value) -> Value:
        """`str(value)`."""

        def convert(atom: Atom) -> Atom:
            if atom.kind is Kind.STRING:
                return atom
            if atom.kind is Kind.DEVICE:
                return replace(atom, kind=Kind.STRING, stringified=True)
            if atom.kind is Kind.UNKNOWN:
                return Atom(Kind.STRING, certain=False, defined_at=atom.defined_at)
            literal = {Kind.BOOL: str(atom.literal), Kind.NONE: "None", Kind.DTYPE: atom.literal}.get(atom.kind)
            if atom.kind is Kind.NUMBER:
                literal = str(atom.literal)
            return Atom(Kind.STRING, literal=literal, index=Index.NO, defined_at=atom.defined_at)

        return _map(value, convert)

    # --- names ---
    def _name(self, name: str, scope: _Scope, position: Optional[int], depth: int) -> Value:
        found = self._reaching(name, scope, position)
        if found is None:
            return UNKNOWN
        owner, bindings, param = found
        if param is not None:
            return self._parameter(owner, name)
        values = []
        for binding in bindings:
            values.append(self._binding_value(binding, owner, depth))
        return _join(values)

    def _binding_value(self, binding: _Binding, owner: _Scope, depth: int) -> Value:
        if binding.value is None:
            return UNKNOWN
        value = self._expression(binding.value, owner, binding.position, depth)
        return _map(
            value,
            lambda a: replace(
                a,
                without_cuda=a.without_cuda or binding.without_cuda,
                defined_at=a.defined_at if a.defined_at is not None else binding.node,
            ),
        )

    def _reaching(self, name: str, scope: _Scope, position: Optional[int]):
        """(scope that binds `name`, the bindings that may reach the use, the parameter's name or None);
        None when the name is bound in a way that is not followed, or not at all (a builtin)."""
        current: Optional[_Scope] = scope
        if name in scope.declared_global:
            current, position = self._index.module_scope, None
        elif name in scope.declared_nonlocal:
            return None
        while current is not None:
            if name in current.bindings or name in current.params:
                break
            current, position = current.parent, None
        if current is None:
            return None
        bindings = current.bindings.get(name, [])
        if name in current.params and not bindings:
            return current, [], name
        if any(b.function is not None for b in bindings):
            return None
        if position is not None:
            reaching = [b for b in bindings if b.position < position or (b.position == position and not b.direct)]
            last = max((b.position for b in reaching if b.direct and b.position < position), default=None)
            if last is not None:
                reaching = [b for b in reaching if b.position >= last]
            elif name in current.params:
                return None  # the argument may reach the use
        elif name in current.params:
            return None
        elif current.is_module or current is not scope:
            # Functions run after the module (or enclosing function) has bound its names: the last
            # unconditional binding replaces the ones before it.
            last = max((b.position for b in bindings if b.direct), default=None)
            reaching = [b for b in bindings if last is None or b.position >= last]
        else:
            reaching = list(bindings)
        if not reaching:
            return None
        return current, reaching, None

    def _parameter(self, scope: _Scope, name: str) -> Value:
        annotation = scope.params.get(name)
        if annotation is not None:
            qualified = scope.names.qualify(annotation)
            if qualified == "torch.device":
                return _value(Atom(Kind.DEVICE))
            if qualified == "torch.dtype":
                return _value(Atom(Kind.DTYPE))
        return UNKNOWN

    # --- attributes ---
    def _attribute(self, node: cst.Attribute, scope: _Scope, position, depth) -> Value:
        qualified = scope.names.qualify(node)
        if qualified is not None:
            if qualified in TORCH_DTYPES:
                return _value(Atom(Kind.DTYPE, literal=qualified))
            return UNKNOWN
        attr = node.attr.value
        receiver = node.value
        if isinstance(receiver, cst.Name) and scope.self_name is not None and receiver.value == scope.self_name:
            return self._self_attribute(scope, attr, depth) or UNKNOWN
        if attr == "type":
            inner = self._expression(receiver, scope, position, depth)
            if inner.kind is Kind.DEVICE or (
                isinstance(receiver, cst.Attribute) and receiver.attr.value == "device" and not inner.known
            ):
                certain = inner.certain

                def type_of(atom: Atom) -> Atom:
                    literal = atom.device_type
                    return Atom(
                        Kind.STRING,
                        literal=literal,
                        device_type=literal,
                        index=Index.NO,
                        certain=certain,
                        without_cuda=atom.without_cuda,
                        defined_at=atom.defined_at,
                    )

                return _map(inner, type_of)
            return UNKNOWN
        if attr == "device":
            if _setting_like(receiver, scope):
                return UNKNOWN
            return _value(Atom(Kind.DEVICE, certain=False))
        if attr == "dtype":
            return _value(Atom(Kind.DTYPE, certain=False))
        return UNKNOWN

    def _self_attribute(self, scope: _Scope, attr: str, depth: int) -> Optional[Value]:
        """`self.attr` in a method: every assignment to it in the class and its relatives in the file."""
        cls = scope.cls
        if cls is None or attr in self._index.foreign_attribute_writes:
            return None
        values: List[Value] = []
        for relative in self._relatives(cls):
            for method_scope in relative.methods.get(attr, ()):
                if not set(method_scope.decorators) & _PROPERTY or len(method_scope.decorators) != 1:
                    return None  # a method, or a property with a setter
                values.append(self._returns(method_scope, depth))
            assigned = relative.attributes.get(attr, ())
            # In each method, an assignment in the method's own body replaces the ones before it.
            last: Dict[int, int] = {}
            for binding, owner in assigned:
                if owner is not None and binding.direct:
                    last[id(owner)] = max(last.get(id(owner), -1), binding.position)
            for binding, owner in assigned:
                if owner is not None and binding.position < last.get(id(owner), -1):
                    continue
                if owner is None:  # the class body
                    if binding.value is None:
                        return None
                    enclosing = relative.enclosing or self._index.module_scope
                    values.append(self._binding_value(_Binding(binding.value, 0, False, binding.without_cuda, node=binding.node), enclosing, depth))
                else:
                    values.append(self._binding_value(binding, owner, depth))
        if not values:
            return None
        return _join(values)

    def _relatives(self, cls: _Class) -> List[_Class]:
        """The class, its bases and its subclasses that this file defines (each name defined once)."""
        found: List[_Class] = [cls]
        pending = [cls]
        while pending:
            current = pending.pop()
            for base in current.bases:
                for candidate in self._index.classes.get(base.split(".")[-1], ()):
                    if candidate not in found:
                        found.append(candidate)
                        pending.append(candidate)
            for candidates in self._index.classes.values():
                for candidate in candidates:
                    if candidate not in found and any(b.split(".")[-1] == current.name for b in candidate.bases):
                        found.append(candidate)
                        pending.append(candidate)
        return found

    # --- calls ---
    def _call(self, node: cst.Call, scope: _Scope, position, depth) -> Value:
        func = node.func
        qualified = scope.names.qualify(func)
        if qualified == "torch.device":
            return self._torch_device(node, scope, position, depth)
        if qualified == "torch.cuda.is_available":
            return _value(Atom(Kind.BOOL))
        if any(arg.star for arg in node.args):
            return UNKNOWN
        if isinstance(func, cst.Name) and func.value == "str" and self._is_builtin("str", scope):
            if len(node.args) == 1 and node.args[0].keyword is None:
                return self._str_of(self._expression(node.args[0].value, scope, position, depth))
            return UNKNOWN
        if isinstance(func, cst.Name) and func.value == "getattr" and self._is_builtin("getattr", scope):
            if len(node.args) == 2 and scope.names.qualify(node.args[0].value) == "torch":
                attribute = node.args[1].value
                if isinstance(attribute, cst.SimpleString) and f"torch.{attribute.evaluated_value}" in TORCH_DTYPES:
                    return _value(Atom(Kind.DTYPE, literal=f"torch.{attribute.evaluated_value}"))
            return UNKNOWN
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            if method == "format":
                inner = self._expression(receiver, scope, position, depth)
                text = inner.literal if inner.kind is Kind.STRING else None
                if isinstance(text, str):
                    if ":" in text and "{" not in text.split(":")[0]:
                        return _value(Atom(Kind.STRING, device_type=text.split(":")[0], index=Index.YES))
                    return _value(Atom(Kind.STRING))
                return UNKNOWN
            if isinstance(receiver, cst.Name) and scope.self_name is not None and receiver.value == scope.self_name:
                return self._method_returns(scope, method, depth)
            return UNKNOWN
        if isinstance(func, cst.Name):
            found = self._index_function(func.value, scope)
            if found is not None:
                return self._returns(found, depth)
        return UNKNOWN

    def _torch_device(self, node: cst.Call, scope, position, depth) -> Value:
        args = [a for a in node.args if not a.star]
        if len(args) != len(node.args) or not args:
            return _value(Atom(Kind.DEVICE))
        first = next((a for a in args if a.keyword is None or a.keyword.value == "type"), None)
        index = next((a for a in args if a is not first and (a.keyword is None or a.keyword.value == "index")), None)
        if first is None:
            return _value(Atom(Kind.DEVICE))
        inner = self._expression(first.value, scope, position, depth)

        def device_of(atom: Atom) -> Atom:
            if atom.kind in (Kind.STRING, Kind.DEVICE):
                has_index = atom.index
                if index is not None:
                    explicit = index.value
                    has_index = Index.NO if isinstance(explicit, cst.Name) and explicit.value == "None" else Index.YES
                return Atom(
                    Kind.DEVICE,
                    literal=atom.literal if index is None else None,
                    device_type=atom.device_type,
                    index=has_index,
                    without_cuda=atom.without_cuda,
                    defined_at=atom.defined_at,
                )
            return Atom(Kind.DEVICE, index=Index.YES if index is not None else Index.MAYBE, without_cuda=atom.without_cuda)

        return _map(inner, device_of)

    def _subscript(self, node: cst.Subscript, scope: _Scope, position, depth) -> Value:
        # `device.split(":")[0]`: the device type
        value = node.value
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "split"
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.Integer)
            and node.slice[0].slice.value.value == "0"
            and len(value.args) == 1
            and isinstance(value.args[0].value, cst.SimpleString)
            and value.args[0].value.evaluated_value == ":"
        ):
            inner = self._expression(value.func.value, scope, position, depth)
            if inner.kind is Kind.STRING and inner.known:
                return _map(inner, lambda a: replace(a, literal=a.device_type, index=Index.NO, stringified=False))
            return _value(Atom(Kind.STRING, index=Index.NO))
        key = _subscript_key(node)
        if key is None or not isinstance(value, cst.Name):
            return UNKNOWN
        found = self._reaching(value.value, scope, position)
        if found is None or found[2] is not None:
            return UNKNOWN
        owner, bindings, _ = found
        if value.value in owner.mutated or self._escapes(value.value, owner):
            return UNKNOWN
        values = []
        for binding in bindings:
            element = _dict_entry(binding.value, key, owner.names)
            if element is None:
                return UNKNOWN
            values.append(self._binding_value(_Binding(element, binding.position, False, binding.without_cuda, node=binding.node), owner, depth))
        for binding in owner.items.get((value.value, key), ()):
            values.append(self._binding_value(binding, owner, depth))
        return _join(values)

    def _escapes(self, name: str, scope: _Scope) -> bool:
        """Is the dict `name` used otherwise than `name[...]` (a call, a method, an alias) in its scope?"""
        for statement in scope.body:
            stack: List[Tuple[cst.CSTNode, Optional[cst.CSTNode]]] = [(statement, None)]
            while stack:
                node, parent = stack.pop()
                if isinstance(node, cst.Name) and node.value == name:
                    if isinstance(parent, cst.Subscript) and parent.value is node:
                        continue
                    if isinstance(parent, cst.AssignTarget):
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

    def _is_builtin(self, name: str, scope: _Scope) -> bool:
        return all(name not in s.bindings and name not in s.params for s in scope.chain()) and scope.names.lookup(name) is None

    def _index_function(self, name: str, scope: _Scope) -> Optional[_Scope]:
        for current in scope.chain():
            bindings = current.bindings.get(name)
            if bindings is None and name not in current.params:
                continue
            if bindings and len(bindings) == 1 and bindings[0].function is not None and name not in current.params:
                function = bindings[0].function
                return function if set(function.decorators) <= _TRANSPARENT_DECORATORS else None
            return None
        return None

    def _method_returns(self, scope: _Scope, method: str, depth: int) -> Value:
        cls = scope.cls
        if cls is None:
            return UNKNOWN
        found: List[_Scope] = []
        for relative in self._relatives(cls):
            found.extend(relative.methods.get(method, ()))
        if len(found) != 1 or not set(found[0].decorators) <= _TRANSPARENT_DECORATORS:
            return UNKNOWN
        return self._returns(found[0], depth)

    def _returns(self, function: _Scope, depth: int) -> Value:
        if function.generator or isinstance(function.node, cst.Module):
            return UNKNOWN
        if isinstance(function.node, cst.FunctionDef) and function.node.asynchronous is not None:
            return UNKNOWN
        values = []
        for expression, position in function.returns:
            if expression is None:
                values.append(_value(Atom(Kind.NONE)))
            else:
                values.append(self._expression(expression, function, position, depth))
        if not _always_returns(function.body):
            values.append(_value(Atom(Kind.NONE)))
        return _join(values)


def _dict_entry(value: Optional[cst.BaseExpression], key: str, names: NameTable) -> Optional[cst.BaseExpression]:
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


def _always_returns(body: Sequence[cst.CSTNode]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in last.body)
    if isinstance(last, cst.If):
        if last.orelse is None:
            return False
        orelse = [last.orelse] if isinstance(last.orelse, cst.If) else _suite_body(last.orelse.body)
        return _always_returns(_suite_body(last.body)) and _always_returns(orelse)
    return False


def _suite_body(suite) -> Sequence[cst.CSTNode]:
    if isinstance(suite, cst.IndentedBlock):
        return suite.body
    return (suite,)


def _setting_like(receiver: cst.BaseExpression, scope: _Scope) -> bool:
    """`args.device`, `cfg.device`, `self.trainer.device`: a setting that often holds a string."""
    key = dotted_name(receiver)
    if key is None:
        return False  # next(model.parameters()).device: a tensor's device
    head = key.split(".")[0]
    return head in ("self", "cls") or head == scope.self_name or any(word in key.lower() for word in _SETTING_WORDS)


def _tables(table: Optional[NameTable]) -> Iterator[NameTable]:
    while table is not None:
        yield table
        table = table.parent


# --- one file at a time ----------------------------------------------------------------------------

_last: List[FileValues] = []


def of(module: cst.Module) -> FileValues:
    """The values of `module`, indexed on the first call for it (rules check one file at a time)."""
    if _last and _last[0].module is module:
        return _last[0]
    values = FileValues(module)
    _last[:] = [values]
    return values
