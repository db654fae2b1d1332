"""The project index: which modules the checked tree holds, what each defines at top level, what it imports.

A training step is often split over modules (the scaler built in one, stepped in another; clipping in a
callback). To follow calls there, the analysis of one file must find the project's own module a name comes
from. This index answers that cheaply:

- A file's module name comes from its folder: walk up while the folder is a package (has `__init__.py`); the
  first folder that is not is a *source root* (as mypy and Ruff find them). `src/` layouts need no setting.
- A module's facts (top-level functions and classes, class bases, imports) come from Python's own `ast`, about
  a tenth of a LibCST parse, and are kept per (path, size, mtime) for the run.
- `recording()` lists the project files a file's analysis consulted, with their digests: the result cache
  stores them with the file's result, so an edit in a helper module is a miss for exactly the files whose
  analysis read it (a file whose analysis followed no call depends on nothing else).

Only modules inside the source roots are resolved: `torch`, `numpy` and other installed packages are not
project code, and the analysis treats calls into them through its own tables.
"""

from __future__ import annotations

import ast
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple

from amp_lint.files import digests
from amp_lint.files.cache import DEPENDENCY_BYTES_LIMIT, dependency_digest
from amp_lint.parse import outline

_INSTALLATION_FOLDERS = frozenset({"site-packages", "dist-packages"})
# How large a module the index reads (a generated 50 MB module is not a training helper).
MAX_MODULE_BYTES = DEPENDENCY_BYTES_LIMIT


@dataclass(frozen=True)
class ModuleInfo:
    """What one module of the project defines and imports, read from its text."""

    name: str  # dotted module name ("pkg.train"); "" when the file is not importable by a plain name
    path: str
    digest: str  # sha256 of the bytes read
    is_package: bool = False  # an `__init__.py`
    functions: FrozenSet[str] = frozenset()  # top-level `def` / `async def`
    classes: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # class -> its bases as written (dotted)
    # Local name -> what it names: "pkg.mod" for a module, "pkg.mod.attr" for a name from a module.
    imports: Dict[str, str] = field(default_factory=dict)
    star_imports: Tuple[str, ...] = ()  # modules imported with `from m import *`
    # class -> name -> the return annotation (dotted, as written) of `@property def name(self) -> T`; "" for a
    # name the class binds otherwise (a method, a class attribute, a property without an annotation).
    members: Dict[str, Dict[str, str]] = field(default_factory=dict)

    def defines(self, name: str) -> bool:
        return name in self.functions or name in self.classes


def ast_dotted_name(node: ast.AST) -> Optional[str]:
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def qualified_in(info: ModuleInfo, dotted: str) -> Optional[str]:
    """`helpers.clip` with `from pkg import helpers` -> "pkg.helpers.clip"; None for names not imported."""
    head, dot, rest = dotted.partition(".")
    imported = info.imports.get(head)
    if imported is None:
        return None
    return imported + dot + rest if rest else imported


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _absolute(module: Optional[str], level: int, current: str, is_package: bool) -> Optional[str]:
    """`from ..a import b` in `pkg.sub.mod` -> "pkg.a"; None when the import climbs out of the package."""
    if level == 0:
        return module
    package = _package_of(current, is_package)
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or (level - 1 == len(parts) and not module):
        return None
    base = parts[: len(parts) - (level - 1)]
    if module:
        base.append(module)
    return ".".join(base) if base else None


def read_module_facts(text: str, name: str, path: str, digest: str, is_package: bool) -> ModuleInfo:
    """The top-level facts of a module's text; a module `ast` cannot read has none (never an error)."""
    # The checked file's tree is the prefilter's (`python_ast` keeps it); another module's facts are in its
    # outline (its function bodies hollowed), a fraction of its parse.
    tree = outline.parse(text)
    if tree is None:
        return ModuleInfo(name=name, path=path, digest=digest, is_package=is_package)
    functions = set()
    classes: Dict[str, Tuple[str, ...]] = {}
    members: Dict[str, Dict[str, str]] = {}
    imports: Dict[str, str] = {}
    stars: List[str] = []
    for statement in _top_level(tree.body):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(statement.name)
        elif isinstance(statement, ast.ClassDef):
            classes[statement.name] = tuple(filter(None, (ast_dotted_name(base) for base in statement.bases)))
            members[statement.name] = _class_members(statement)
        elif isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    imports[alias.asname] = alias.name
                else:  # `import a.b` binds `a`
                    head = alias.name.split(".")[0]
                    imports.setdefault(head, head)
        elif isinstance(statement, ast.ImportFrom):
            source = _absolute(statement.module, statement.level, name, is_package)
            if source is None:
                continue
            for alias in statement.names:
                if alias.name == "*":
                    stars.append(source)
                else:
                    imports[alias.asname or alias.name] = f"{source}.{alias.name}"
    return ModuleInfo(
        name=name,
        path=path,
        digest=digest,
        is_package=is_package,
        functions=frozenset(functions),
        classes=classes,
        imports=imports,
        star_imports=tuple(stars),
        members=members,
    )


