"""A module's units, as `engine.units` checks them: top-level statements, and the members of a class.

A top-level function or statement is one unit (statements that share a line are one unit). A top-level class
whose body starts on a line of its own is split: its *header* (decorators and the `class ...:` line, up to the
first body statement) is one unit, and each statement of its body (a method with its decorators, a class-level
assignment, the docstring) is a *member* unit. Every unit has a text hash, and per hash what `ast` says of it
once (`UnitFacts`): the names it binds, the words it uses, whether it holds a name the rules look for.

A member belongs to the nearest header before it (`owners`): members follow their header, in file order. Each
unit's text parses on its own where it stands: a member's lines after its class's header, a header with any
member of its class after it. A class whose body shares the header's line is one unit, as is every class
inside a function or another statement.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Optional, Sequence, Tuple

from amp_lint.parse.python_ast import parse_quietly

WORD = re.compile(r"(?<!\w)[^\W\d]\w*")  # names and other words, not numbers (no unit binds a number)

TOP, HEADER, MEMBER = 0, 1, 2  # a unit's role
_WRAPPER = "class _:\n"  # a piece of a class body parses after it (one line more)


@dataclass(frozen=True)
class UnitFacts:
    """What one unit's text says, whatever its place in the file."""

    binds: FrozenSet[str]  # names it binds, at any depth (functions, classes, targets, imports, globals)
    words: FrozenSet[str]  # every word of its text (names, attributes, strings, comments)
    relevant: bool  # holds a name some rule's findings need, or a `# noqa` / `amp-lint` comment
    only_imports: bool  # import statements: users of what they bind do not join the core through them
    parse_refused: bool  # the parse guard refuses it (then the whole file is checked, for the same refusal)
    # The lines (as written) that hold such a name or comment: an edit that changes none of them cannot
    # change what the rules ask of the file as a whole (see `UnitChecker.check`).
    relevant_lines: Tuple[str, ...] = ()
    future: bool = False  # `from __future__ import ...`: it changes how every other unit is read
    # A member that defines its class rather than adds a method to it: a class-level statement (an
    # attribute, the docstring) or a special method (`__init__`, `__call__`, ...). A class's header is
    # checked with them (`UnitChecker.groups`).
    defines_class: bool = False
    # The names its code reads or writes (names, attributes, keywords, strings that are names: `getattr(x,
    # "step")`), without comments and docstrings: what the fine groups follow (`UnitChecker.groups`).
    uses: FrozenSet[str] = frozenset()
    # What a caller can learn of this unit (`summary_of`), hashed: an edit that leaves it as it was cannot change
    # a caller's findings (`engine.unit_results`).
    summary: str = ""
    # Of `uses`, what its code reads: an attribute only ever written here (`self.step = 0`) is left out. The
    # units' own groups follow these (`UnitChecker.own_groups`): a unit that sets `self.step` does not depend on
    # the other units that set it.
    reads: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class Unit:
    first: int  # 0-based index of its first line
    last: int  # 0-based index of its last line
    digest: str
    facts: UnitFacts
    role: int = TOP  # TOP, HEADER (a split class's header) or MEMBER (a statement of that class's body)

    def moved(self, shift: int) -> "Unit":
        return Unit(self.first + shift, self.last + shift, self.digest, self.facts, self.role)


FactsOf = Callable[[str, Sequence[ast.stmt], int, str], UnitFacts]  # (text, statements, role, digest)


def split_units(lines: Sequence[str], start: int, end: int, facts_of: FactsOf, members: bool = False) -> Optional[List[Unit]]:
    """The units of `lines[start:end]`, parsed on their own (a piece that starts and ends between statements
    parses as it does in the file); with `members`, the piece is part of a class body and every statement
    of it is a member. None when it does not parse (or, with `members`, is not all inside one class body)."""
    source = "\n".join(lines[start:end])
    offset = start
    if members:
        source = _WRAPPER + source
        offset -= 1
    tree = parse_quietly(source)
    if tree is None:
        return None
    body = tree.body
    if members:
        if len(body) != 1 or not isinstance(body[0], ast.ClassDef):
            return None  # the piece ends the class and goes on at the top level
        return _units_of(lines, body[0].body, offset, MEMBER, facts_of)
    units: List[Unit] = []
    pending: List[ast.stmt] = []  # top-level statements not yet turned into units (a split class ends them)
    for statement in body:
        if isinstance(statement, ast.ClassDef) and _splittable(statement, lines, offset):
            units.extend(_units_of(lines, pending, offset, TOP, facts_of))
            pending = []
            first = _first_line(statement) + offset
            body_first = _first_line(statement.body[0]) + offset
            header_text = "\n".join(lines[first:body_first])
            units.append(_unit(first, body_first - 1, header_text, [statement], HEADER, facts_of))
            units.extend(_units_of(lines, statement.body, offset, MEMBER, facts_of))
        else:
            pending.append(statement)
    units.extend(_units_of(lines, pending, offset, TOP, facts_of))
    return units


