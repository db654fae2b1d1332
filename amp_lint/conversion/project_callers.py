"""The calls of a function of the file being converted made inside loops of other modules of its project.

A training function that receives its optimizer (`train_one_epoch(model, loader, optimizer)`) and whose calls are
not all in its own file may be called once per epoch from another module (`for epoch in ...:
train_one_epoch(...)` in `main.py`). A GradScaler created inside it would restart every epoch; it belongs beside
the optimizer, in the caller. This query finds such callers: the files `analysis.callers.caller_scan_files`
searches for AMP013 (the file's package and the modules beside its source root: the same set whatever the run
checks), a byte search for the name first, then Python's `ast`: a call inside a `for` / `while` whose name
resolves, through the caller's imports (`ProjectIndex.resolve`), to this very function. Each file that names it
is recorded as a dependency of the result (`ProjectIndex.note_read`).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import List, Optional, Tuple

from amp_lint.analysis.callers import MAX_MODULE_BYTES, caller_scan_files
from amp_lint.analysis.project import ProjectIndex, ast_dotted_name, checked_file, qualified_in, source_root_of

MAX_CALLERS = 3  # call sites named in a refusal


def looped_callers(function: str, found: Optional[Tuple[ProjectIndex, str]] = None) -> List[Tuple[str, int]]:
    """(path, line) of the calls of the top-level function `function` of the file being checked, made inside a loop
    of another module of its project; [] without a project (stdin, the API)."""
    out = [(path, line) for path, line, in_loop in project_calls(function, found) if in_loop]
    return sorted(out)[:MAX_CALLERS]


def project_calls(function: str, found: Optional[Tuple[ProjectIndex, str]] = None) -> List[Tuple[str, int, bool]]:
    """(path, line, inside a loop) of every call of the top-level function `function` of the file being checked
    made in another module of its project (the modules `caller_scan_files` searches), each call once."""
    found = found or checked_file()
    if found is None:
        return []
    index, own = found
    try:
        index.add_file(Path(own))  # its source root resolves the callers' imports
    except OSError:
        return []
    root, name = source_root_of(Path(own))
    files = caller_scan_files(root, name) or ()
    needle = function.encode("utf-8")
    out: List[Tuple[str, int, bool]] = []
    for path in files:
        if os.path.abspath(path) == own:
            continue
        try:
            if os.path.getsize(path) > MAX_MODULE_BYTES:
                continue
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        if needle not in data:
            continue
        index.note_read(path)
        info = index.module_at(Path(path))
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if info is None:
            continue
        in_loops = {id(call) for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.AsyncFor, ast.While))
                    for call in ast.walk(loop) if isinstance(call, ast.Call)}  # fmt: skip
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            dotted = ast_dotted_name(call.func)
            if dotted is None or dotted.rpartition(".")[2] != function:
                continue
            qualified = qualified_in(info, dotted)
            resolved = index.resolve(qualified) if qualified is not None else None
            if resolved is not None and resolved[1] == function and os.path.abspath(resolved[0].path) == own:
                entry = (path, call.lineno, id(call) in in_loops)
                if entry not in out:
                    out.append(entry)
    return sorted(out)
