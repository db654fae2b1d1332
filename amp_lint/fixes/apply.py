"""Apply fixes to a syntax tree.

Each pass takes the fixes whose target nodes do not overlap (no target is inside another fix's target),
applies them in one transformer walk, adds the imports the new code needs, and regenerates the code. The
engine re-parses the result, re-analyses it and runs another pass until nothing is left to fix.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import libcst as cst

from amp_lint.fixes.builder import (
    clear_removal_marks,
    inserted_by,
    insertions_next_to,
    is_marked_removed,
    mark_removed,
    node_replacement,
    statement_code,
)
from amp_lint.analysis.walk import children_through, code_fields
from amp_lint.fixes.types import Fix, Import


def select_compatible(fixes: Sequence[Fix], module: cst.Module, ancestry: Optional[Ancestry] = None) -> List[Fix]:
    """The fixes of this pass: first come, first served; an overlapping fix waits for the next pass.

    Two fixes that only insert statements next to the same node do not overlap: they go in one pass, and
    a statement both insert there is inserted once (`builder.node_replacement`).
    """
    if ancestry is None:
        ancestry = ancestry_of(module, fixes)
    claimed: Set[int] = set()  # ids of target nodes and of all their ancestors
    targets: Set[int] = set()
    insert_only: Set[int] = set()  # targets where every chosen fix only inserts statements
    chosen: List[Fix] = []
    seen_keys: Set[object] = set()
    for fix in fixes:
        if fix.key is not None:
            if fix.key in seen_keys:
                continue
        nodes = list(fix.replacements)
        lineage = set()
        for node in nodes:
            lineage |= ancestry.get(id(node), set())
        own = {id(n) for n in nodes}
        shared = {id(n) for n in nodes if id(n) in insert_only and _inserts_only(fix, n)}
        if (own - shared) & claimed or lineage & targets:
            continue
        claimed |= own | lineage
        targets |= own
        insert_only |= {id(node) for node in nodes if _inserts_only(fix, node)}  # a shared node is one of them
        chosen.append(fix)
        if fix.key is not None:
            seen_keys.add(fix.key)
    return chosen


def _inserts_only(fix: Fix, node: cst.CSTNode) -> bool:
    return fix.edits is not None and node in fix.edits and fix.edits[node].inserts_only


def apply_fixes(module: cst.Module, fixes: Iterable[Fix], ancestry: Optional[Ancestry] = None) -> cst.Module:
    """`module` with `fixes` applied; `ancestry` (from `ancestry_of`) saves a walk when several calls share it."""
    replacements = {}
    shared_edits: Dict[cst.CSTNode, List[object]] = {}
    imports: List[Import] = []
    for fix in fixes:
        for node, change in fix.replacements.items():
            if node in replacements and fix.edits is not None and node in fix.edits and node in shared_edits:
                shared_edits[node].append(fix.edits[node])
                replacements[node] = node_replacement(shared_edits[node])
                continue
            replacements[node] = change
            shared_edits.pop(node, None)
            if fix.edits is not None and node in fix.edits:
                shared_edits[node] = [fix.edits[node]]
        imports.extend(fix.imports)
    if ancestry is None or any(id(node) not in ancestry for node in replacements):
        ancestry = _ancestry(module, set(replacements))
    above_targets = set().union(*(ancestry.get(id(node), ()) for node in replacements))
    clear_removal_marks()
    try:
        updated = module.visit(_Applier(replacements, above_targets))
    finally:
        clear_removal_marks()
    return add_imports(updated, imports)


class _Applier(cst.CSTTransformer):
    """Rebuilds the nodes on the paths down to the targets; every other subtree is kept as it is.

    (A transformer that visits every node costs a second or more on a 500 kB file, for fixes that
    touch a few lines.)
    """

    def __init__(self, replacements, above_targets: Set[int]) -> None:
        super().__init__()
        self.replacements = replacements
        self.above_targets = above_targets

    def on_visit(self, node) -> bool:
        return id(node) in self.above_targets

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        if isinstance(result, (cst.IndentedBlock, cst.Module)):
            result = _drop_repeated_insertions(_drop_removed_statements(result))
        elif isinstance(result, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            result = _drop_removed_small_statements(result)
        change = self.replacements.get(original_node)
        if change is not None:
            result = change(result)
        return result


def _drop_removed_statements(block):
    """Remove marked statements; their comment lines move to the next statement (or the block's end)."""
    body = list(block.body)
    if not any(is_marked_removed(statement) for statement in body):
        return block
    kept = []
    carried: Tuple[cst.EmptyLine, ...] = ()
    for statement in body:
        if is_marked_removed(statement):
            if any(line.comment is not None for line in statement.leading_lines):
                carried += tuple(statement.leading_lines)
            continue
        if carried:
            statement = statement.with_changes(leading_lines=carried + tuple(statement.leading_lines))
            carried = ()
        kept.append(statement)
    changes = {"body": kept}
    if carried:
        if isinstance(block, cst.Module):
            changes["footer"] = carried + tuple(block.footer)
        else:
            changes["footer"] = tuple(line.with_changes(indent=True) for line in carried) + tuple(block.footer)
    if not kept and isinstance(block, cst.IndentedBlock):
        changes["body"] = [cst.SimpleStatementLine(body=[cst.Pass()])]
    return block.with_changes(**changes)


def _drop_repeated_insertions(block):
    """One insertion where several fixes want the same statement at one point of a block.

    Two cases: the same gap between the file's statements ("after A" and "before B" when B follows A);
    and statements each wanting the same statement before them (two clips, each after an `unscale_`) or
    after them (two `scaler.step` calls, each before an `update()`) with nothing else between them: it
    goes before the first of them, or after the last.
    """
    body = list(block.body)
    drop: Set[int] = set()
    run: Dict[str, object] = {}  # the code of each statement inserted since the last of the file's own
    for index, statement in enumerate(body):
        inserted = inserted_by(statement)
        if inserted is None:
            run = {}
        elif run.setdefault(statement_code(statement), inserted[0]) is not inserted[0]:
            drop.add(index)
    for side, order in (("before", range(len(body))), ("after", range(len(body) - 1, -1, -1))):
        open_codes: Dict[str, object] = {}  # code -> the fix whose insertion of it stands for the others
        for index in order:
            if index in drop:
                continue
            statement = body[index]
            inserted = inserted_by(statement)
            if inserted is not None and inserted[1] == side:
                code = statement_code(statement)
                if code in open_codes and open_codes[code] is not inserted[0]:
                    drop.add(index)
                elif code not in open_codes:
                    open_codes = {c: o for c, o in open_codes.items() if c == code}
                    open_codes[code] = inserted[0]
                else:
                    open_codes = {code: open_codes[code]}
                continue
            wanted = {code for s, code in insertions_next_to(statement) if s == side}
            open_codes = {c: o for c, o in open_codes.items() if c in wanted}
    if not drop:
        return block
    return block.with_changes(body=[s for i, s in enumerate(body) if i not in drop])


def _drop_removed_small_statements(line):
    body = [small for small in line.body if not is_marked_removed(small)]
    if len(body) == len(line.body):
        return line
    if body:
        last = body[-1]
        if isinstance(last.semicolon, cst.Semicolon):
            body[-1] = last.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return line.with_changes(body=body)
    if isinstance(line, cst.SimpleStatementSuite):
        return line.with_changes(body=[cst.Pass()])
    return mark_removed(line)


def add_imports(module: cst.Module, imports: Iterable[Import]) -> cst.Module:
    """Add `import torch` (or `from m import n`) at module level when the new code needs a name not yet bound."""
    missing = []
    bound = _module_level_bindings(module)
    for request in imports:
        name = request.name or request.module.split(".")[0]
        if name in bound or request in missing:
            continue
        missing.append(request)
        bound.add(name)
    if not missing:
        return module
    statements = [
        cst.parse_statement(
            f"import {r.module}\n" if r.name is None else f"from {r.module} import {r.name}\n",
            config=module.config_for_parsing,
        )
        for r in missing
    ]
    body = list(module.body)
    position = _import_insertion_index(body)
    return module.with_changes(body=body[:position] + statements + body[position:])


def _module_level_bindings(module: cst.Module) -> Set[str]:
    bound = set()
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                            bound.add(alias.asname.name.value)
                        else:
                            bound.add(cst.Module([]).code_for_node(alias.name).split(".")[0])
                elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        name = alias.asname.name if alias.asname is not None else alias.name
                        if isinstance(name, cst.Name):
                            bound.add(name.value)
    return bound


def _import_insertion_index(body: List[cst.CSTNode]) -> int:
    """After the docstring, `from __future__` imports and the leading block of imports."""
    index = 0
    if body and _is_docstring(body[0]):
        index = 1
    last_import = None
    for position in range(index, len(body)):
        statement = body[position]
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
        ):
            last_import = position
        else:
            break
    return (last_import + 1) if last_import is not None else index


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


