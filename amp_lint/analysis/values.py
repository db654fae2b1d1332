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
`torch.device`), nor anything in other files. The reaching definitions come from the file's def-use
index (`def_use.DefUseIndex`: one walk over the file's statements, no LibCST metadata, made on the first
question a rule asks about the file); the answers are `value_types.Value`s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis.def_use import (
    INSIDE_OWN_SCOPE,
    Binding,
    ClassInfo,
    DefUseIndex,
    NameScope,
    always_returns,
    cuda_test,
    dict_entry,
    name_tables,
    subscript_key,
    used_otherwise,
)
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.value_types import (
    TORCH_DTYPES,
    UNKNOWN,
    Atom,
    Index,
    Kind,
    Value,
    device_string,
    join_values,
    make_value,
    map_atoms,
)

# Objects whose `.device` is usually a user's setting (often a string), not a tensor's torch.device.
_SETTING_WORDS = ("arg", "cfg", "conf", "opt", "param", "setting", "hparam", "trainer", "accelerator", "state")

# Decorators that keep what a function returns.
_TRANSPARENT_DECORATORS = frozenset(
    {"staticmethod", "classmethod", "lru_cache", "cache", "functools.lru_cache", "functools.cache", "cached_property"}
)

_PROPERTY = frozenset({"property", "cached_property", "functools.cached_property"})

_MAX_DEPTH = 12


# --- resolution ------------------------------------------------------------------------------------


