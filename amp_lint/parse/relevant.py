"""The text LibCST needs to parse for a check: a large module without the functions that cannot matter.

LibCST parses about eight times slower than `ast`, and most of a large module that passed the prefilter
is code the rules never look at (torch's 460 kB `distributed_test.py` holds its AMP code in a few of its
hundreds of test methods). The units are the functions and classes of the module body and, recursively,
of class bodies (methods are units). A unit is *relevant* when:

- its text holds one of the prefilter's gate words (`Prefilter.gate`: one of them is in every file that
  can hold a finding of the selected rules: `autocast`, `caler`, `custom_`, `apex`, ...), or
- it is linked to a relevant unit: it calls or names a relevant unit, or a relevant unit calls or names
  it (callers and callees, classes used as bases or values), or it reads or writes an attribute that a
  relevant unit writes, or writes one that a relevant unit reads (`self.scaler = ...` in `__init__`,
  `self.scaler.step(...)` in `train`).

Every other unit's lines become one string statement that spans them (`hollow.hollow`): the rows and columns
of everything kept are those of the whole text, and the module's import and binding statements (everything that is not a function or a
class) are always kept. A file's whole-file questions are not asked here: the checker parses the whole
text when a fix is to be written, when AMP900 (unused `# noqa`, a question about every comment) runs,
and below `MIN_CHARS`, where LibCST is fast enough.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

from amp_lint.files.lines import lines_with_ends
from amp_lint.parse.hollow import hollow

# Below this size the whole text is parsed: the saving would not pay for the relevance pass.
MIN_CHARS = 40_000

_UNIT_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
SUPPORT, CORE = 1, 2  # how a unit is relevant (0: not)


class _Unit:
    __slots__ = ("node", "first", "last", "name", "names", "stores", "loads", "children", "parent", "relevant")

    def __init__(self, node: ast.stmt, parent: "Optional[_Unit]") -> None:
        self.node = node
        self.first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        self.last = node.end_lineno or node.lineno
        self.name = node.name
        self.names: Set[str] = set()  # every name and attribute it mentions
        self.stores: Set[str] = set()  # attributes it writes (`x.attr = ...`)
        self.loads: Set[str] = set()  # attributes it reads
        self.children: List[_Unit] = []  # methods and nested classes (of a class)
        self.parent = parent
        self.relevant = 0


def relevant_text(text: str, tree: Optional[ast.Module], gate: Optional[Sequence[str]]) -> str:
    """`text` with the lines of its irrelevant units emptied (see the module's doc); `text` itself when
    it is small, has no `ast` tree, no gate words, or nothing to drop."""
    if tree is None or not gate or len(text) < MIN_CHARS:
        return text
    lines = lines_with_ends(text)
    units: List[_Unit] = []
    module = _Unit(ast.ClassDef(name="", bases=[], keywords=[], body=[], decorator_list=[], lineno=1, end_lineno=1), None)
    top = _collect(tree.body, module, units)
    if not units:
        return text
    try:
        return _kept_text(text, tree, gate, lines, units, top, module)
    finally:
        for unit in units:  # a unit and its children point at each other: unlinked, the units (and the
            unit.parent, unit.children = None, []  # `ast` tree they hold) go with refcounting, not the collector


def _kept_text(text: str, tree: ast.Module, gate: Sequence[str], lines: List[str], units: List[_Unit], top: List[_Unit], module: _Unit) -> str:
    for unit in top:
        unit.parent = None
    module.relevant = CORE  # the module's own statements (imports, bindings, `main()`) are always kept
    units.append(module)
    seed = re.compile("|".join(re.escape(word) for word in gate))
    # Names the module binds on a line with a gate word (`from apex import amp`, `ac = torch.autocast`):
    # a unit that uses one holds the gate word's meaning without its spelling.
    carriers = _carriers(tree.body, lines, seed)
    for unit in units:
        if unit is module:
            continue
        if not unit.children:  # a class's own text is its header and its body's non-unit statements
            found = seed.search("".join(lines[unit.first - 1 : unit.last])) is not None
        else:
            found = any(seed.search(line) for line in _own_lines(unit, lines))
        unit.relevant = CORE if found or not unit.names.isdisjoint(carriers) else 0
    _close(units)
    for unit in units:  # a relevant method keeps its class (and the classes around it)
        parent = unit.parent if unit.relevant else None
        while parent is not None:
            parent.relevant = max(parent.relevant, SUPPORT)
            parent = parent.parent
    dropped: List[Tuple[int, int]] = []
    _drop(top, dropped)
    if not dropped:
        return text
    hollow(lines, sorted(dropped))
    return "".join(lines)


def _carriers(body: List[ast.stmt], lines: List[str], seed: "re.Pattern[str]") -> Set[str]:
    """The names bound by the module's own statements (not its functions and classes) on lines that hold
    a gate word: imports, assignments, `for`/`with` targets (in `if` and `try` blocks too)."""
    names: Set[str] = set()
    pending = [s for s in body if not isinstance(s, _UNIT_TYPES)]
    while pending:
        statement = pending.pop()
        for field in ("body", "orelse", "finalbody", "handlers"):
            pending.extend(s for s in getattr(statement, field, ()) if not isinstance(s, _UNIT_TYPES))
        if not any(seed.search(line) for line in lines[statement.lineno - 1 : _header_end(statement)]):
            continue
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in statement.names)
        else:
            targets = getattr(statement, "targets", None) or [
                getattr(statement, "target", None),
                *(item.optional_vars for item in getattr(statement, "items", ())),
            ]
            for target in targets:
                if target is not None:
                    names.update(node.id for node in ast.walk(target) if type(node) is ast.Name)
    return names


def _header_end(statement: ast.stmt) -> int:
    """The last line of a statement before its block (a compound statement's header), or its last line."""
    body = getattr(statement, "body", None)
    if isinstance(body, list) and body:
        return body[0].lineno - 1 if body[0].lineno > statement.lineno else statement.lineno
    return statement.end_lineno or statement.lineno


def _collect(body: List[ast.stmt], parent: Optional[_Unit], units: List[_Unit]) -> List[_Unit]:
    found = []
    for statement in body:
        if not isinstance(statement, _UNIT_TYPES):
            if parent is not None:  # a class-level statement (`x = GradScaler()`): the class's own text
                _names_of(statement, parent)
            continue
        unit = _Unit(statement, parent)
        units.append(unit)
        found.append(unit)
        if isinstance(statement, ast.ClassDef):
            unit.children = _collect(statement.body, unit, units)
            for part in (*statement.bases, *statement.keywords, *statement.decorator_list):
                _names_of(part, unit)
        else:
            _names_of(statement, unit)
    return found


def _names_of(node: ast.AST, unit: _Unit) -> None:
    """The names `node` mentions, and the attributes of `self` it writes and reads. Inside a class defined
    in the unit (a test's local `class Net(nn.Module)`), `self` is that class's instance, not the unit's:
    its `self.fc1 = ...` is no state the unit shares with its class's other methods."""
    names, stores, loads = unit.names, unit.stores, unit.loads
    pending = [node]
    local_classes: List[ast.AST] = []  # the class bodies inside the unit, where `self` is another instance
    while pending:  # `ast.walk`, without its generator per node
        child = pending.pop()
        kind = type(child)
        if kind is ast.Name:
            names.add(child.id)
            continue
        if kind is ast.Attribute:
            names.add(child.attr)
            if type(child.value) is ast.Name and child.value.id == "self":  # state shared by the methods
                (stores if type(child.ctx) is not ast.Load else loads).add(child.attr)
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef or kind is ast.ClassDef:
            names.add(child.name)  # a nested function's name: calls to it are inside the unit
            if kind is ast.ClassDef and child is not node:
                local_classes.append(child)
                continue
        for field in _fields(kind):
            value = getattr(child, field, None)
            if type(value) is list:
                pending.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                pending.append(value)
    if local_classes:
        inner = _Unit.__new__(_Unit)
        inner.names, inner.stores, inner.loads = names, set(), set()
        for cls in local_classes:
            for field in _fields(ast.ClassDef):
                value = getattr(cls, field, None)
                for item in value if type(value) is list else [value]:
                    if isinstance(item, ast.AST):
                        _names_of(item, inner)


_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _fields(kind: type) -> Tuple[str, ...]:
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")
    return fields


def _own_lines(unit: _Unit, lines: List[str]) -> List[str]:
    """A class's lines outside its methods and nested classes."""
    own, row = [], unit.first
    for child in unit.children:  # in source order, each on its own lines
        own.extend(lines[row - 1 : child.first - 1])
        row = child.last + 1
    own.extend(lines[row - 1 : unit.last])
    return own


def _close(units: List[_Unit]) -> None:
    """Mark the units linked to relevant ones, until nothing changes.

    Two kinds: the *core* (the units with a gate word, the module's own statements, their callers, and
    the methods that read the state a core method writes) and the *support* (what the core calls or names,
    transitively, and the methods that write state it reads). A support unit's own callers are not
    pulled in: a helper that a training step calls is read for its summary, and the hundred other tests
    that call it are not.
    """
    family = _families(units)
    changed = True
    while changed:
        changed = False
        core = [unit for unit in units if unit.relevant == CORE]
        kept = [unit for unit in units if unit.relevant]
        core_names = {unit.name for unit in core}
        core_stores = _by_family(core, family, "stores")
        named = set().union(*(unit.names for unit in kept))
        loaded = _by_family(kept, family, "loads")
        shared_of: Dict[Optional[str], Set[str]] = {}
        read_of: Dict[Optional[str], Set[str]] = {}
        for unit in units:
            if unit.relevant == CORE:
                continue
            key = family[unit]
            if key not in shared_of:
                shared_of[key], read_of[key] = _state_of(core_stores, key), _state_of(loaded, key)
            shared, read = shared_of[key], read_of[key]
            if not unit.names.isdisjoint(core_names) or not unit.loads.isdisjoint(shared) or not unit.stores.isdisjoint(shared):
                unit.relevant = CORE  # it calls the core, or shares its state
                changed = True
            elif not unit.relevant and (unit.name in named or not unit.stores.isdisjoint(read)):
                unit.relevant = SUPPORT  # the core (or its support) calls or names it, or reads what it writes
                changed = True
                for method in unit.children:  # a class in use runs its special methods without naming them
                    if not method.relevant and method.name.startswith("__") and method.name.endswith("__"):
                        method.relevant = SUPPORT


def _drop(siblings: List[_Unit], dropped: List[Tuple[int, int]]) -> None:
    for unit in siblings:
        if not unit.relevant:
            dropped.append((unit.first, unit.last))
        elif unit.children:
            body = unit.node.body
            if all(isinstance(s, _UNIT_TYPES) for s in body) and not any(c.relevant for c in unit.children):
                unit.children[0].relevant = SUPPORT  # a class body cannot be empty: keep its first unit
            _drop(unit.children, dropped)


def _families(units: List[_Unit]) -> Dict[_Unit, Optional[str]]:
    """Per unit, the family of classes whose instances its `self` can be: the class it is a method of (or
    the class itself), joined with the classes of this file it derives from or that derive from it (by
    name). `self.x` state is shared within a family only, as the analysis reads it (`values`: the class,
    its bases and subclasses in the file). None for a function outside any class: shared with all."""
    classes = [unit for unit in units if isinstance(unit.node, ast.ClassDef) and unit.name]
    parent: Dict[str, str] = {unit.name: unit.name for unit in classes}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for unit in classes:
        for base in unit.node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            if name in parent:
                parent[root(name)] = root(unit.name)
    family: Dict[_Unit, Optional[str]] = {}
    for unit in units:
        owner = unit if isinstance(unit.node, ast.ClassDef) else unit.parent
        family[unit] = root(owner.name) if owner is not None and owner.name in parent else None
    return family


def _by_family(units: List[_Unit], family: Dict[_Unit, Optional[str]], kind: str) -> Dict[Optional[str], Set[str]]:
    found: Dict[Optional[str], Set[str]] = {}
    for unit in units:
        found.setdefault(family[unit], set()).update(getattr(unit, kind))
    return found


def _state_of(by_family: Dict[Optional[str], Set[str]], key: Optional[str]) -> Set[str]:
    """The `self` attributes a unit of family `key` can share: its family's and those of functions outside
    any class; a function outside any class shares with every family."""
    if key is None:
        return set().union(*by_family.values()) if by_family else set()
    return by_family.get(key, set()) | by_family.get(None, set())
