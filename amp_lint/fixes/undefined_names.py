"""Names a fix would read that nothing binds (pyflakes' F821, the one question a fix check needs from it).

A fix writes code into a scope it did not read: an `unscale_(optimizer)` inserted in a caller whose
`optimizer` was a name of the callee's loop parses, passes every order rule, and raises NameError. The
standard library's `symtable` knows, for each scope of a module, which names it reads as globals; those that
no module-level statement binds and that are no builtins are undefined. A fix may not add one (the file's
own undefined names, a notebook's or a snippet's `loader`, are compared away).
"""

from __future__ import annotations

import builtins
import re
import symtable
import warnings
from typing import FrozenSet, Optional, Tuple

_BUILTINS = frozenset(dir(builtins)) | frozenset(
    {"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__", "__path__",
     "__annotations__", "__qualname__", "__module__", "__class__", "__dict__", "__all__", "__version__"}
)
_STAR_IMPORT = re.compile(r"^\s*from\s+\S+\s+import\s+\*", re.MULTILINE)

Undefined = FrozenSet[Tuple[str, str]]  # (scope path, name)


def undefined_names(code: str) -> Optional[Undefined]:
    """(scope, name) for each global read that nothing in the module binds; None when that cannot be told
    (a star import, code symtable refuses)."""
    if _STAR_IMPORT.search(code):
        return None
    try:
        with warnings.catch_warnings():  # `1()` warns when compiled: the fix check prints nothing
            warnings.simplefilter("ignore")
            top = symtable.symtable(code, "<fix>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    found = set()
    pending = [(top, "")]
    tables = []
    while pending:
        table, path = pending.pop()
        tables.append((table, path))
        for child in table.get_children():
            pending.append((child, f"{path}.{child.get_name()}" if path else child.get_name()))
    for table, _ in tables:  # `global x` then `x = ...` in a function binds a module name
        for symbol in table.get_symbols():
            if symbol.is_declared_global() and (symbol.is_assigned() or symbol.is_imported()):
                bound.add(symbol.get_name())
    for table, path in tables:
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if not symbol.is_referenced() or name in bound or name in _BUILTINS:
                continue
            if table is top:
                if not (symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()):
                    found.add((path, name))
            elif symbol.is_global() and not symbol.is_assigned():
                found.add((path, name))
    return frozenset(found)


def new_undefined_names(before: str, after: str) -> list:
    """The names `after` reads unbound that `before` did not (sorted; empty when either cannot be told)."""
    old, new = undefined_names(before), undefined_names(after)
    if old is None or new is None:
        return []
    return sorted(name for _, name in new - old)
