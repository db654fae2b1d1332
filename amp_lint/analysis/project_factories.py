"""Project functions of other modules that return an autocast or a GradScaler on every path (issue 26,
principle 4: values followed everywhere), read from their module's `ast` without building its model.

- `autocast_factory`: `def autocast(enabled): return torch.amp.autocast("cuda", enabled=enabled)` in
  `pkg.utils`, then `with autocast(self.amp):` in the checked file: entering its result enters autocast.
- `scaler_factory`: accelerate's `get_grad_scaler(...)`, which picks torch's, the sharded one or a vendor's
  `*.amp.GradScaler` by the environment: `self.scaler = get_grad_scaler(...)` is a scaler.

A vendor's `torch_xla.amp.GradScaler` / `torch.npu.amp.GradScaler` keeps torch's protocol (it subclasses it),
so a `.amp.GradScaler` / `ShardedGradScaler` of any module counts, as `*.amp.autocast` does for autocast
factories (`is_scaler_class`). A class the project defines is never taken for torch's, whatever its name.
The file model asks these through `project_hooks.project()`; `summaries.ProjectSummaries` answers with them.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

from amp_lint.analysis.names import AUTOCAST, GRAD_SCALER, IMPLIED_DEVICE
from amp_lint.analysis.project import MAX_MODULE_BYTES, ModuleInfo, ast_dotted_name, qualified_in
from amp_lint.parse import outline, python_ast


def autocast_factory(provider, name: str) -> Optional[Tuple[str, Optional[str], Optional[bool]]]:
    """A project function returning an autocast on every path: (qualified name, device, enabled) or None."""
    return project_function_answer(provider, name, _AUTOCAST_FACTORIES, _read_autocast_factory)


def scaler_factory(provider, name: str) -> Optional[str]:
    """For the module being built: the imported name `name` is a project function that returns a GradScaler
    on every path that returns: the qualified scaler class (the first, when several), else None."""
    return project_function_answer(provider, name, _SCALER_FACTORIES, _read_scaler_factory)


def project_function_answer(provider, name: str, memo: dict, read):
    """For the module `provider` is building: `read(index, module, function)` of the project function `name`
    resolves to, memoised per module version in `memo`, recorded as a dependency; None when unresolved or
    unreadable."""
    if not provider._building:
        return None
    try:
        info = provider.index.module_at(Path(provider._building[-1]))
        qualified = qualified_in(info, name) if info is not None else None
        resolved = provider.index.resolve(qualified) if qualified is not None else None
        if resolved is None or resolved[1] not in resolved[0].functions:
            return None
        module_info, function = resolved
        key = (module_info.path, module_info.digest, function)
        if key not in memo:
            memo[key] = read(provider.index, module_info, function)
        provider.index.note_read(module_info.path)
        return memo[key]
    except (RecursionError, MemoryError):
        raise
    except Exception:  # an unreadable corner of another module never costs this file its findings
        return None


_AUTOCAST_FACTORIES: Dict[Tuple[str, str, str], Optional[Tuple[str, Optional[str], Optional[bool]]]] = {}
_SCALER_FACTORIES: Dict[Tuple[str, str, str], Optional[str]] = {}


def _read_autocast_factory(index, info: ModuleInfo, function: str):
    if os.path.getsize(info.path) > MAX_MODULE_BYTES:
        return None
    with open(info.path, "rb") as handle:
        tree = python_ast.parse(handle.read().decode("utf-8-sig"))
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if len(defs) != 1:
        return None
    returns, stack = [], list(defs[0].body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if isinstance(node, ast.Return):
            returns.append(node)
        stack.extend(ast.iter_child_nodes(node))
    found = []
    for node in returns:
        call = node.value
        dotted = ast_dotted_name(call.func) if isinstance(call, ast.Call) else None
        if dotted is None:
            return None
        qualified = qualified_in(info, dotted) or dotted
        if qualified not in AUTOCAST and not qualified.endswith(".amp.autocast"):
            return None  # a path that returns something else (a nullcontext): not an autocast
        device = enabled = None
        first = call.args[0] if call.args and qualified not in IMPLIED_DEVICE else None
        for candidate in [first] + [k.value for k in call.keywords if k.arg == "device_type"]:
            if isinstance(candidate, ast.Constant) and isinstance(candidate.value, str):
                device = candidate.value.split(":")[0]
        for keyword in call.keywords:
            if keyword.arg == "enabled" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, bool):
                enabled = keyword.value.value
        if not call.args and not any(k.arg == "enabled" for k in call.keywords):
            enabled = True
        found.append((qualified, device or IMPLIED_DEVICE.get(qualified), enabled))
    if not found:
        return None
    devices = {f[1] for f in found}
    enabled_values = {f[2] for f in found}
    return (
        found[0][0],
        devices.pop() if len(devices) == 1 else None,
        enabled_values.pop() if len(enabled_values) == 1 else None,
    )


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
        if not is_scaler_class(index, qualified):
            return None
        found.append(qualified)
    return found[0] if found else None


def is_scaler_class(index, qualified: str) -> bool:
    if qualified in GRAD_SCALER:
        return True
    if not (qualified.endswith(".amp.GradScaler") or qualified.endswith(".ShardedGradScaler")) or "." not in qualified:
        return False
    return index.resolve(qualified) is None  # the project's own class of that name is not torch's