# For each fix target (by id), the ids of the nodes above it.
Ancestry = Dict[int, Set[int]]


def fix_targets_in(module: cst.Module, fix: Fix, parents: Optional[Mapping[int, cst.CSTNode]] = None) -> bool:
    """Does every node `fix` replaces lie in `module`? (A finding reached through a call into another module
    may carry a fix of the call site, in this file, or one whose nodes are the other module's.)"""
    targets = set(fix.replacements)
    return len(_ancestry(module, targets, parents)) == len({id(node) for node in targets})


def ancestry_of(module: cst.Module, fixes: Iterable[Fix], parents: Optional[Mapping[int, cst.CSTNode]] = None) -> Ancestry:
    """For each target of `fixes` (by id), the ids of the nodes above it. `parents` (the analysis
    model's `FileModel.parents`) answers for the targets the model's walk visited, without a walk."""
    return _ancestry(module, {node for fix in fixes for node in fix.replacements}, parents)


def _ancestry(module: cst.Module, targets: Set[cst.CSTNode], parents: Optional[Mapping[int, cst.CSTNode]] = None) -> Ancestry:
    """For each target (by id), the ids of the nodes above it; one walk, which stops at the last target.

    The walk follows the fields that hold code (`walk.code_fields`); a target found nowhere there (none
    is known) sends it through every field. Targets whose chain of `parents` leads up to `module` need
    no walk.
    """
    found: Ancestry = {}
    if parents:
        for node in targets:
            above = _chain_above(id(node), parents)
            if above is not None and id(module) in above:
                found[id(node)] = above
    missing = {id(node) for node in targets if id(node) not in found}
    if missing:
        walked = _ancestry_through(module, missing, code_fields)
        if len(walked) < len(missing):
            walked = _ancestry_through(module, missing, _all_fields)
        found.update(walked)
    return found


def _chain_above(key: int, parents: Mapping[int, cst.CSTNode]) -> Optional[Set[int]]:
    parent = parents.get(key)
    if parent is None:
        return None
    above = set()
    while parent is not None:
        above.add(id(parent))
        parent = parents.get(id(parent))
    return above


def _ancestry_through(module: cst.Module, wanted: Set[int], fields_of) -> Ancestry:
    found: Ancestry = {}
    if not wanted:
        return found
    path: List[int] = []  # ids of the nodes above the current one
    stack: List[Tuple[cst.CSTNode, int]] = [(module, 0)]
    while stack and len(found) < len(wanted):
        node, depth = stack.pop()
        del path[depth:]
        if id(node) in wanted:
            found[id(node)] = set(path)
        path.append(id(node))
        stack.extend((child, depth + 1) for child in reversed(children_through(node, fields_of)))
    return found


_ALL_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _all_fields(node_type: type) -> Tuple[str, ...]:
    names = _ALL_FIELDS.get(node_type)
    if names is None:
        names = _ALL_FIELDS[node_type] = tuple(field.name for field in dataclasses.fields(node_type))
    return names
