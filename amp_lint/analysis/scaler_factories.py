"""Which values are GradScalers when no `GradScaler(...)` is written where they are bound (issue 26, principle 4:
values followed everywhere; the protocol rules then apply to them as to any scaler).

- A project function of another module that returns a GradScaler construction on every path that returns
  (accelerate's `get_grad_scaler(...)`, which picks torch's, the sharded one or a vendor's `*.amp.GradScaler`
  by the environment): `self.scaler = get_grad_scaler(...)` is a scaler.

A vendor's `torch_xla.amp.GradScaler` / `torch.npu.amp.GradScaler` keeps torch's protocol (it subclasses it),
so a `.amp.GradScaler` / `ShardedGradScaler` of any module counts, as `*.amp.autocast` does for autocast
factories. A class the project defines is never taken for torch's, whatever its name.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Optional, Sequence, Tuple

from amp_lint.analysis.names import GRAD_SCALER
from amp_lint.analysis.project import MAX_MODULE_BYTES, ModuleInfo, ast_dotted_name, qualified_in
from amp_lint.parse import outline

_FACTORIES: Dict[Tuple[str, str, str], Optional[str]] = {}


def scaler_factory(name: str) -> Optional[str]:
    """For the module being built: the imported name `name` is a project function that returns a GradScaler
    on every path that returns: the qualified scaler class (the first, when several), else None (also
    without a project)."""
    from amp_lint.analysis import summaries

    return summaries.project_function_answer(name, _FACTORIES, _read_scaler_factory)


def _read_scaler_factory(index, info: ModuleInfo, function: str) -> Optional[str]:
    if os.path.getsize(info.path) > MAX_MODULE_BYTES:
        return None
    with open(info.path, "rb") as handle:
        tree = outline.parse(handle.read().decode("utf-8-sig"), keep=(function,))  # that function's body alone
    if tree is None:
        return None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if len(defs) != 1:
        return None
    local: Dict[str, str] = {}  # imports inside the function (`from torch.amp.grad_scaler import GradScaler`)
    returns, stack = [], list(defs[0].body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if isinstance(node, ast.Return):
            returns.append(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                local[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        stack.extend(ast.iter_child_nodes(node))
    found = []
    for node in returns:
        call = node.value
        dotted = ast_dotted_name(call.func) if isinstance(call, ast.Call) else None
        if dotted is None:
            return None  # a path that returns something else (None, a wrapper): not a scaler on every path
        head, dot, rest = dotted.partition(".")
        qualified = (local[head] + dot + rest) if head in local else (qualified_in(info, dotted) or dotted)
        if not _is_scaler_class(index, qualified):
            return None
        found.append(qualified)
    return found[0] if found else None


def _is_scaler_class(index, qualified: str) -> bool:
    if qualified in GRAD_SCALER:
        return True
    if not (qualified.endswith(".amp.GradScaler") or qualified.endswith(".ShardedGradScaler")) or "." not in qualified:
        return False
    return index.resolve(qualified) is None  # the project's own class of that name is not torch's


# --- project classes that a scaler name may hold: the rules ask while a file is checked --------------------


def _provider():
    from amp_lint.analysis import summaries

    return summaries._ACTIVE[-1] if summaries._ACTIVE else None


def _class_and_bases(provider, qualified: Sequence[str]):
    """(qualified name, (module, class) or None when it is no class of the project) for the classes
    `qualified` and, breadth first, their bases as their modules import them (at most 16)."""
    pending, seen = list(qualified), set()
    while pending and len(seen) < 16:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        resolved = provider.index.resolve(current)
        if resolved is None or resolved[1] not in resolved[0].classes:
            yield current, None
            continue
        info, name = resolved
        provider.index.note_read(info.path)
        yield current, resolved
        pending.extend(qualified_in(info, base) or f"{info.name}.{base}" for base in info.classes[name] if base != "object")


def _asking(question, default):
    """Run a question about the project's classes; an unreadable corner never costs the file its findings."""
    provider = _provider()
    if provider is None:
        return default
    try:
        return question(provider)
    except (RecursionError, MemoryError):
        raise
    except Exception:
        return default


def project_class_binds(model, qualified: str, names: frozenset) -> bool:
    """For a rule: does `qualified` (a class name as the module of `model` imports it) resolve to a class of the
    project that binds one of `names` itself or through a base of the project (not torch's)? False without a
    project, for a name outside it, or when the module cannot be read."""
    return _asking(
        lambda provider: any(
            found is not None and not names.isdisjoint(found[0].members.get(found[1], {}))
            for _, found in _class_and_bases(provider, [qualified])
        ),
        False,
    )


def built_in_a_base(model, scope, attribute: str) -> Optional[str]:
    """For `self.<attribute>` in a method of a class of the checked file: the project class that a base class in
    another module builds it from (`self.grad_scaler = DummyGradScaler()` in torch's benchmark runner, the
    only assignment there), the nearest base first; None otherwise."""
    cls = model.classes.get(scope.class_name or "")
    if cls is None:
        return None
    bases = [q for q in (scope.names.qualify(base.value) for base in cls.bases) if q and not q.startswith("torch.")]

    def question(provider):
        for _, found in _class_and_bases(provider, bases):
            built = provider.attribute_classes_of(found[0], found[0].path).get(found[1], {}).get(attribute) if found else None
            if built is not None:
                return built
        return None

    return _asking(question, None)


def derives_from_torch_scaler(qualified: str) -> bool:
    """Does the project class `qualified` derive (through project classes) from a torch GradScaler? True when
    a base cannot be read (it may be one)."""
    return _asking(
        lambda provider: any(
            _is_scaler_class(provider.index, current) or (found is None and not current.startswith("builtins."))
            for current, found in _class_and_bases(provider, [qualified])
        ),
        True,
    )
