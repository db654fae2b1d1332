"""The types a fix is made of: node replacements keyed by the original nodes, and the imports they need.

Rules build these (usually through `amp_lint.fixes.builder.FixBuilder`); `amp_lint.fixes.apply` applies them.
They sit below the rules so that the fixer never needs to know what a rule is.

A fix may change other files of the project with the checked one (issue 32: the GradScaler of a trainer
belongs beside the optimizer its caller creates, in the caller's file): each such file's new text is a
`FileEdit`, made on the text the analysis read. `with_file_edits(fix, edits)` attaches them; the engine
fix-checks every file's new text and writes the checked file and its `FileEdit`s all or none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import libcst as cst

from amp_lint.diagnostics import Applicability

Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]


@dataclass(frozen=True)
class Import:
    """An import a fix's new code needs: `import torch` (name=None) or `from module import name`."""

    module: str
    name: Optional[str] = None


@dataclass(eq=False)
class Fix:
    """A change to the syntax tree, made of node replacements keyed by the original nodes.

    Each replacement is a function from the (possibly already updated) node to its replacement: a node,
    `cst.RemoveFromParent()` or a `cst.FlattenSentinel` of several statements.
    """

    message: str
    applicability: Applicability
    replacements: Dict[cst.CSTNode, Callable[[cst.CSTNode], Replacement]] = field(default_factory=dict)
    imports: Tuple[Import, ...] = ()
    # Fixes with the same key are one fix shared by several findings (applied once).
    key: Optional[object] = None
    # For fixes made by `FixBuilder`: per target node, its `NodeEdits` (insertions, change, removal), which
    # let two fixes that insert next to the same node go in one pass, their equal insertions made once.
    edits: Optional[Dict[cst.CSTNode, Any]] = None

    # Other files of the project this fix changes with the checked one (`FileEdit`s, one per file).
    files: Tuple["FileEdit", ...] = ()

    def nodes(self) -> Sequence[cst.CSTNode]:
        return list(self.replacements)


@dataclass(frozen=True)
class FileEdit:
    """The change a fix makes to another file: its absolute `path`, the text the edit was made on (`before`,
    as the analysis read it from disk) and its new text (`after`)."""

    path: str
    before: str  # as `amp_lint.files.sources.read_source(path).text` gives it: the write checks it is still that
    after: str


def with_file_edits(fix: Fix, edits: Sequence[FileEdit]) -> Fix:
    """`fix`, which changes the checked file, also changing the files of `edits` (all of them or none)."""
    fix.files = tuple(fix.files) + tuple(e for e in edits if e.before != e.after)
    return fix
