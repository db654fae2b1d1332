"""Code that exists for old torch: the deprecation rules leave it alone.

Projects that support several torch releases keep the old spelling on purpose, in a branch that only old
torch takes (lightning_fabric, pytorch_lightning, timm `utils/cuda.py` and `layers/fast_norm.py`,
ultralytics, torchrl `trainers.py`):

    try:                                        scaler = (torch.amp.GradScaler("cuda") if TORCH_2_4
        scaler = torch.amp.GradScaler(device)             else torch.cuda.amp.GradScaler())
    except (AttributeError, TypeError):
        scaler = torch.cuda.amp.GradScaler()    if _TORCH_GREATER_EQUAL_2_4: ... else: torch.cuda.amp.autocast()

Rewriting such a fallback into the modern call turns it into the call that just failed. And after
`try: from torch.amp import GradScaler` / `except ImportError: from torch.cuda.amp import GradScaler`, the
name means either class: the calls are written for the modern one and must not gain a second device.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.parse.node_memo import NodeMemo

# Spellings of the device-generic API (torch.amp, torch.autocast, the state functions that take a device).
_MODERN = re.compile(
    r"\btorch\s*\.\s*amp\b|\bfrom\s+torch\s+import\s+[^\n]*\bamp\b|\btorch\s*\.\s*autocast\b|\btorch\s*\.\s*GradScaler\b"
    r"|\b(?:get|set)_autocast_dtype\b|\bis_autocast_enabled\s*\(\s*[^)\s]"
)
# A test that asks which torch is running.
_VERSION_TEST = re.compile(
    r"[Vv]ersion|VERSION|\bTORCH_\w*\d|_TORCH_\w*(?:GREATER|LESS|_GE_|_LT_|\d)\w*|\btorch_\d|\bhasattr\s*\(\s*torch\b"
    r"|\bgetattr\s*\(\s*torch\b|is_torch_(?:greater|less)\w*"
)
# Exceptions a missing or different API raises.
_MISSING_API = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "Exception", "BaseException"})


def _ancestors(model: FileModel, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    current = model.parents.get(id(node))
    while current is not None:
        yield current
        current = model.parents.get(id(current))


def _catches_missing_api(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for element in types:
        expr = element.value if isinstance(element, cst.Element) else element
        name = dotted_name(expr)
        if name is not None and name.rsplit(".", 1)[-1] in _MISSING_API:
            return True
    return False


# Asked for each deprecated spelling inside the same `try` body or `if` test: generating the code of a
# large body once per spelling cost a second on torch's `_dynamo` (one memo per question).
_USES_MODERN_API = NodeMemo(lambda node: _MODERN.search(code_of(node)) is not None)
_IS_VERSION_TEST = NodeMemo(lambda test: _VERSION_TEST.search(code_of(test)) is not None)


def uses_modern_api(node: Optional[cst.CSTNode]) -> bool:
    return node is not None and _USES_MODERN_API(node)


def is_version_test(test: cst.BaseExpression) -> bool:
    return _IS_VERSION_TEST(test)


def in_old_torch_branch(model: FileModel, node: cst.CSTNode) -> bool:
    """Does `node` sit where only an old torch runs: the `except` of a `try` that uses the modern API, the
    other side of a version test (`if`, `else`, conditional expression)?"""
    child: cst.CSTNode = node
    for parent in _ancestors(model, node):
        if isinstance(parent, cst.ExceptHandler) and _catches_missing_api(parent):
            owner = model.parents.get(id(parent))
            if isinstance(owner, (cst.Try, cst.TryStar)) and uses_modern_api(owner.body):
                return True
        elif isinstance(parent, cst.IfExp) and child is not parent.test:
            other = parent.orelse if child is parent.body else parent.body
            if is_version_test(parent.test) or uses_modern_api(other):
                return True
        elif isinstance(parent, cst.If) and child is not parent.test:
            if is_version_test(parent.test):
                return True
            if child is parent.orelse and uses_modern_api(parent.body):
                return True
        elif isinstance(parent, (cst.IndentedBlock, cst.Module)) and _after_version_return(parent, child):
            return True
        child = parent
    return False


def _after_version_return(block: cst.CSTNode, statement: cst.CSTNode) -> bool:
    """`if _TORCH_GREATER_EQUAL_2_4: return torch.autocast(...)` before `statement` in the same block."""
    positions, first = _VERSION_RETURNS(block)
    position = positions.get(id(statement))
    return first is not None and position is not None and position > first


def _version_returns(block) -> Tuple[Dict[int, int], Optional[int]]:
    """Each statement's position in the block, and the position of the block's first `if` that returns or
    raises on a version test (or on the modern API): once per block, not once per name asked about (a
    class of a thousand methods made that quadratic)."""
    positions = {id(statement): position for position, statement in enumerate(block.body)}
    first = next((position for position, statement in enumerate(block.body) if _is_version_return(statement)), None)
    return positions, first


def _is_version_return(statement: cst.CSTNode) -> bool:
    if not isinstance(statement, cst.If) or statement.orelse is not None:
        return False
    body = statement.body
    last = body.body[-1] if isinstance(body, cst.IndentedBlock) and body.body else None
    small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and last.body else None
    # The shape first (a branch that ends in return/raise), the code's text only then.
    return isinstance(small, (cst.Return, cst.Raise)) and (is_version_test(statement.test) or uses_modern_api(body))


_VERSION_RETURNS = NodeMemo(_version_returns)


def import_bindings(model: FileModel, local: str, scope: Scope) -> List[str]:
    """What each import binding `local` in `scope` or a scope around it binds (one entry per import)."""
    chain = list(scope.chain())
    bound: List[str] = []
    for statement, import_scope in model.imports:
        if import_scope not in chain or isinstance(statement.names, cst.ImportStar):
            continue
        module = dotted_name(statement.module) if isinstance(statement, cst.ImportFrom) and statement.module else None
        if isinstance(statement, cst.ImportFrom) and statement.relative:
            continue
        for alias in statement.names:
            full = dotted_name(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                name = alias.asname.name.value
            else:
                name = full if isinstance(statement, cst.ImportFrom) else full.split(".")[0]
                if isinstance(statement, cst.Import):
                    full = name
            if name == local:
                bound.append(f"{module}.{full}" if module else full)
    return bound


def bound_differently(model: FileModel, local: str, scope: Scope) -> bool:
    """Is `local` bound by two imports of different things, or by an import and an assignment?"""
    bindings: Set[str] = set(import_bindings(model, local, scope))
    if len(bindings) > 1:
        return True
    return bool(bindings) and any(local in outer.assignments for outer in scope.chain())


def bound_twice(model: FileModel, local: str, scope: Scope) -> bool:
    return len(import_bindings(model, local, scope)) > 1
