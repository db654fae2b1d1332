"""What a `**kwargs` splat passes: the keys and values of a dict the file writes out.

`autocast(**amp_kwargs)` passes what `amp_kwargs` holds. When every definition of the name that can reach
the call is a dict display or a `dict(k=v, ...)` call with string keys, nothing else in its scope changes
or hands the dict on (an item written with an unknown key, `amp_kwargs.update(...)`, the dict passed to a
function), the keys are known: `{"device": "cuda"}` passes `device=`, which autocast does not take (its
parameter is `device_type`). Anything else is unknown, and a rule asking stays silent.
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from amp_lint.analysis.def_use import INSIDE_OWN_SCOPE, used_otherwise
from amp_lint.analysis.values import FileValues

Entries = Dict[str, cst.BaseExpression]


def literal_entries(value: Optional[cst.BaseExpression]) -> Optional[Entries]:
    """The entries of `{"k": v}` / `dict(k=v)` when every key is a plain string; None otherwise."""
    if isinstance(value, cst.Dict):
        out: Entries = {}
        for element in value.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            key = element.key.evaluated_value
            if not isinstance(key, str):
                return None
            out[key] = element.value
        return out
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if any(a.keyword is None for a in value.args):
            return None
        return {a.keyword.value: a.value for a in value.args if a.keyword is not None}
    return None


def splat_entries(
    values: FileValues,
    splat: cst.BaseExpression,
    scope_node: Optional[cst.CSTNode],
    parents: Optional[Dict[int, cst.CSTNode]] = None,
) -> Optional[Entries]:
    """The entries a `**splat` passes, when they are known (see the module's docstring)."""
    direct = literal_entries(splat)
    if direct is not None or not isinstance(splat, cst.Name):
        return direct
    scope = values.scope(scope_node)
    position = scope.position_of(splat, parents)
    if position == INSIDE_OWN_SCOPE:
        return None
    found = values.reaching(splat.value, scope, position)
    if found is None or found[2] is not None:
        return None
    owner, bindings, _ = found
    name = splat.value
    if name in owner.mutated or any(key[0] == name for key in owner.items) or used_otherwise(name, owner, _splatted):
        return None
    merged: Optional[Entries] = None
    for binding in bindings:
        entries = literal_entries(binding.value)
        if entries is None:
            return None
        if merged is not None and set(merged) != set(entries):
            return None  # definitions that pass different keys: which one reaches is not known
        merged = entries if merged is None else merged
    return merged


def _splatted(node: cst.CSTNode, parent: Optional[cst.CSTNode]) -> bool:
    return isinstance(parent, cst.Arg) and parent.star == "**"
