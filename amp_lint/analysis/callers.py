"""Who calls a function of the checked file from other modules of its package: the files searched, and
what a cached result depends on through them (AMP013's scaler built in a function called once per epoch).

The search set depends only on where the file is (its top-level package and the modules beside it in
its source root), never on what the run was asked to check: a run on one file and a run on the whole
tree agree. The cross-file provider (`amp_lint.analysis.summaries.ProjectSummaries.callers_of`) reads
the callers; this module needs only `ast` and the file system, so that the result cache can ask it
(`caller_dependencies`) without loading LibCST.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from amp_lint.analysis.project import ast_dotted_name, source_root_of

# The files searched for callers (a byte search per file); a larger package is not searched at all (the
# same answer for every run: silent).
MAX_CALLER_SCAN_FILES = 600
# A module of the project that the cross-file analysis reads (a helper, a caller): most are a few kB; not a
# generated table or a test suite.
MAX_MODULE_BYTES = 120_000
_SKIPPED_FOLDERS = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})


# `caller_scan_files` per (source root, top-level package) while a run remembers them (`remembered_scans`):
# a run over a package asks once per file that names a GradScaler, and each answer walks the package.
_SCANS: Optional[Dict[Tuple[str, str], Optional[Tuple[str, ...]]]] = None


@contextlib.contextmanager
def remembered_scans() -> Iterator[None]:
    """Within this, each search set is computed once (a run: its files do not come or go meanwhile);
    outside it (the editor's long session), every question walks the folders again."""
    global _SCANS
    outer = _SCANS
    _SCANS = {} if outer is None else outer
    try:
        yield
    finally:
        _SCANS = outer


def caller_scan_files(root: Path, name: str) -> Optional[Tuple[str, ...]]:
    """The files searched for callers of a module `name` under the source root `root`: its top-level
    package (all of it) and the modules directly in the root; None when that is more than
    MAX_CALLER_SCAN_FILES (then no module is searched: the same answer for every run)."""
    top = name.split(".")[0] if name else ""
    if _SCANS is None:
        return _scan_files(root, top)
    key = (os.path.abspath(root), top)
    if key not in _SCANS:
        _SCANS[key] = _scan_files(root, top)
    return _SCANS[key]


def _scan_files(root: Path, top: str) -> Optional[Tuple[str, ...]]:
    files: List[str] = []
    try:
        for entry in sorted(os.listdir(root)):
            if entry.endswith(".py"):
                files.append(os.path.join(root, entry))
        package = os.path.join(root, top)
        if top and os.path.isfile(os.path.join(package, "__init__.py")):
            for folder, subfolders, names in os.walk(package):
                subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in _SKIPPED_FOLDERS)
                files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))
                if len(files) > MAX_CALLER_SCAN_FILES:
                    return None
    except OSError:
        return None
    if len(files) > MAX_CALLER_SCAN_FILES:
        return None
    return tuple(os.path.abspath(f) for f in files if os.path.isfile(f))


def _attribute_uses(attribute: str) -> "re.Pattern[bytes]":
    """`.<attribute>` (on any object) or `<attribute>` used as a name, with what follows it."""
    name = re.escape(attribute.encode("utf-8"))
    return re.compile(rb"(?P<dot>\.)?(?<![\w])" + name + rb"(?![\w])(?P<after>[^\n]{0,40})")


# What may follow a use of the scaler attribute without letting anything else reach the scaler: a method
# call or attribute on it (update aside), an assignment to it, a test of it.
_KEEPS = re.compile(rb"\s*(?:\.\s*(?!update\b)\w|=(?!=)|is\b|:|==|!=|and\b|or\b)")
_UPDATES = re.compile(rb"\s*\.\s*update\s*\(")


