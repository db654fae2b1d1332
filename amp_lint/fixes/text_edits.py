"""The text edits of one fix (what JSON and SARIF output carry), without regenerating the whole file.

A fix rebuilds only the nodes on the paths down to its targets; every other node of the fixed tree is
the very object of the original tree. So the fixed text is the original text with a few statements'
lines replaced: the lowest statements that hold the changes. `EditsOfFixes` finds those statements,
regenerates them alone (with their blocks' indentation) and diffs each against the lines it replaces.
The statements' lines come from the engine's `NodeLocator`, which placed the findings. On torch's 462 kB `distributed_test.py` this takes milliseconds where
regenerating and diffing the file took 0.25 s per fix.

Anything it cannot place that way (new imports, a changed module header, a statement inserted or
removed at the top of a file) falls back to regenerating the whole fixed module.
"""

from __future__ import annotations

import difflib
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

from amp_lint.diagnostics import Edit, Location
from amp_lint.fixes.apply import ancestry_of, apply_fixes
from amp_lint.files.lines import lines_with_ends
from amp_lint.parse.positions import NodeLocator
from amp_lint.fixes.types import Fix

_STATEMENT = (cst.BaseCompoundStatement, cst.SimpleStatementLine)


class EditsOfFixes:
    """`edits(fix)`: the line edits that turn `code` (the text of `module`) into the text with `fix` applied.

    Made once for the fixes of one file: one walk finds where their targets sit and each fix is applied
    alone (`parents`, the analysis model's map of the tree, spares that walk). The lines of the
    statements they change are asked of `locator` (the one that placed the findings) when the first
    edits are wanted.
    """

    def __init__(
        self,
        module: cst.Module,
        code: str,
        fixes: Iterable[Fix],
        locator: Optional[NodeLocator] = None,
        parents: Optional[Mapping[int, cst.CSTNode]] = None,
    ) -> None:
        self.module = module
        self.code = code
        self.locator = locator if locator is not None else NodeLocator(module)
        unique = {id(fix): fix for fix in fixes}  # a fix shared by several findings: once
        ancestry = ancestry_of(module, unique.values(), parents)
        self._fixed = {key: apply_fixes(module, [fix], ancestry) for key, fix in unique.items()}
        # New imports change the module's top, which no statement holds: those fixes regenerate the file.
        self._changes = {
            key: None if fix.imports else _changed_statements(module.default_indent, module, self._fixed[key], [], None)
            for key, fix in unique.items()
        }
        self.locator.want(id(old) for found in self._changes.values() for old, _, _ in found or ())
        self._edits: Dict[int, Tuple[Edit, ...]] = {}
        self._lines: Optional[List[str]] = None

    def edits(self, fix: Fix) -> Tuple[Edit, ...]:
        key = id(fix)
        if key not in self._edits:
            changes = self._changes[key]
            found = self._statement_edits(changes) if changes else None
            self._edits[key] = found if found is not None else text_edits(self.code, self._fixed[key].code)
        return self._edits[key]

    def _statement_edits(self, changed: List["_Change"]) -> Optional[Tuple[Edit, ...]]:
        """The edits, made statement by statement from the original lines; None when that will not do."""
        if self._lines is None:
            self._lines = lines_with_ends(self.code)
        lines = self._lines
        pieces = []
        for old, new, indents in changed:
            span = self.locator.line_span_of(id(old))
            if span is None:
                return None
            first, end = span
            before = "".join(lines[first - 1 : end - 1])
            if before != _statement_code(self.module, old, indents):
                return None  # the statement does not sit on whole lines as expected: regenerate everything
            pieces.append((first, end, before, _statement_code(self.module, new, indents)))
        pieces.sort(key=lambda piece: piece[:2])
        edits: List[Edit] = []
        done = 1
        for first, end, before, after in pieces:
            if first < done:
                return None  # overlapping statements: cannot happen for disjoint subtrees, but never splice twice
            edits += [_shifted(edit, first - 1) for edit in text_edits(before, after)]
            done = end
        return tuple(edits)


def _shifted(edit: Edit, rows: int) -> Edit:
    return Edit(
        Location(edit.location.row + rows, edit.location.column),
        Location(edit.end_location.row + rows, edit.end_location.column),
        edit.content,
    )