def _class_members(node: ast.ClassDef) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            is_property = any(ast_dotted_name(d) == "property" for d in statement.decorator_list)
            returns = statement.returns
            if isinstance(returns, ast.Constant) and isinstance(returns.value, str):
                annotation = returns.value  # `-> "torch.device"`
            else:
                annotation = ast_dotted_name(returns) if returns is not None else None
            out.setdefault(statement.name, annotation if is_property and annotation else "")
            if not is_property or out[statement.name] != (annotation or ""):
                out[statement.name] = ""  # bound twice (a property's setter, an overload): not one declaration
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                if isinstance(target, ast.Name):
                    out[target.id] = ""
    return out


def _top_level(body: Sequence[ast.stmt]) -> Iterable[ast.stmt]:
    """Top-level statements, looking into `if`/`try` (TYPE_CHECKING guards, version shims) but not into defs."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If):
            yield from _top_level(statement.body)
            yield from _top_level(statement.orelse)
        elif isinstance(statement, ast.Try):
            yield from _top_level(statement.body)
            for handler in statement.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(statement.orelse)
            yield from _top_level(statement.finalbody)


def source_root_of(path: Path) -> Tuple[Path, str]:
    """The folder a file is imported from, and its dotted module name (`src/pkg/a/b.py` -> (`src`, "pkg.a.b"))."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.append(folder.name)
        folder = folder.parent
    return folder, ".".join(reversed(parts))


_CHECKED: List[Tuple["ProjectIndex", str]] = []  # (index, absolute path) of the files being checked, innermost last


def checked_file() -> Optional[Tuple["ProjectIndex", str]]:
    """The project index and the path of the file being checked (`ProjectIndex.checking_file`), or None (stdin,
    the API without a project)."""
    return _CHECKED[-1] if _CHECKED else None


