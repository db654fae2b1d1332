"""The callers of a function of the checked file in other modules of its project (AMP013: a scaler built in a
function that another module's epoch loop calls once per epoch, animl #298).

`CallerSearch` is the part of the cross-file provider (`summaries.ProjectSummaries`) that looks the other
way round: from the checked file to the modules that call it. The files searched come from
`amp_lint.analysis.callers` (the same set whatever the run was asked to check); a byte search for the
function's name first, then an `ast` look for a call in a loop, and only then a LibCST parse of the caller
(at most `MAX_CALLER_MODULES`), whose calls are never followed in turn.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import List, Optional, Tuple

import libcst as cst

from amp_lint.analysis.callers import MAX_MODULE_BYTES, attribute_kept, caller_scan_files
from amp_lint.analysis.foreign_modules import ForeignModule
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.project import ModuleInfo, qualified_in, source_root_of

MAX_CALLER_MODULES = 4  # callers parsed for one checked file


class CallerSearch:
    """Mixed into `ProjectSummaries`: uses its index, `_parse`, `_building` and the caller caches it sets up."""

    def callers_of(self, scope) -> List[Tuple[object, object]]:
        """The calls of the function or method `scope` of the checked file made inside loops of other
        project modules, as (the caller's FileModel, its CallSite), in path order. Only calls whose callee provably is this
        function: its name imported from this module (`from pkg.engine import train`, `engine.train`), a
        method called on an attribute or local that holds an instance of its class (`self.runner =
        Runner()`, `runner = Runner()`), or inherited (`self.fit_epoch()` in a subclass)."""
        if not self._building:
            return []
        checked = self._building[0]
        node = scope.node
        if not scope.is_function or scope.parent is None or scope.parent.is_function:
            return []  # a nested function has no name other modules can import
        info = self.index.module_at(Path(checked))
        if info is None or not info.name:
            return []
        function = node.name.value
        class_name = scope.class_name
        if class_name is None and function not in info.functions:
            return []
        if class_name is not None and class_name not in info.classes:
            return []
        needle = function.encode("utf-8")
        found: List[Tuple[object, object]] = []
        parsed = 0
        for path in self._scan_set(checked):
            try:
                with open(path, "rb") as handle:
                    data = handle.read(MAX_MODULE_BYTES + 1)
            except OSError:
                continue
            if len(data) > MAX_MODULE_BYTES or needle not in data:
                continue
            caller_info = self.index.module_at(Path(path))
            if caller_info is None or not self._may_name(caller_info, checked, class_name or function):
                continue
            if not _calls_in_a_loop(data, function):
                continue  # `ast` says so at a tenth of a LibCST parse: no call of the name inside a loop
            if parsed >= MAX_CALLER_MODULES:
                break
            parsed += 1
            foreign = self._load_caller(caller_info)
            if foreign is None or foreign.model is None:
                continue
            for site in foreign.model.call_sites:
                if site.loops and self._calls(caller_info, path, foreign.model, site, checked, function, class_name):
                    found.append((foreign.model, site))
        return found

    def attribute_kept(self, attribute: str) -> Optional[bool]:
        """Does the whole project (the checked file's search set, itself included) only call methods on,
        assign or test the attribute `attribute`, never update it or hand it on? None without a search set
        (no project, or a package too large to search)."""
        if not self._building:
            return None
        checked = self._building[0]
        root, name = source_root_of(Path(checked))
        key = f"{root}\0{name.split('.')[0] if name else ''}"
        if key not in self._scan_sets:
            self._scan_sets[key] = caller_scan_files(root, name)
        files = self._scan_sets[key]
        if not files:
            return None
        own = os.path.abspath(checked)
        return attribute_kept(files if own in files else (*files, own), attribute)

    def _scan_set(self, checked: str) -> Tuple[str, ...]:
        root, name = source_root_of(Path(checked))
        key = f"{root}\0{name.split('.')[0] if name else ''}"
        if key not in self._scan_sets:
            self._scan_sets[key] = caller_scan_files(root, name)
        own = os.path.abspath(checked)
        return tuple(f for f in self._scan_sets[key] or () if f != own)

    def _may_name(self, caller: ModuleInfo, checked: str, name: str) -> bool:
        """Does the caller module import the checked module or `name` from it (directly or re-exported)?"""
        own = os.path.abspath(checked)
        for imported in caller.imports.values():
            path = self.index.path_of_module(imported)
            if path is not None and os.path.abspath(path) == own:
                return True
            resolved = self.index.resolve(imported)
            if resolved is not None and os.path.abspath(resolved[0].path) == own:
                return True
        return False

    def _is_ours(self, caller: ModuleInfo, dotted: str, checked: str, name: str) -> bool:
        """Does `dotted`, as written in the caller module, name the top-level `name` of the checked file?"""
        head = dotted.split(".")[0]
        if head in caller.functions or head in caller.classes:
            return False  # defined there too: which one runs depends on the order, not worth a guess
        qualified = qualified_in(caller, dotted)
        if qualified is None:
            return False
        resolved = self.index.resolve(qualified)
        return resolved is not None and resolved[1] == name and os.path.abspath(resolved[0].path) == os.path.abspath(checked)

    def _calls(self, caller: ModuleInfo, path: str, model, site, checked: str, function: str, class_name: Optional[str]) -> bool:
        func = site.func
        if not func:
            return False
        parts = func.split(".")
        if parts[0] in site.scope.params and parts[0] != "self":
            return False  # a parameter: whatever the caller passes
        if class_name is None:
            return self._is_ours(caller, func, checked, function)
        if parts[-1] != function:
            return False
        holder_class = site.scope.class_name
        if parts[0] == "self" and len(parts) == 3 and holder_class is not None:
            qualified = self.attribute_classes_of(caller, path).get(holder_class, {}).get(parts[1])
            if qualified is None:
                return False
            resolved = self.index.resolve(qualified)
            return resolved is not None and resolved[1] == class_name and os.path.abspath(resolved[0].path) == os.path.abspath(checked)
        if parts[0] == "self" and len(parts) == 2 and holder_class is not None:
            if defines_method(model, holder_class, function):
                return False
            bases = caller.classes.get(holder_class, ())
            return len(bases) == 1 and self._is_ours(caller, bases[0], checked, class_name)
        if len(parts) == 2 and parts[0] != "self":  # `runner = Runner(...)` then `runner.fit_epoch()`
            values = [a.value for a in model.assignment_sites if a.scope is site.scope and a.target == parts[0]]
            if len(values) != 1 or not isinstance(values[0], cst.Call):
                return False
            built = dotted_name(values[0].func)
            return built is not None and self._is_ours(caller, built, checked, class_name)
        return False

    def _load_caller(self, info: ModuleInfo) -> Optional[ForeignModule]:
        path = os.path.abspath(info.path)
        if path in self._building:
            return None
        key = (path, info.digest)
        if key not in self._caller_modules:
            # Its own calls are not followed: what the checked file's analysis reads (and the bound on
            # it, MAX_MODULES_PER_FILE) stays what it is without this caller.
            self._reading_callers = True
            try:
                self._caller_modules[key] = self._parse(path, info.digest, any_text=True)
            finally:
                self._reading_callers = False
        return self._caller_modules[key]


def defines_method(model, class_name: str, method: str) -> bool:
    return any(
        s.is_function and s.class_name == class_name and s.node.name.value == method and s.parent is not None and not s.parent.is_function
        for s in model.scopes
    )


def _calls_in_a_loop(data: bytes, name: str) -> bool:
    """Does the module's text call something named `name` (`name(...)`, `x.name(...)`) inside a loop?"""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    func = inner.func
                    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                    if called == name:
                        return True
    return False