def _splittable(node: ast.ClassDef, lines: Sequence[str], offset: int) -> bool:
    """A class whose body starts a line of its own (`class A: x = 1` is one unit)."""
    if not node.body:
        return False
    first = node.body[0]
    decorators = getattr(first, "decorator_list", ())
    starter = min([first] + list(decorators), key=lambda n: (n.lineno, n.col_offset))
    if starter.lineno <= node.lineno:
        return False
    line = lines[starter.lineno - 1 + offset]
    indentation = len(line) - len(line.lstrip(" \t"))
    return starter.col_offset == indentation  # only indentation before it (ASCII: bytes are characters)


def _first_line(statement: ast.stmt) -> int:
    """0-based (in the parsed piece) first line of a statement with its decorators."""
    return min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", ())]) - 1


def _units_of(lines, statements, offset: int, role: int, facts_of: FactsOf) -> List[Unit]:
    spans: List[list] = []
    for statement in statements:
        first = _first_line(statement) + offset
        last = (statement.end_lineno or statement.lineno) - 1 + offset
        if spans and first <= spans[-1][1]:  # `a = 1; b = 2`, or a statement that starts where one ends
            spans[-1][1] = max(spans[-1][1], last)
            spans[-1][2].append(statement)
        else:
            spans.append([first, last, [statement]])
    return [_unit(first, last, "\n".join(lines[first : last + 1]), found, role, facts_of) for first, last, found in spans]


def _unit(first: int, last: int, text: str, statements, role: int, facts_of: FactsOf) -> Unit:
    digest = hashlib.blake2b(bytes((role,)) + text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return Unit(first, last, digest, facts_of(text, statements, role, digest), role)


def owners(units: Sequence[Unit]) -> List[Optional[int]]:
    """Each member's header (index), None for the others."""
    found: List[Optional[int]] = []
    header = None
    for index, unit in enumerate(units):
        if unit.role == HEADER:
            header = index
        elif unit.role == TOP:
            header = None
        found.append(header if unit.role == MEMBER else None)
    return found


def unit_facts(text: str, statements: Sequence[ast.stmt], role: int, any_pattern) -> UnitFacts:
    binds: set = set()
    if role == HEADER:
        binds.add(statements[0].name)  # the class's name; its body is its members'
    else:
        for statement in statements:
            _visible_bindings(statement, binds, in_function=False)
    relevant = any_pattern.search(text) is not None
    only_imports = role != HEADER and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in statements)
    relevant_lines: Tuple[str, ...] = ()
    if relevant:
        search = any_pattern.search
        relevant_lines = tuple(line for line in text.split("\n") if search(line) is not None)
    future = role == TOP and all(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in statements)
    defines_class = role == MEMBER and any(
        not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) or (s.name.startswith("__") and s.name.endswith("__"))
        for s in statements
    )
    uses: set = set()
    for statement in statements:
        if role == HEADER:  # the class's own line: decorators, bases, keywords (its body is its members')
            parts = list(statement.decorator_list) + list(statement.bases) + list(statement.keywords)
        else:
            parts = [statement]
        for part in parts:
            for node in ast.walk(part):
                if isinstance(node, ast.Name):
                    uses.add(node.id)
                elif isinstance(node, ast.Attribute):
                    uses.add(node.attr)
                elif isinstance(node, ast.keyword) and node.arg:
                    uses.add(node.arg)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    uses.add(node.value)
                elif isinstance(node, ast.alias):
                    uses.update(node.name.split("."))
    written: set = set()  # attributes written (assigned or deleted), not read, somewhere in it
    read: set = set()
    for statement in statements:
        for node in ast.walk(statement) if role != HEADER else ():
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
                read.add(node.target.attr)  # `self.step += 1` reads it too
            elif isinstance(node, ast.Attribute):
                (read if isinstance(node.ctx, ast.Load) else written).add(node.attr)
    write_only = written - read
    if write_only:  # unless the name is read otherwise (a name, a keyword, a string)
        for statement in statements:
            for node in ast.walk(statement) if role != HEADER else ():
                if isinstance(node, ast.Name) or (isinstance(node, ast.keyword) and node.arg):
                    write_only.discard(node.id if isinstance(node, ast.Name) else node.arg)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    write_only.discard(node.value)
                elif isinstance(node, ast.alias):
                    write_only.difference_update(node.name.split("."))
    # What the parse guard reads: the unit as it parses (a member inside a class, a header with a body).
    guarded = _WRAPPER + text if role == MEMBER else text + "\n pass" if role == HEADER else text
    return UnitFacts(
        frozenset(binds),
        frozenset(WORD.findall(text)),
        relevant,
        only_imports,
        _refused(guarded),
        relevant_lines,
        future,
        defines_class,
        frozenset(uses),
        summary_of(text, statements, role, any_pattern),
        frozenset(uses - write_only),
    )


# Simple statements whose whole text is in the summary: what leaves the function or changes its flow.
_FLOW = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom, ast.Delete, ast.Assert)