_Change = Tuple[cst.CSTNode, cst.CSTNode, List[str]]  # old statement, new statement, its indentation


def _changed_statements(
    default_indent: str, old: cst.CSTNode, new: cst.CSTNode, indents: List[str], enclosing: Optional[_Change]
) -> Optional[List[_Change]]:
    """The lowest statements under which all the differences between `old` and `new` lie.

    None when a difference lies outside every statement (the module's header or footer, a statement
    added or removed at the top level).
    """
    if isinstance(old, _STATEMENT) and isinstance(new, _STATEMENT):
        enclosing = (old, new, indents)
    pairs = _differences(old, new)
    if pairs is None:
        return None if enclosing is None else [enclosing]
    if isinstance(old, cst.IndentedBlock):
        indents = indents + [old.indent if old.indent is not None else default_indent]
    changes: List[_Change] = []
    for before, after in pairs:
        found = _changed_statements(default_indent, before, after, indents, enclosing)
        if found is None:
            return None
        if enclosing is not None and any(change[0] is enclosing[0] for change in found):
            return [enclosing]  # one difference needs the whole enclosing statement: it covers the others
        changes += found
    return changes


def _differences(old: cst.CSTNode, new: cst.CSTNode) -> Optional[List[Tuple[cst.CSTNode, cst.CSTNode]]]:
    """The child pairs in which `old` and `new` differ; None when they differ otherwise (a list that grew
    or shrank, a changed name or value, another node type)."""
    if type(old) is not type(new):
        return None
    differing = []
    for name in old.__dataclass_fields__:
        before, after = getattr(old, name), getattr(new, name)
        if before is after:
            continue
        if isinstance(before, cst.CSTNode) and isinstance(after, cst.CSTNode):
            differing.append((before, after))
        elif isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) and len(before) == len(after):
            differing += [(b, a) for b, a in zip(before, after) if b is not a]
        else:
            return None
    return differing


def _statement_code(module: cst.Module, statement: cst.CSTNode, indents: List[str]) -> str:
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(indents)
    statement._codegen(state)
    return "".join(state.tokens)


def text_edits(old: str, new: str) -> Tuple[Edit, ...]:
    """Line-level edits that turn `old` into `new` (1-based; end exclusive)."""
    old_lines = lines_with_ends(old)
    new_lines = lines_with_ends(new)
    # A fix changes a few lines of a file: compare only what lies between the common head and tail.
    head, most = 0, min(len(old_lines), len(new_lines))
    while head < most and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < most - head and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    old_middle = old_lines[head : len(old_lines) - tail]
    new_middle = new_lines[head : len(new_lines) - tail]
    matcher = difflib.SequenceMatcher(a=old_middle, b=new_middle, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(Edit(Location(head + i1 + 1, 1), Location(head + i2 + 1, 1), "".join(new_middle[j1:j2])))
    return tuple(edits)


def merged_text(base: str, versions: Iterable[str]) -> Optional[str]:
    """One text with the changes that each of `versions` makes to `base`; None when two of them change the same
    lines differently (or insert different lines at one place): those fixes wait for the next run.

    Each version is a fix's new text of one other file, all made on the same `base` (the file as read): their
    line changes are combined when they touch different lines; a change two of them make alike is made once.
    """
    changes: List[Tuple[int, int, str]] = []  # (first line, line after the last, new text), 1-based
    for version in versions:
        for edit in text_edits(base, version):
            change = (edit.location.row, edit.end_location.row, edit.content)
            if change not in changes:
                changes.append(change)
    changes.sort(key=lambda change: (change[0], change[1]))
    for (first, end, _), (next_first, next_end, _) in zip(changes, changes[1:]):
        if next_first < end or (next_first == first and (first == end or next_first == next_end)):
            return None  # overlapping lines, or two insertions (or an insertion and a change) at one place
    lines = lines_with_ends(base)
    pieces: List[str] = []
    done = 1
    for first, end, content in changes:
        pieces.append("".join(lines[done - 1 : first - 1]))
        pieces.append(content)
        done = end
    pieces.append("".join(lines[done - 1 :]))
    return "".join(pieces)
