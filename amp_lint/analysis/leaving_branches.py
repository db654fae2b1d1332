"""Branches left by a jump (issue 46, skip branches): `if bad: zero_grad(); return` leaves the function, so
everything after that `if` in the function, past the blocks around it, runs only where the `if` went the
other way. The model builder keeps such a marker (`Branch(if, taken=False)`) on its branch stack until the
function ends, instead of until the end of the block that holds the `if`.
"""

from __future__ import annotations

from typing import List

import libcst as cst

from amp_lint.analysis.events import Branch

ANY_JUMP = (cst.Continue, cst.Break, cst.Return, cst.Raise)
LEAVES_FUNCTION = (cst.Return, cst.Raise)


def ends_with(body: cst.BaseSuite, jumps: tuple = ANY_JUMP) -> bool:
    """Does the block's last statement end with one of `jumps`?"""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return isinstance(last.body[-1], jumps)
    return False


def close_block(stack: List[Branch], depth: int, leaving: set) -> None:
    """Drop the branches a block added (from `depth` on), keeping the markers (ids in `leaving`) of an `if`
    that left the function: they hold for the rest of it."""
    kept = [branch for branch in stack[depth:] if id(branch) in leaving]
    del stack[depth:]
    stack.extend(kept)


def pop_branch(stack: List[Branch], node: cst.If, taken: bool) -> None:
    """Drop the `if`'s own branch (a kept marker from its block may sit above it)."""
    for at in range(len(stack) - 1, -1, -1):
        if stack[at].node is node and stack[at].taken is taken:
            del stack[at]
            return
