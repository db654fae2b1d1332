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
from typing import Dict, Optional, Tuple

from amp_lint.analysis.names import GRAD_SCALER
from amp_lint.analysis.project import MAX_MODULE_BYTES, ModuleInfo, ast_dotted_name, qualified_in
from amp_lint.parse import python_ast

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
        tree = python_ast.parse(handle.read().decode("utf-8-sig"))
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
