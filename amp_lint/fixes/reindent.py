"""Moving a statement into a new block (or out of one) keeps every physical line of it at the new depth.

LibCST writes a statement's first line and the lines of its nested blocks at the depth of the block that holds
it, and a line continued inside brackets relative to that depth (`ParenthesizedWhitespace.indent`). Two kinds of
continuation line carry their indentation as text instead: one after a backslash (`x = a + \\` then the next
line: the newline and the next line's spaces are a `SimpleWhitespace`) and a bracketed line that is not indented
past its block (`indent=False`). Moved one block deeper without a shift, a backslash continuation still parses
but reads as though it were a statement of the outer block (issue 44). `shifted` adds (or removes) one level of
indentation to those lines; the text of strings is left alone.
"""

from __future__ import annotations

from typing import TypeVar

import libcst as cst

Node = TypeVar("Node", bound=cst.CSTNode)


def shifted(node: Node, indent: str, deeper: bool = True) -> Node:
    """`node` with each of its continuation lines that carry their own indentation moved one level (`indent`)
    deeper (or, with `deeper=False`, shallower)."""
    return node.visit(_Shift(indent, deeper))  # type: ignore[return-value]


class _Shift(cst.CSTTransformer):
    def __init__(self, indent: str, deeper: bool) -> None:
        super().__init__()
        self.indent = indent
        self.deeper = deeper

    def _line(self, text: str) -> str:
        """The indentation of one continuation line, moved by one level."""
        if self.deeper:
            return self.indent + text
        return text[len(self.indent) :] if text.startswith(self.indent) else text.lstrip(" \t")

    def leave_SimpleWhitespace(
        self, original_node: cst.SimpleWhitespace, updated_node: cst.SimpleWhitespace
    ) -> cst.SimpleWhitespace:
        value = updated_node.value
        if "\\" not in value:
            return updated_node
        head, *lines = value.split("\n")  # `" \\"`, then each continued line's indentation
        if not lines:
            return updated_node
        return updated_node.with_changes(value="\n".join([head, *(self._line(line) for line in lines)]))

    def leave_ParenthesizedWhitespace(
        self, original_node: cst.ParenthesizedWhitespace, updated_node: cst.ParenthesizedWhitespace
    ) -> cst.ParenthesizedWhitespace:
        if updated_node.indent:
            return updated_node  # written relative to the block: it moves with it
        last = updated_node.last_line
        return updated_node.with_changes(last_line=last.with_changes(value=self._line(last.value)))
