"""Building blocks for fixes: statement-level edits expressed as node replacements.

A rule describes its fix with a `FixBuilder` (insert a statement after another, remove one, replace an
expression); the builder turns that into a `Fix` whose replacements the fixer applies in one transformer
pass. New statements are parsed with the file's own configuration, so indentation and line endings
follow the file's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.diagnostics import Applicability
from amp_lint.fixes.types import Fix, Import, Replacement

# Statements that the fixer must drop while keeping their comment lines (see fixer._Applier), by id.
# LibCST nodes have slots, so they cannot carry a flag; the fixer clears this around each pass.
_REMOVED: Dict[int, cst.CSTNode] = {}


_QUOTE_OF_LAST_MODULE: List[Tuple[cst.Module, str]] = []


def remember_text(module: cst.Module, code: str) -> None:
    """Tell the builders the text of the module being analysed (the engine knows it; regenerating it
    from the tree costs a quarter of a second on a 500 kB file)."""
    _QUOTE_OF_LAST_MODULE[:] = [(module, "'" if code.count("'") > code.count('"') else '"')]


def _quote_of(module: cst.Module) -> str:
    """The quote the module mostly uses; remembered for the last module."""
    if not _QUOTE_OF_LAST_MODULE or _QUOTE_OF_LAST_MODULE[0][0] is not module:
        remember_text(module, module.code)
    return _QUOTE_OF_LAST_MODULE[0][1]


@dataclass
class _NodeEdits:
    before: List[cst.BaseStatement] = field(default_factory=list)
    after: List[cst.BaseStatement] = field(default_factory=list)
    replace: Optional[Callable[[cst.CSTNode], cst.CSTNode]] = None
    remove: bool = False


class FixBuilder:
    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._edits: Dict[cst.CSTNode, _NodeEdits] = {}
        self._order: List[cst.CSTNode] = []
        self.imports: List[Import] = []

    # --- new code ---
    def statement(self, code: str) -> cst.BaseStatement:
        """Parse one statement written in the file's own style (newline, indentation)."""
        return cst.parse_statement(code, config=self.module.config_for_parsing)

    def expression(self, code: str) -> cst.BaseExpression:
        return cst.parse_expression(code, config=self.module.config_for_parsing)

    def string(self, value: str) -> str:
        """A string literal quoted the way the file mostly quotes."""
        return f"{_quote_of(self.module)}{value}{_quote_of(self.module)}"

    # --- edits ---
    def _at(self, node: cst.CSTNode) -> _NodeEdits:
        if node not in self._edits:
            self._edits[node] = _NodeEdits()
            self._order.append(node)
        return self._edits[node]

    def insert_after(self, statement: cst.CSTNode, *new: cst.BaseStatement) -> None:
        self._at(statement).after.extend(new)

    def insert_before(self, statement: cst.CSTNode, *new: cst.BaseStatement) -> None:
        self._at(statement).before.extend(new)

    def replace(self, node: cst.CSTNode, change: Callable[[cst.CSTNode], cst.CSTNode]) -> None:
        edits = self._at(node)
        previous = edits.replace
        edits.replace = change if previous is None else (lambda n, p=previous, c=change: c(p(n)))

    def remove(self, statement: cst.CSTNode) -> None:
        self._at(statement).remove = True

    def need_import(self, module: str, name: Optional[str] = None) -> None:
        self.imports.append(Import(module, name))

    @property
    def is_empty(self) -> bool:
        return not self._edits

    def build(self, message: str, applicability: Applicability, key: Optional[object] = None) -> Fix:
        replacements = {node: self._replacement(self._edits[node]) for node in self._order}
        return Fix(message, applicability, replacements, tuple(self.imports), key)

    @staticmethod
    def _replacement(edits: _NodeEdits) -> Callable[[cst.CSTNode], Replacement]:
        def apply(node: cst.CSTNode) -> Replacement:
            if edits.replace is not None:
                node = edits.replace(node)
            if not edits.before and not edits.after:
                return mark_removed(node) if edits.remove else node
            if not isinstance(node, cst.BaseStatement):
                raise TypeError("statements can only be inserted next to statements")
            before = list(edits.before)
            if before and node.leading_lines:
                # Comments above the statement stay above the first inserted one.
                before[0] = before[0].with_changes(leading_lines=tuple(node.leading_lines) + tuple(before[0].leading_lines))
                node = node.with_changes(leading_lines=())
            middle = [mark_removed(node)] if edits.remove else [node]
            return cst.FlattenSentinel([*before, *middle, *edits.after])

        return apply


def mark_removed(node: cst.CSTNode) -> cst.CSTNode:
    """Tag a statement for removal; the fixer drops it and moves its comment lines to the next one."""
    _REMOVED[id(node)] = node
    return node


def is_marked_removed(node: cst.CSTNode) -> bool:
    return _REMOVED.get(id(node)) is node


def clear_removal_marks() -> None:
    _REMOVED.clear()


def removal_target(statement: cst.CSTNode, small: Optional[cst.BaseSmallStatement]) -> cst.CSTNode:
    """What to remove to delete one small statement: itself when it shares its line, else the whole line."""
    if small is not None and isinstance(statement, cst.SimpleStatementLine) and len(statement.body) > 1:
        return small
    return statement


def with_call_args(call: cst.Call, args: Sequence[cst.Arg]) -> cst.Call:
    """Replace a call's arguments, keeping a comma layout that LibCST renders cleanly."""
    fixed = []
    for index, arg in enumerate(args):
        last = index == len(args) - 1
        if last:
            fixed.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT) if isinstance(arg.comma, cst.Comma) and not _comma_has_newline(arg.comma) else arg)
        else:
            fixed.append(arg if isinstance(arg.comma, cst.Comma) else arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    return call.with_changes(args=tuple(fixed))


def _comma_has_newline(comma: cst.Comma) -> bool:
    return isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def split_args(call: cst.Call) -> Tuple[List[cst.Arg], List[cst.Arg], bool]:
    """(positional, keyword, has_star): the call's arguments by kind."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    keywords = [a for a in call.args if a.keyword is not None]
    has_star = any(a.star for a in call.args)
    return positional, keywords, has_star
