"""The files of a package, read and parsed on demand (each at most once), and what a class name means in one
of its modules: a class is its module file and its name, resolved through the module's imports (issue 26,
principle 3: two classes of the same name in two modules are two classes). Only `ast` and the file system."""

from __future__ import annotations

import ast
import os
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

# A module read for this proof (accelerate's accelerator.py is 200 kB; larger files are generated tables).
MAX_REACH_MODULE_BYTES = 400_000
ClassId = Tuple[Optional[str], str]  # (the module file defining it, None: any module's; the class's name)


class PackageFiles:
    """The package's files, read and parsed on demand (each at most once)."""

    def __init__(self, files: Iterable[str], note_read: Optional[Callable[[str], None]] = None) -> None:
        self.files = tuple(files)
        self._note_read = note_read  # the result of the checked file depends on every file read here
        self._data: Dict[str, Optional[bytes]] = {}
        self._trees: Dict[str, Optional[Tuple[ast.AST, Dict[ast.AST, ast.AST]]]] = {}
        self._paths: Dict[int, str] = {}  # id of a parents map -> its file
        self._by_suffix: Optional[Dict[str, List[str]]] = None
        self._classes: Dict[Tuple[str, str], Optional[ClassId]] = {}

    def path_of(self, parents) -> Optional[str]:
        return self._paths.get(id(parents))

    def module_file(self, importer: str, module: Optional[str], level: int) -> Optional[str]:
        """The package file of the module `from <level dots><module> import ...` in `importer` names; None when
        it is not exactly one of the package's files."""
        parts = module.split(".") if module else []
        if level:
            base = os.path.dirname(os.path.abspath(importer))
            for _ in range(level - 1):
                base = os.path.dirname(base)
            stem = os.path.join(base, *parts)
            index = self._abs_files()
            candidates = [index[f][0] for f in (stem + ".py", os.path.join(stem, "__init__.py")) if f in index]
        else:
            if not parts:
                return None
            index = self._abs_files()
            candidates = index.get(os.path.join(*parts) + ".py", []) + index.get(os.path.join(*parts, "__init__.py"), [])
        return candidates[0] if len(candidates) == 1 else None

    def _abs_files(self) -> Dict[str, List[str]]:
        """Every package file under its absolute path, and under each of its path's tails (`a/b/c.py`,
        `b/c.py`, `c.py`) to find a module by its dotted name."""
        if self._by_suffix is None:
            self._by_suffix = {}
            for path in self.files:
                full = os.path.abspath(path)
                self._by_suffix[full] = [path]
                pieces = full.split(os.sep)
                for start in range(1, len(pieces)):
                    self._by_suffix.setdefault(os.path.join(*pieces[start:]), []).append(path)
        return self._by_suffix

    def data(self, path: str) -> Optional[bytes]:
        if path not in self._data:
            try:
                with open(path, "rb") as handle:
                    data = handle.read(MAX_REACH_MODULE_BYTES + 1)
            except OSError:
                data = None
            self._data[path] = data
            if self._note_read is not None:
                self._note_read(path)
        return self._data[path]

    def tree(self, path: str) -> Optional[Tuple[ast.AST, Dict[ast.AST, ast.AST]]]:
        if path not in self._trees:
            data = self.data(path)
            parsed = None
            if data is not None and len(data) <= MAX_REACH_MODULE_BYTES:
                try:
                    tree = ast.parse(data.decode("utf-8-sig", "replace"))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    tree = None
                if tree is not None:
                    parents: Dict[ast.AST, ast.AST] = {}
                    for node in ast.walk(tree):
                        for child in ast.iter_child_nodes(node):
                            parents[child] = node
                    parsed = (tree, parents)
                    self._paths[id(parents)] = path
            self._trees[path] = parsed
        return self._trees[path]

    def naming(self, name: str) -> Iterable[str]:
        needle = name.encode("utf-8")
        for path in self.files:
            data = self.data(path)
            if data is not None and needle in data:
                yield path

    def resolve_class(self, path: str, name: str, depth: int = 0) -> Optional[ClassId]:
        """The class `name` means at the top level of the module `path`: defined there, or imported from a
        package module (followed through re-exports); None when it does not resolve in the package."""
        key = (path, name)
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = None  # a cycle of imports resolves to nothing
        parsed = self.tree(path) if depth < 8 else None
        found: Optional[ClassId] = None
        for statement in _top_level_statements(parsed[0].body) if parsed is not None else ():
            if isinstance(statement, ast.ClassDef) and statement.name == name:
                found = (path, name)
            elif isinstance(statement, ast.ImportFrom):
                for alias in statement.names:
                    if (alias.asname or alias.name) == name:
                        target = self.module_file(path, statement.module, statement.level)
                        resolved = self.resolve_class(target, alias.name, depth + 1) if target else None
                        found = resolved or (None, alias.name)
            elif isinstance(statement, (ast.Assign, ast.Import)) and name in _bound_names(statement):
                found = (None, name)  # bound otherwise: unknown
        self._classes[key] = found
        return found




def member(identity: ClassId, classes: Set[ClassId]) -> bool:
    path, name = identity
    return any(n == name and (p is None or path is None or p == path) for p, n in classes)


def _top_level_statements(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    for statement in body:
        yield statement
        if isinstance(statement, ast.If):
            yield from _top_level_statements(statement.body + statement.orelse)
        elif isinstance(statement, ast.Try):
            yield from _top_level_statements(statement.body + statement.orelse + statement.finalbody)
            for handler in statement.handlers:
                yield from _top_level_statements(handler.body)


def _bound_names(statement: ast.stmt) -> Set[str]:
    if isinstance(statement, ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    return {n.id for t in getattr(statement, "targets", ()) for n in ast.walk(t) if isinstance(n, ast.Name)}
