"""One module of the project read on the checked file's behalf: `ForeignModule`.

The project layer (`summaries.ProjectSummaries`, and its `caller_search.CallerSearch` part) parses a callee's
or a caller's module once per run and builds its model. A finding that rests on one of its nodes is placed
where that node really is (`range_of`), computed only when asked.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from amp_lint.analysis.file_model import FileModel


class ForeignModule:
    """One parsed project module: its LibCST module, model and (lazily) node positions."""

    def __init__(self, path: str, digest: str, module: cst.Module, code: str) -> None:
        self.path = path
        self.digest = digest
        self.module = module
        self.code = code
        self.model: Optional[FileModel] = None
        self._locator = None

    def range_of(self, node: cst.CSTNode):
        if self._locator is None:
            from amp_lint.parse.positions import NodeLocator  # positions cost a walk of the module: only when asked

            self._locator = NodeLocator(self.module, self.code)
        return self._locator.range_of(id(node))
