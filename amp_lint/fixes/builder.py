"""Building blocks for fixes: statement-level edits expressed as node replacements.

A rule describes its fix with a `FixBuilder` (insert a statement after another, remove one, replace an
expression); the builder turns that into a `Fix` whose replacements the fixer applies in one transformer
pass. New statements are parsed with the file's own configuration, so indentation and line endings
follow the file's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.diagnostics import Applicability
from amp_lint.fixes.types import Fix, Import, Replacement

# Statements that the fixer must drop while keeping their comment lines (see fixer._Applier), by id.
# LibCST nodes have slots, so they cannot carry a flag; the fixer clears this around each pass.
_REMOVED: Dict[int, cst.CSTNode] = {}


_QUOTE_OF_LAST_MODULE: List[Tuple[cst.Module, str]] = []


def remember_text(module: cst.Module, code: str, whole_text: Optional[str] = None) -> None:
    """Tell the builders the text of the module being analysed (the engine knows it; regenerating it
    from the tree costs a quarter of a second on a 500 kB file). `whole_text`: the file's text, when the
    module is parsed from part of it (`parse.relevant`): the fixes write the quote the whole file mostly
    uses, as a check of the whole text would. A module's text is told once (a tree does not change)."""
    if whole_text is None and _QUOTE_OF_LAST_MODULE and _QUOTE_OF_LAST_MODULE[0][0] is module:
        return
    text = code if whole_text is None else whole_text
    _QUOTE_OF_LAST_MODULE[:] = [(module, "'" if text.count("'") > text.count('"') else '"')]


def forget_text() -> None:
    """The module's analysis is over: do not keep its tree alive (it would stay in memory, and in the
    cyclic collector's young generation, until the next file)."""
    _QUOTE_OF_LAST_MODULE.clear()


def _quote_of(module: cst.Module) -> str:
    """The quote the module mostly uses; remembered for the last module."""
    if not _QUOTE_OF_LAST_MODULE or _QUOTE_OF_LAST_MODULE[0][0] is not module:
        remember_text(module, module.code)
    return _QUOTE_OF_LAST_MODULE[0][1]


@dataclass
class NodeEdits:
    """What one fix does at one node: statements inserted before and after it, a change, a removal."""

    before: List[cst.BaseStatement] = field(default_factory=list)
    after: List[cst.BaseStatement] = field(default_factory=list)
    replace: Optional[Callable[[cst.CSTNode], cst.CSTNode]] = None
    remove: bool = False
    owner: Optional[object] = None  # the same object for all the edits of one fix

    @property
    def inserts_only(self) -> bool:
        return self.replace is None and not self.remove


class FixBuilder:
    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._edits: Dict[cst.CSTNode, NodeEdits] = {}
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
    def _at(self, node: cst.CSTNode) -> NodeEdits:
        if node not in self._edits:
            self._edits[node] = NodeEdits()
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
        owner = object()  # which fix a statement comes from: two fixes' equal insertions are made once
        for edits in self._edits.values():
            edits.owner = owner
        replacements = {node: node_replacement([self._edits[node]]) for node in self._order}
        edits = {node: self._edits[node] for node in self._order}
        return Fix(message, applicability, replacements, tuple(self.imports), key, edits)


def node_replacement(all_edits: Sequence[NodeEdits]) -> Callable[[cst.CSTNode], Replacement]:
    """The replacement that makes the edits of one or more fixes at one node. A statement that several
    fixes insert at the node (the same code on the same side) is inserted once."""

    def apply(node: cst.CSTNode) -> Replacement:
        for edits in all_edits:
            if edits.replace is not None:
                node = edits.replace(node)
        before = _once([(s, edits.owner) for edits in all_edits for s in edits.before])
        after = _once([(s, edits.owner) for edits in all_edits for s in edits.after])
        remove = any(edits.remove for edits in all_edits)
        if not before and not after:
            return mark_removed(node) if remove else node
        if not isinstance(node, cst.BaseStatement):
            raise TypeError("statements can only be inserted next to statements")
        if before and node.leading_lines:
            # Comments above the statement stay above the first inserted one.
            statement, owner = before[0]
            before[0] = (statement.with_changes(leading_lines=tuple(node.leading_lines) + tuple(statement.leading_lines)), owner)
            node = node.with_changes(leading_lines=())
        for side, statements in (("before", before), ("after", after)):
            for statement, owner in statements:
                _INSERTED_BY[id(statement)] = (statement, (owner, side))
        if not remove:
            wanted = {("before", statement_code(s)) for s, _ in before} | {("after", statement_code(s)) for s, _ in after}
            _ANCHORS[id(node)] = (node, frozenset(wanted))
        middle = [mark_removed(node)] if remove else [node]
        return cst.FlattenSentinel([*(s for s, _ in before), *middle, *(s for s, _ in after)])

    return apply


def _once(statements: List[Tuple[cst.BaseStatement, object]]) -> List[Tuple[cst.BaseStatement, object]]:
    """The statements minus those that repeat the code of one another fix inserts there."""
    kept = []
    first_owner: Dict[str, object] = {}
    for statement, owner in statements:
        code = statement_code(statement)
        if first_owner.setdefault(code, owner) is not owner:
            continue
        kept.append((statement, owner))
    return kept


# The statements the fixes of the pass being applied insert, by id: (the statement, the fix's owner tag).
# LibCST nodes have slots, so they cannot carry it themselves; the fixer clears this around each pass.
_INSERTED_BY: Dict[int, Tuple[cst.CSTNode, object]] = {}


# The statements that fixes insert next to in this pass, by id: (the statement, {(side, code)}).
_ANCHORS: Dict[int, Tuple[cst.CSTNode, FrozenSet[Tuple[str, str]]]] = {}


def inserted_by(statement: cst.CSTNode) -> Optional[Tuple[object, str]]:
    """(the owner tag of the fix that inserted `statement` in this pass, "before" or "after"); None for
    the file's own statements."""
    entry = _INSERTED_BY.get(id(statement))
    return entry[1] if entry is not None and entry[0] is statement else None


def insertions_next_to(statement: cst.CSTNode) -> FrozenSet[Tuple[str, str]]:
    """The (side, code) of the statements that this pass's fixes insert next to `statement`."""
    entry = _ANCHORS.get(id(statement))
    return entry[1] if entry is not None and entry[0] is statement else frozenset()


def statement_code(statement: cst.CSTNode) -> str:
    """A statement's code without its comment lines and indentation: what two insertions are compared by."""
    if isinstance(statement, cst.BaseStatement) and hasattr(statement, "leading_lines"):
        statement = statement.with_changes(leading_lines=())
    return cst.Module([]).code_for_node(statement).strip()


def mark_removed(node: cst.CSTNode) -> cst.CSTNode:
    """Tag a statement for removal; the fixer drops it and moves its comment lines to the next one."""
    _REMOVED[id(node)] = node
    return node


def is_marked_removed(node: cst.CSTNode) -> bool:
    return _REMOVED.get(id(node)) is node


def clear_removal_marks() -> None:
    _REMOVED.clear()
    _INSERTED_BY.clear()
    _ANCHORS.clear()


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
