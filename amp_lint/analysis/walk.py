"""A lean tree walk with LibCST's hook names, several times faster than `CSTNode.visit`.

LibCST's visitor rebuilds every node's children through a generic protocol and calls hooks for every
field, whitespace included. The analysis only reads code, so this walk follows each node type's fields
that can hold code, in source order, and calls `visit_<Type>` / `leave_<Type>` and the field hooks
`visit_<Type>_<field>` / `leave_<Type>_<field>` that a subclass defines. As with LibCST, returning False
from `visit_<Type>` skips the node's children.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Dict, List, Optional, Tuple

import libcst as cst

# Fields that hold only whitespace, punctuation or comments.
_LAYOUT_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "comma",
        "semicolon",
        "leading_lines",
        "lines_after_decorators",
        "header",
        "footer",
        "operator",
        "equal",
        "colon",
        "dot",
        "star",
        "asynchronous",
        "newline",
        "trailing_whitespace",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "default_indicator",
        "indent",
        "encoding",
        "default_newline",
        "has_trailing_newline",
        "whitespace",
    }
)

# LibCST declares some fields out of source order; visit these in the order the code reads.
_SOURCE_ORDER: Dict[str, Tuple[str, ...]] = {
    "FunctionDef": ("decorators", "name", "params", "returns", "body"),
    "ClassDef": ("decorators", "name", "bases", "keywords", "body"),
    "IfExp": ("body", "test", "orelse"),
    "With": ("items", "body"),
}

_FIELDS_CACHE: Dict[type, Tuple[str, ...]] = {}


def code_fields(node_type: type) -> Tuple[str, ...]:
    fields = _FIELDS_CACHE.get(node_type)
    if fields is None:
        names = [
            f.name
            for f in dataclasses.fields(node_type)
            if f.name not in _LAYOUT_FIELDS and not f.name.startswith("whitespace")
        ]
        order = _SOURCE_ORDER.get(node_type.__name__)
        if order:
            names = [n for n in order if n in names] + [n for n in names if n not in order]
        fields = tuple(names)
        _FIELDS_CACHE[node_type] = fields
    return fields


_HOOK_TABLES: Dict[type, Dict[type, Tuple[Optional[Callable], Optional[Callable], Tuple[Tuple[str, Optional[Callable], Optional[Callable]], ...]]]] = {}
_NODE_TYPES: Dict[type, bool] = {}


def _is_node_type(kind: type) -> bool:
    """`issubclass(kind, cst.CSTNode)`, remembered: CSTNode's metaclass is ABCMeta, whose `isinstance` is
    a Python-level call, and the walk asks it of every field of every node."""
    known = _NODE_TYPES.get(kind)
    if known is None:
        known = _NODE_TYPES[kind] = issubclass(kind, cst.CSTNode)
    return known


class Walker:
    """Subclass and define hooks, then call `walk(module)`.

    `parents` maps each visited node (by id) to the node above it: the fixer finds a fix target's
    ancestors there instead of walking the tree again.
    """

    def __init__(self) -> None:
        # The hooks per node type, as plain functions of the class (called with the walker): shared by
        # every walk of one walker class, and no bound method ties the walker (with the tree it holds)
        # into a reference cycle that only the cyclic collector could free.
        self._hooks = _HOOK_TABLES.setdefault(type(self), {})
        self.parents: Dict[int, cst.CSTNode] = {}

    def _hooks_for(self, node_type: type):
        hooks = self._hooks.get(node_type)
        if hooks is None:
            name = node_type.__name__
            cls = type(self)
            fields = tuple(
                (field, getattr(cls, f"visit_{name}_{field}", None), getattr(cls, f"leave_{name}_{field}", None))
                for field in code_fields(node_type)
            )
            hooks = (getattr(cls, f"visit_{name}", None), getattr(cls, f"leave_{name}", None), fields)
            self._hooks[node_type] = hooks
        return hooks

    def walk(self, node: cst.CSTNode) -> None:
        visit, leave, fields = self._hooks_for(type(node))
        if visit is not None and visit(self, node) is False:
            return
        parents = self.parents
        for field, enter_field, leave_field in fields:
            value = getattr(node, field)
            if enter_field is not None:
                enter_field(self, node)
            kind = type(value)
            if kind is list or kind is tuple:
                for item in value:
                    if _is_node_type(type(item)):
                        parents[id(item)] = node
                        self.walk(item)
            elif _is_node_type(kind):
                parents[id(value)] = node
                self.walk(value)
            if leave_field is not None:
                leave_field(self, node)
        if leave is not None:
            leave(self, node)


# --- read-only visits with LibCST's own visitors, without LibCST's rebuilding of every node ----------

_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {}
_ATTRIBUTE_HOOK = re.compile(r"^(?:visit|leave)_[A-Za-z]+_\w+$")


def _child_fields(node_type: type) -> Tuple[str, ...]:
    """The fields LibCST visits, in the order it visits them: the field names that its
    `_visit_and_replace_children` passes to `visit_required(self, "field", ...)` and the like, read from the
    code's constants (in the order they first appear in its source) rather than from its source text, which
    cost a tokenizing of LibCST's files in every worker. A test compares the two readings for every node type."""
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        declared = [f.name for f in dataclasses.fields(node_type)]
        code = getattr(getattr(node_type, "_visit_and_replace_children", None), "__code__", None)
        named = [name for name in dict.fromkeys(_string_constants(code)) if name in declared] if code else []
        fields = _CHILD_FIELDS[node_type] = tuple(named or declared)  # unreadable: every field, declared order
    return fields


def _string_constants(code) -> List[str]:
    found: List[str] = []
    for constant in code.co_consts:
        if isinstance(constant, str):
            found.append(constant)
        elif hasattr(constant, "co_consts"):  # a nested function or comprehension
            found.extend(_string_constants(constant))
    return found


def children_in_source_order(node: cst.CSTNode) -> List[cst.CSTNode]:
    """`node.children` (every child, whitespace included, in LibCST's order) without LibCST's visitor."""
    return children_through(node, _child_fields)


def children_through(node: cst.CSTNode, fields_of: Callable[[type], Tuple[str, ...]]) -> List[cst.CSTNode]:
    """The nodes held by the fields `fields_of(type(node))` names, in that order (lists flattened)."""
    children: List[cst.CSTNode] = []
    for name in fields_of(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            children.append(value)
        elif isinstance(value, (list, tuple)):
            children.extend(item for item in value if isinstance(item, cst.CSTNode))
    return children


def visit_read_only(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """`node.visit(visitor)` for a visitor that only reads: the same `visit_<Type>`/`leave_<Type>` calls
    in the same order, several times faster. A visitor with attribute hooks (`visit_Call_func`) gets
    LibCST's own visit."""
    if _has_attribute_hooks(type(visitor)):
        node.visit(visitor)
        return
    pending: List[Tuple[cst.CSTNode, bool]] = [(node, False)]
    while pending:
        current, leaving = pending.pop()
        if leaving:
            visitor.on_leave(current)
            continue
        pending.append((current, True))
        if visitor.on_visit(current):
            pending.extend((child, False) for child in reversed(children_in_source_order(current)))


def _has_attribute_hooks(visitor_type: type) -> bool:
    """Does the visitor define `visit_<Type>_<field>` hooks? (LibCST's base classes declare every hook as
    a no-op: only the classes outside LibCST count.)"""
    return any(
        _ATTRIBUTE_HOOK.match(name)
        for klass in visitor_type.__mro__
        if not klass.__module__.startswith("libcst")
        for name in vars(klass)
    )
