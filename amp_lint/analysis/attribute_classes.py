"""What a class's attributes hold, read from its module's `ast`: `self.attr = ProjectClass(...)` in a method,
or `self.attr = self.build()` where that method of the class returns a new `ProjectClass` (its return
annotation, or every `return ProjectClass(...)`). The cross-file provider (`summaries.ProjectSummaries`)
follows `self.attr.method()` calls through them (issue 26, principles 3 and 4: resolve the calls that can be
resolved, values followed through one call). An attribute assigned twice, or from anything else, is left out.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Optional

from amp_lint.analysis.callers import MAX_MODULE_BYTES
from amp_lint.analysis.project import ModuleInfo, ast_dotted_name
from amp_lint.analysis.project import qualified_in as _qualified
from amp_lint.parse import outline


def attribute_classes(info: ModuleInfo, path: str) -> Dict[str, Dict[str, str]]:
    """class -> attribute -> qualified project class, for the classes of the module at `path`."""
    out: Dict[str, Dict[str, str]] = {}
    tree = None
    try:
        if os.path.getsize(path) <= MAX_MODULE_BYTES:  # larger: no attributes followed (a test suite, say)
            with open(path, "rb") as handle:
                tree = outline.parse(handle.read().decode("utf-8-sig"), methods=False)  # the classes, whole
    except (OSError, UnicodeDecodeError):
        tree = None

    def project_class(name: Optional[str]) -> Optional[str]:
        if name is None:
            return None
        return _qualified(info, name) or (f"{info.name}.{name}" if name in info.classes and info.name else None)

    for node in tree.body if tree is not None else ():
        if not isinstance(node, ast.ClassDef):
            continue
        built_by = _methods_building(node)
        seen: Dict[str, Optional[str]] = {}
        for item in ast.walk(node):
            if not isinstance(item, ast.Assign):
                continue
            for target in item.targets:
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
                    continue
                value = item.value
                qualified = None
                if isinstance(value, ast.Call):
                    name = ast_dotted_name(value.func)
                    if name is not None and name.startswith("self.") and name.count(".") == 1:
                        # `self.optimizers = self.setup_optimizers()`: what that method of the class
                        # builds (its return annotation, or the one class it returns a new instance of)
                        name = built_by.get(name[len("self."):])
                    qualified = project_class(name)
                seen[target.attr] = qualified if target.attr not in seen or seen[target.attr] == qualified else None
        out[node.name] = {attr: q for attr, q in seen.items() if q is not None}
    return out


def _methods_building(node: ast.ClassDef) -> Dict[str, str]:
    """method -> the class name it returns an instance of, for the class's own methods: from the return
    annotation (`def setup_optimizers(self) -> Optimizers:`), else from every `return` building the same
    class (`return Optimizers(config, groups)`). Values followed through one method call (issue 26,
    principle 4)."""
    found: Dict[str, str] = {}
    for item in node.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        returns = item.returns
        if isinstance(returns, ast.Constant) and isinstance(returns.value, str):
            name = returns.value if returns.value.replace(".", "").replace("_", "").isalnum() else None
        else:
            name = ast_dotted_name(returns) if returns is not None else None
        if name is None:
            built = set()
            for inner in ast.walk(item):
                if isinstance(inner, ast.Return):
                    value = inner.value
                    built.add(ast_dotted_name(value.func) if isinstance(value, ast.Call) else None)
            name = built.pop() if len(built) == 1 else None
        if name is not None:
            found[item.name] = name
    return found