def summary_of(text: str, statements: Sequence[ast.stmt], role: int, any_pattern) -> str:
    """The hash of what a caller can learn of a unit: a class header's whole text; for a function or statement,
    its shape: every compound statement's head (`def` with its parameters and decorators, `if`/`for`/`while`/
    `with`/`try`/`match` and what they test or bind), in order and nesting; whole, every statement that holds a
    name the rules look for (a line `any_pattern` finds), that leaves or changes the flow (`return`, `raise`,
    `yield`, `await`, `break`, ...), or that writes anything but a local name (an attribute, a subscript, a
    global); and of every other simple statement, its kind, the names it writes and the names, attributes and
    strings it reads. Left out: numbers and the shape of expressions in statements that write local names
    only (`total += loss.item() * 2`), and docstrings."""
    if role == HEADER:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    relevant = {number for number, line in enumerate(text.split("\n"), 1) if any_pattern.search(line)}
    first = min([s.lineno for s in statements] + [d.lineno for s in statements for d in getattr(s, "decorator_list", ())])
    parts: List[str] = []

    def whole(node: ast.AST) -> str:
        return ast.dump(node, annotate_fields=False, include_attributes=False)

    def visit(body: Sequence[ast.stmt], depth: int, local: bool) -> None:
        # `local`: inside a function that declares no `global`/`nonlocal`, where a plain name is a local.
        for index, statement in enumerate(body):
            if (
                index == 0
                and isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ):
                continue  # a docstring
            inner = [field for field in ("body", "orelse", "finalbody", "handlers", "cases") if isinstance(getattr(statement, field, None), list)]
            if inner:
                head = {
                    name: value for name, value in ast.iter_fields(statement) if name not in inner and name != "type_comment"
                }
                parts.append(f"{depth}{type(statement).__name__}{[(k, whole(v) if isinstance(v, ast.AST) else [whole(x) if isinstance(x, ast.AST) else repr(x) for x in v] if isinstance(v, list) else repr(v)) for k, v in head.items()]}")
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner_local = not any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(statement))
                else:
                    inner_local = local and not isinstance(statement, ast.ClassDef)
                for field in inner:
                    children = getattr(statement, field)
                    parts.append(f"{depth}:{field}")
                    if field == "handlers":
                        for handler in children:
                            parts.append(f"{depth}except {whole(handler.type) if handler.type else ''} {handler.name}")
                            visit(handler.body, depth + 1, inner_local)
                    elif field == "cases":
                        for case in children:
                            parts.append(f"{depth}case {whole(case.pattern)} {whole(case.guard) if case.guard else ''}")
                            visit(case.body, depth + 1, inner_local)
                    else:
                        visit(children, depth + 1, inner_local)
                continue
            lines = range(statement.lineno - first + 1, (statement.end_lineno or statement.lineno) - first + 2)
            if not local or isinstance(statement, _FLOW) or any(n in relevant for n in lines) or _writes_beyond_locals(statement) or _leaves(statement):
                parts.append(f"{depth}{whole(statement)}")
                continue
            written, read = set(), set()
            for node in ast.walk(statement):
                if isinstance(node, ast.Name):
                    (read if isinstance(node.ctx, ast.Load) else written).add(node.id)
                elif isinstance(node, ast.Attribute):
                    read.add("." + node.attr)
                elif isinstance(node, ast.keyword) and node.arg:
                    read.add(node.arg + "=")
                elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                    read.add(repr(node.value))
            parts.append(f"{depth}{type(statement).__name__}{sorted(written)}{sorted(read)}")

    visit(list(statements), 0, False)
    return hashlib.blake2b("\n".join(parts).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _writes_beyond_locals(statement: ast.stmt) -> bool:
    """Does it write something other than a plain name (an attribute, a subscript, a starred target)?"""
    targets: list = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        targets = [statement.target]
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                return True
    return False


def _leaves(statement: ast.stmt) -> bool:
    """Does it hold a `yield`, an `await`, a lambda or a walrus (control leaves, or a value escapes, mid-statement)?"""
    return any(isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda, ast.NamedExpr)) for node in ast.walk(statement))


def _visible_bindings(node: ast.AST, binds: set, in_function: bool) -> None:
    """The names `node` binds that another unit can reach: module-level names (and names declared
    `global`), the names of functions and classes at any depth and attributes assigned anywhere (reached
    as `obj.name`), class-level names; not a function's local variables, which nothing outside it sees."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        binds.add(node.name)
        inner = in_function or not isinstance(node, ast.ClassDef)
        for child in ast.iter_child_nodes(node):
            _visible_bindings(child, binds, inner)
        return
    if isinstance(node, ast.Lambda):
        return  # its parameters are its own
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        if not in_function:
            binds.add(node.id)
    elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
        binds.add(node.attr)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        if not in_function:
            for alias in node.names:
                binds.add((alias.asname or alias.name).split(".")[0])
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        binds.update(node.names)
    elif hasattr(ast, "MatchAs") and isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name and not in_function:
        binds.add(node.name)
    for child in ast.iter_child_nodes(node):
        _visible_bindings(child, binds, in_function)


def _refused(unit_text: str) -> bool:
    """Would the parse guard refuse this statement? (Its limits are per statement and per expression: a
    file is refused when one of its statements is.)"""
    from amp_lint.parse.guard import check_parse_cost

    try:
        return check_parse_cost(unit_text, "unit.py") is not None
    except Exception:
        return True