class ProjectIndex:
    """The modules of the checked tree, found from the files being checked and the project's root.

    One instance per run (and per worker process); everything it reads is kept for the run.
    """

    def __init__(self, roots: Iterable[Path] = ()) -> None:
        self._roots: List[Path] = []
        for root in roots:
            self.add_root(root)
        self._by_path: Dict[str, Tuple[Tuple[int, int], Optional[ModuleInfo]]] = {}
        self._path_of_module: Dict[str, Optional[str]] = {}
        self._consulted: Optional[Dict[str, str]] = None
        # Installation folders among the roots -> the top-level packages checked there (the only project code).
        self._installed_packages: Dict[Path, set] = {}

    @contextlib.contextmanager
    def recording(self) -> Iterator[Dict[str, str]]:
        """Collect every module read while the block runs: {absolute path: digest} (the digest is
        `amp_lint.files.cache.dependency_digest`'s, "" for a module that could not be read)."""
        previous, self._consulted = self._consulted, {}
        try:
            yield self._consulted
        finally:
            self._consulted = previous

    def note_read(self, path: str) -> None:
        """Record a module read without its facts (a text test on it, say) while `recording`."""
        key = os.path.abspath(path)
        if self._consulted is not None and key not in self._consulted:
            self._consulted[key] = dependency_digest(key)

    @contextlib.contextmanager
    def checking_file(self, path: str) -> Iterator[None]:
        """While the block runs, `checked_file()` answers (this index, `path`): a query that needs the project
        for any file (the AMP100 conversion reading fp32 helper modules, which name no scaler) finds it there.
        Costs nothing until asked: the file is indexed (`add_file`) by whoever asks."""
        _CHECKED.append((self, os.path.abspath(path)))
        try:
            yield
        finally:
            _CHECKED.pop()

    @property
    def roots(self) -> Tuple[Path, ...]:
        return tuple(self._roots)

    def add_root(self, root: Path) -> None:
        root = Path(root).resolve()
        if root not in self._roots:
            self._roots.append(root)
            self._path_of_module = {}

    def add_file(self, path: Path) -> ModuleInfo:
        """Index a file being checked; its source root becomes a place to resolve imports from. From an
        installation folder (`site-packages`), only the file's own top-level package is the project:
        checking torch's package must not make numpy and every other installed package project code."""
        root, name = source_root_of(Path(path))
        if root.name in _INSTALLATION_FOLDERS:
            top = name.split(".")[0]
            if top and top not in self._installed_packages.setdefault(root, set()):
                self._installed_packages[root].add(top)
                self._path_of_module = {}
        self.add_root(root)
        info = self.module_at(Path(path))
        return info if info is not None else ModuleInfo(name="", path=str(path), digest="")

    # --- reading modules ---
    def module_at(self, path: Path) -> Optional[ModuleInfo]:
        """The facts of the module at `path` (None when it cannot be read as a regular, small file)."""
        key = os.path.abspath(path)
        try:
            stat = os.stat(key)
        except OSError:
            return None
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = self._by_path.get(key)
        if cached is not None and cached[0] == stamp:
            info = cached[1]
        else:
            info = self._read(Path(key), stat)
            self._by_path[key] = (stamp, info)
        if self._consulted is not None and key not in self._consulted:
            self._consulted[key] = info.digest if info is not None else dependency_digest(key)
        return info

    def _read(self, path: Path, stat: os.stat_result) -> Optional[ModuleInfo]:
        import stat as stat_module

        if not stat_module.S_ISREG(stat.st_mode) or stat.st_size > MAX_MODULE_BYTES:
            return None
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_MODULE_BYTES + 1)
        except OSError:
            return None
        digest = digests.sha256(data).hexdigest()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return ModuleInfo(name="", path=str(path), digest=digest)
        _, name = source_root_of(path)
        return read_module_facts(text, name, str(path), digest, path.name == "__init__.py")

    # --- resolving names ---
    def path_of_module(self, module: str) -> Optional[str]:
        """The project file that `import module` loads, searching the source roots in order."""
        if module in self._path_of_module:
            return self._path_of_module[module]
        found: Optional[str] = None
        relative = Path(*module.split("."))
        top = module.split(".")[0]
        for root in self._roots:
            if root.name in _INSTALLATION_FOLDERS and top not in self._installed_packages.get(root, ()):
                continue
            for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
                if candidate.is_file():
                    found = str(candidate)
                    break
            if found:
                break
        self._path_of_module[module] = found
        return found

    def declared_property(self, info: ModuleInfo, class_name: str, attr: str) -> Optional[str]:
        """The qualified return annotation of the `@property def attr(self) -> T` that `class_name` (a class of
        `info`) has or inherits from a project class (bases first to last, depth first: the MRO of a single
        chain); None when it is not declared so, is bound otherwise first, or a base cannot be read. A
        property with no setter is what every instance answers: `self.attr = ...` raises."""
        bound, annotation = self._member(info, class_name, attr, 0)
        return annotation if bound else None

    def _member(self, info: ModuleInfo, class_name: str, attr: str, depth: int) -> Tuple[bool, Optional[str]]:
        """(bound in the class or its bases, the qualified annotation when a declared property); an unreadable
        base answers (True, None): it may bind it."""
        if depth > 8 or class_name not in info.classes:
            return True, None
        members = info.members.get(class_name, {})
        if attr in members:
            annotation = members[attr]
            return True, (qualified_in(info, annotation) or annotation) if annotation else None
        for base in info.classes[class_name]:
            qualified = qualified_in(info, base) or (f"{info.name}.{base}" if info.name and base in info.classes else None)
            resolved = self.resolve(qualified) if qualified is not None else None
            if resolved is None:
                if base == "object" or (qualified or "").startswith(("torch.nn.", "typing.")):
                    continue  # binds no property of the project's
                return True, None  # an unknown base may bind it
            bound, annotation = self._member(resolved[0], resolved[1], attr, depth + 1)
            if bound:
                return True, annotation
        return False, None

    def resolve(self, qualified: str, _depth: int = 0) -> Optional[Tuple[ModuleInfo, str]]:
        """Where a qualified name is defined in the project: `pkg.train.make_scaler` -> (module of
        `pkg.train`, "make_scaler"), following re-exports (`from .impl import make_scaler` in a package's
        `__init__`) a few steps. None for names outside the project or not defined at top level."""
        if _depth > 4:
            return None
        module, _, attr = qualified.rpartition(".")
        while module:
            path = self.path_of_module(module)
            if path is not None:
                info = self.module_at(Path(path))
                if info is None:
                    return None
                if info.defines(attr):
                    return info, attr
                target = info.imports.get(attr)
                if target is not None and target != qualified:
                    return self.resolve(target, _depth + 1)
                for star in info.star_imports:
                    found = self.resolve(f"{star}.{attr}", _depth + 1)
                    if found is not None:
                        return found
                return None
            # `pkg.mod.Class.method`: the module is shorter than it looks
            module, _, head = module.rpartition(".")
            attr = f"{head}.{attr}"
            if "." in attr:
                return None  # attributes of classes are the analysis' business, not the index's
        return None
