"""Where a binary cross-entropy runs: in the call itself, or in a function of the file that the call reaches.

AMP052's ban is on the op, wherever the code that runs it is written: a loss helper (`def bce_term(...)`,
a loss class's `__call__` / `forward`, a method of the trainer) called inside a CUDA autocast runs its
`binary_cross_entropy` under that autocast (issue 46, principle 5: reached through calls). A helper's BCE
counts when it runs in the autocast state of its caller: not inside an autocast region of its own.

Callees are followed only where the file proves them: a module-level function called by its plain name, a
method of the caller's own class through `self.method(...)`, and an instance of a class of the file
(`crit = Loss()` then `crit(...)`: its `__call__`, or `forward` for a module).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.names import binds_at_module_level, dotted_name

_MAX_ROUNDS = 6


def called_under(model: FileModel, entries: Dict[int, Tuple[CallSite, object]]) -> Dict[int, Tuple[CallSite, object]]:
    """id(function scope) -> (the call inside an autocast region that reaches it, what the region was), for the
    file's functions that run in the autocast state of such a call: `entries` (the callees of the calls in the
    regions), and the functions they call in turn outside a region of their own."""
    reached = dict(entries)
    for _ in range(_MAX_ROUNDS):
        added = False
        for site in model.call_sites:
            origin = reached.get(id(site.scope))
            if origin is None or site.regions:
                continue
            for callee in callees(model, site):
                if id(callee) not in reached:
                    reached[id(callee)] = origin
                    added = True
        if not added:
            break
    return reached


def callees(model: FileModel, site: CallSite) -> List[Scope]:
    """The function scopes of the file that `site` calls, where the file proves it (see the module)."""
    func = site.call.func
    key = dotted_name(func)
    if key is None:
        return []
    if "." not in key:
        functions = []
        if binds_at_module_level(site.scope.names, key):
            functions = [
                s for s in model.function_scopes_named(key)
                if s.class_name is None and s.parent is not None and not s.parent.is_function
            ]
        return functions or _instance_methods(model, site, key)
    head, _, attr = key.partition(".")
    if head == "self" and "." not in attr and site.scope.class_name is not None:
        own = [s for s in model.function_scopes_named(attr) if s.class_name == site.scope.class_name]
        return own or _instance_methods(model, site, key)
    return []


def _instance_methods(model: FileModel, site: CallSite, key: str) -> List[Scope]:
    """`crit(...)` where every assignment of `crit` in reach builds an instance of one class of the file."""
    classes = set()
    for assignment in model.assignment_sites:
        if assignment.target != key:
            continue
        if key.startswith("self."):
            if assignment.scope.class_name != site.scope.class_name:
                continue
        elif assignment.scope not in list(site.scope.chain()):
            continue
        name = _class_built(model, assignment.value, assignment.scope)
        if name is None:
            return []
        classes.add(name)
    if len(classes) != 1:
        return []
    (cls,) = classes
    for method in ("__call__", "forward"):
        scopes = [s for s in model.function_scopes_named(method) if s.class_name == cls]
        if scopes:
            return scopes
    return []


def _class_built(model: FileModel, value: cst.BaseExpression, scope: Scope) -> Optional[str]:
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in model.classes:
        if binds_at_module_level(scope.names, value.func.value):
            return value.func.value
    return None