def attribute_kept(files: Iterable[str], attribute: str) -> Optional[bool]:
    """Do the project's files (the whole search set) only ever call methods on, assign or test the
    attribute `attribute`, never `update()` it, hand it on (an argument, an alias, a return value) or
    get it by name (`getattr(self, "scaler")`)? True: nothing the project can see updates that scaler;
    False: something may; None: a file could not be read. (Issue 26, principle 3: a scaler that nothing
    in the whole project updates after stepping it.)"""
    pattern = _attribute_uses(attribute)
    quoted = re.compile(rb"(?:getattr|attrgetter)\s*\([^)]*[\"']" + re.escape(attribute.encode("utf-8")) + rb"[\"']")
    needle = attribute.encode("utf-8")
    for path in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_MODULE_BYTES + 1)
        except OSError:
            return None
        if needle not in data:
            continue
        if len(data) > MAX_MODULE_BYTES or quoted.search(data):
            return False
        for found in pattern.finditer(data):
            start = found.start()
            line_start = data.rfind(b"\n", 0, start) + 1
            if data[line_start:start].lstrip().startswith((b"#", b"def ", b"class ")):
                continue  # a comment, or a function or class of that name (not the scaler)
            after = found.group("after")
            if _UPDATES.match(after):
                return False  # `x.scaler.update()`, or `scaler.update()` on a name that may alias it
            if found.group("dot") and not _KEEPS.match(after):
                return False  # `.scaler` handed on: an argument, an alias, a return value
    return True


def scaler_attributes(tree: ast.AST) -> List[str]:
    """The attributes a module builds a GradScaler into (`self.scaler = GradScaler(...)`) and steps it
    through (`self.scaler.step(opt)`): the names whose uses elsewhere in the project decide whether
    anything updates that scaler (AMP021)."""
    built, stepped = set(), set()
    # `scaler_type = GradScaler` (or `ShardedGradScaler`) then `self.scaler = scaler_type()`: a local alias
    aliases = {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and (ast_dotted_name(node.value) or "").endswith("GradScaler")
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def builds(call: ast.AST) -> bool:
        dotted = ast_dotted_name(call.func) if isinstance(call, ast.Call) else None
        return dotted is not None and (dotted.split(".")[-1].endswith("GradScaler") or dotted in aliases)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            holder = node.func.value
            if isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name) and holder.value.id == "self":
                stepped.add(holder.attr)
                if node.args:  # `self.scaler.step(opt)`, however it was bound: `scaler_reach` follows it
                    built.add(holder.attr)
        elif isinstance(node, ast.Assign):
            targets = [t.attr for t in node.targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"]
            if targets and any(builds(n) for n in ast.walk(node.value)):
                built.update(targets)
    return sorted(built & stepped)


def caller_dependencies(path: Path, text: Optional[str] = None) -> List[Tuple[str, str]]:
    """What a file's result depends on through the callers of its functions (AMP013's per-epoch scaler):
    `(path, digest)` of every searched project file that names a function or method of this file that
    builds a GradScaler and has a loop, sorted. A result cache must add these to the file's key (besides
    `ProjectIndex.dependencies`, the modules it imports): an epoch loop added or removed in `main.py`
    changes the finding in `engine.py`. Empty for a file that never names a GradScaler."""
    from amp_lint.files import digests

    root, name = source_root_of(Path(path))
    files = caller_scan_files(root, name)
    if not files:
        return []  # nothing is searched for this file's callers (a package too large to search)
    try:
        if text is None:
            with open(path, "rb") as handle:
                text = handle.read(MAX_MODULE_BYTES + 1).decode("utf-8-sig", "replace")
        if "GradScaler" not in text:
            return []
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names = set()
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        for member in members:
            if not isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            inner = list(ast.walk(member))
            builds = any(
                isinstance(n, ast.Call) and (ast_dotted_name(n.func) or "").split(".")[-1] == "GradScaler" for n in inner
            )
            if builds and any(isinstance(n, (ast.For, ast.While, ast.AsyncFor)) for n in inner):
                names.add(member.name.encode("utf-8"))
    # AMP021: a scaler attribute stepped here and updated nowhere in the project (`attribute_kept`).
    names.update(attribute.encode("utf-8") for attribute in scaler_attributes(tree))
    if not names:
        return []
    own = os.path.abspath(path)
    found: List[Tuple[str, str]] = []
    for candidate in files:
        if candidate == own:
            continue
        try:
            with open(candidate, "rb") as handle:
                data = handle.read(MAX_MODULE_BYTES + 1)
        except OSError:
            continue
        if any(n in data for n in names):
            found.append((candidate, digests.sha256(data).hexdigest()))
    return sorted(found)