class FileValues:
    """The values of one file's expressions, resolved on demand."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._index = DefUseIndex(module)
        self._memo: Dict[Tuple[int, int, Optional[int]], Value] = {}
        self._active: Set[int] = set()

    def scope(self, scope_node: Optional[cst.CSTNode]) -> NameScope:
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
        for table in name_tables(scope.names):
            for local, qualified in table.imported.items():
                if qualified == "torch" and scope.names.lookup(local) == "torch":
                    return local
        return None

    # --- expressions ---
    def _expression(self, node: cst.BaseExpression, scope: NameScope, position: Optional[int], depth: int) -> Value:
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

    def _compute(self, node: cst.BaseExpression, scope: NameScope, position: Optional[int], depth: int) -> Value:
        if isinstance(node, cst.SimpleString):
            text = node.evaluated_value
            return make_value(device_string(text)) if isinstance(text, str) else UNKNOWN
        if isinstance(node, cst.ConcatenatedString):
            text = node.evaluated_value
            return make_value(device_string(text)) if isinstance(text, str) else make_value(Atom(Kind.STRING))
        if isinstance(node, cst.FormattedString):
            return self._fstring(node, scope, position, depth)
        if isinstance(node, cst.Name):
            if node.value in ("True", "False"):
                return make_value(Atom(Kind.BOOL, literal=node.value == "True"))
            if node.value == "None":
                return make_value(Atom(Kind.NONE))
            return self._name(node.value, scope, position, depth)
        if isinstance(node, cst.Attribute):
            return self._attribute(node, scope, position, depth)
        if isinstance(node, cst.Call):
            return self._call(node, scope, position, depth)
        if isinstance(node, cst.Subscript):
            return self._subscript(node, scope, position, depth)
        if isinstance(node, cst.IfExp):
            polarity = cuda_test(node.test, scope.names)
            body = self._expression(node.body, scope, position, depth)
            orelse = self._expression(node.orelse, scope, position, depth)
            if polarity is not None:
                side = orelse if polarity else body
                side = map_atoms(side, lambda a: replace(a, without_cuda=True))
                body, orelse = (body, side) if polarity else (side, orelse)
            return join_values((body, orelse))
        if isinstance(node, cst.BooleanOperation):
            return join_values(
                (self._expression(node.left, scope, position, depth), self._expression(node.right, scope, position, depth))
            )
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = self._expression(node.expression, scope, position, depth)
            if inner.kind is Kind.BOOL and inner.literal is not None:
                return make_value(Atom(Kind.BOOL, literal=not inner.literal))
            return make_value(Atom(Kind.BOOL))
        if isinstance(node, cst.Comparison):
            return make_value(Atom(Kind.BOOL))
        if isinstance(node, (cst.Integer, cst.Float)):
            return make_value(Atom(Kind.NUMBER, literal=node.evaluated_value))
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node, scope, position, depth)
        return UNKNOWN

    def _fstring(self, node: cst.FormattedString, scope, position, depth) -> Value:
        parts = list(node.parts)
        texts = [p for p in parts if isinstance(p, cst.FormattedStringText)]
        if not any(isinstance(p, cst.FormattedStringExpression) for p in parts):
            return make_value(device_string("".join(p.value for p in texts)))
        head = parts[0]
        if isinstance(head, cst.FormattedStringText) and ":" in head.value:
            return make_value(Atom(Kind.STRING, device_type=head.value.split(":")[0], index=Index.YES))
        if (
            len(parts) >= 2
            and isinstance(head, cst.FormattedStringExpression)
            and isinstance(parts[1], cst.FormattedStringText)
            and parts[1].value.startswith(":")
        ):
            inner = self._str_of(self._expression(head.expression, scope, position, depth))
            return make_value(Atom(Kind.STRING, device_type=inner.device_type if inner.no_index else None, index=Index.YES))
        if len(parts) == 1 and isinstance(head, cst.FormattedStringExpression) and head.format_spec is None:
            return self._str_of(self._expression(head.expression, scope, position, depth))
        return make_value(Atom(Kind.STRING))

    def _binary(self, node: cst.BinaryOperation, scope, position, depth) -> Value:
        left = self._expression(node.left, scope, position, depth)
        if left.kind is not Kind.STRING:
            return UNKNOWN
        text = left.literal
        if isinstance(node.operator, cst.Add):
            right = self._expression(node.right, scope, position, depth)
            if isinstance(text, str) and isinstance(right.literal, str) and right.kind is Kind.STRING:
                return make_value(device_string(text + right.literal))
            if isinstance(text, str) and ":" in text:
                return make_value(Atom(Kind.STRING, device_type=text.split(":")[0], index=Index.YES))
            return make_value(Atom(Kind.STRING))
        if isinstance(node.operator, cst.Modulo) and isinstance(text, str):
            if ":" in text and "%" not in text.split(":")[0]:
                return make_value(Atom(Kind.STRING, device_type=text.split(":")[0], index=Index.YES))
            return make_value(Atom(Kind.STRING))
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

        return map_atoms(value, convert)

    # --- names ---
    def _name(self, name: str, scope: NameScope, position: Optional[int], depth: int) -> Value:
        found = self.reaching(name, scope, position)
        if found is None:
            return UNKNOWN
        owner, bindings, param = found
        if param is not None:
            return self._parameter(owner, name)
        values = []
        for binding in bindings:
            values.append(self._binding_value(binding, owner, depth))
        return join_values(values)

    def _binding_value(self, binding: Binding, owner: NameScope, depth: int) -> Value:
        if binding.value is None:
            return UNKNOWN
        value = self._expression(binding.value, owner, binding.position, depth)
        return map_atoms(
            value,
            lambda a: replace(
                a,
                without_cuda=a.without_cuda or binding.without_cuda,
                defined_at=a.defined_at if a.defined_at is not None else binding.node,
            ),
        )

    def reaching(self, name: str, scope: NameScope, position: Optional[int]):
        """(scope that binds `name`, the bindings that may reach the use, the parameter's name or None);
        None when the name is bound in a way that is not followed, or not at all (a builtin)."""
        current: Optional[NameScope] = scope
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

    def _parameter(self, scope: NameScope, name: str) -> Value:
        annotation = scope.params.get(name)
        if annotation is not None:
            qualified = scope.names.qualify(annotation)
            if qualified == "torch.device":
                return make_value(Atom(Kind.DEVICE))
            if qualified == "torch.dtype":
                return make_value(Atom(Kind.DTYPE))
        return UNKNOWN

    # --- attributes ---
    def _attribute(self, node: cst.Attribute, scope: NameScope, position, depth) -> Value:
        qualified = scope.names.qualify(node)
        if qualified is not None:
            if qualified in TORCH_DTYPES:
                return make_value(Atom(Kind.DTYPE, literal=qualified))
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

                return map_atoms(inner, type_of)
            return UNKNOWN
        if attr == "device":
            if _setting_like(receiver, scope):
                return UNKNOWN
            return make_value(Atom(Kind.DEVICE, certain=False))
        if attr == "dtype":
            return make_value(Atom(Kind.DTYPE, certain=False))
        return UNKNOWN

    def _self_attribute(self, scope: NameScope, attr: str, depth: int) -> Optional[Value]:
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
                    values.append(self._binding_value(Binding(binding.value, 0, False, binding.without_cuda, node=binding.node), enclosing, depth))
                else:
                    values.append(self._binding_value(binding, owner, depth))
        if not values:
            return None
        return join_values(values)

    def _relatives(self, cls: ClassInfo) -> List[ClassInfo]:
        """The class, its bases and its subclasses that this file defines (each name defined once)."""
        found: List[ClassInfo] = [cls]
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
    def _call(self, node: cst.Call, scope: NameScope, position, depth) -> Value:
        func = node.func
        qualified = scope.names.qualify(func)
        if qualified == "torch.device":
            return self._torch_device(node, scope, position, depth)
        if qualified == "torch.cuda.is_available":
            return make_value(Atom(Kind.BOOL))
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
                    return make_value(Atom(Kind.DTYPE, literal=f"torch.{attribute.evaluated_value}"))
            return UNKNOWN
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            if method == "format":
                inner = self._expression(receiver, scope, position, depth)
                text = inner.literal if inner.kind is Kind.STRING else None
                if isinstance(text, str):
                    if ":" in text and "{" not in text.split(":")[0]:
                        return make_value(Atom(Kind.STRING, device_type=text.split(":")[0], index=Index.YES))
                    return make_value(Atom(Kind.STRING))
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
            return make_value(Atom(Kind.DEVICE))
        first = next((a for a in args if a.keyword is None or a.keyword.value == "type"), None)
        index = next((a for a in args if a is not first and (a.keyword is None or a.keyword.value == "index")), None)
        if first is None:
            return make_value(Atom(Kind.DEVICE))
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

        return map_atoms(inner, device_of)

    def _subscript(self, node: cst.Subscript, scope: NameScope, position, depth) -> Value:
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
                return map_atoms(inner, lambda a: replace(a, literal=a.device_type, index=Index.NO, stringified=False))
            return make_value(Atom(Kind.STRING, index=Index.NO))
        key = subscript_key(node)
        if key is None or not isinstance(value, cst.Name):
            return UNKNOWN
        found = self.reaching(value.value, scope, position)
        if found is None or found[2] is not None:
            return UNKNOWN
        owner, bindings, _ = found
        if value.value in owner.mutated or self._escapes(value.value, owner):
            return UNKNOWN
        values = []
        for binding in bindings:
            element = dict_entry(binding.value, key, owner.names)
            if element is None:
                return UNKNOWN
            values.append(self._binding_value(Binding(element, binding.position, False, binding.without_cuda, node=binding.node), owner, depth))
        for binding in owner.items.get((value.value, key), ()):
            values.append(self._binding_value(binding, owner, depth))
        return join_values(values)

    def _escapes(self, name: str, scope: NameScope) -> bool:
        """Is the dict `name` used otherwise than `name[...]` (a call, a method, an alias) in its scope?"""
        return used_otherwise(name, scope, lambda node, parent: isinstance(parent, cst.Subscript) and parent.value is node)

    def _is_builtin(self, name: str, scope: NameScope) -> bool:
        return all(name not in s.bindings and name not in s.params for s in scope.chain()) and scope.names.lookup(name) is None

    def _index_function(self, name: str, scope: NameScope) -> Optional[NameScope]:
        for current in scope.chain():
            bindings = current.bindings.get(name)
            if bindings is None and name not in current.params:
                continue
            if bindings and len(bindings) == 1 and bindings[0].function is not None and name not in current.params:
                function = bindings[0].function
                return function if set(function.decorators) <= _TRANSPARENT_DECORATORS else None
            return None
        return None

    def _method_returns(self, scope: NameScope, method: str, depth: int) -> Value:
        cls = scope.cls
        if cls is None:
            return UNKNOWN
        found: List[NameScope] = []
        for relative in self._relatives(cls):
            found.extend(relative.methods.get(method, ()))
        if len(found) != 1 or not set(found[0].decorators) <= _TRANSPARENT_DECORATORS:
            return UNKNOWN
        return self._returns(found[0], depth)

    def _returns(self, function: NameScope, depth: int) -> Value:
        if function.generator or isinstance(function.node, cst.Module):
            return UNKNOWN
        if isinstance(function.node, cst.FunctionDef) and function.node.asynchronous is not None:
            return UNKNOWN
        values = []
        for expression, position in function.returns:
            if expression is None:
                values.append(make_value(Atom(Kind.NONE)))
            else:
                values.append(self._expression(expression, function, position, depth))
        if not always_returns(function.body):
            values.append(make_value(Atom(Kind.NONE)))
        return join_values(values)


def _setting_like(receiver: cst.BaseExpression, scope: NameScope) -> bool:
    """`args.device`, `cfg.device`, `self.trainer.device`: a setting that often holds a string."""
    key = dotted_name(receiver)
    if key is None:
        return False  # next(model.parameters()).device: a tensor's device
    head = key.split(".")[0]
    return head in ("self", "cls") or head == scope.self_name or any(word in key.lower() for word in _SETTING_WORDS)


# --- one file at a time ----------------------------------------------------------------------------

_last: List[FileValues] = []


def forget() -> None:
    """The file's analysis is over: let its tree go (see `fixes.builder.forget_text`)."""
    for values in _last:
        values._index.release()  # its cycles broken: freed by refcounting (`DefUseIndex.release`)
    _last.clear()


def of(module: cst.Module) -> FileValues:
    """The values of `module`, indexed on the first call for it (rules check one file at a time)."""
    if _last and _last[0].module is module:
        return _last[0]
    values = FileValues(module)
    _last[:] = [values]
    return values
