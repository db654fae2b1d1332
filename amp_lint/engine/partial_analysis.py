"""A file checked with part of its analysis skipped is reported so (issue 45, items 7 and 8).

The order rules skip a training iteration too large to analyse in time (`analysis.iteration_limit`). The
file is still checked (every other rule, every other iteration), so this is a note, as a refused fix is
(`diagnostics.is_note`): one line per skipped iteration, `not fully analysed: ...`, at the loop (or the step
function), that does not fail the run (exit 0 on a file with no finding, as Ruff's warnings on a file it
checked). A fix is not kept when the code it makes is analysed less than the code before it (`fix_regression`):
its check would not have seen the iteration it changes.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.iteration_limit import skipped_description, skipped_steps
from amp_lint.diagnostics import PARTIAL_ANALYSIS, FileError, Location
from amp_lint.parse.positions import NodeLocator
from amp_lint.rules._helpers import OrderRule


def iteration_notes(model: FileModel, locator: NodeLocator, filename: str, rules: Sequence) -> List[FileError]:
    """A note per training iteration that the enabled order rules skipped (none when no order rule runs)."""
    if not any(isinstance(rule, OrderRule) for rule in rules):
        return []
    steps = skipped_steps(model)
    nodes = [step.loop if step.loop is not None else step.scope.node for step in steps]
    locator.want(id(node) for node in nodes)
    notes = []
    for step, node in zip(steps, nodes):
        code_range = locator.range_of(id(node))
        start = Location(code_range.start.line, code_range.start.column + 1) if code_range is not None else None
        notes.append(FileError(filename, f"{PARTIAL_ANALYSIS}: {skipped_description(step)}; the order rules skipped it", start))
    return notes


def fix_regression(before: FileModel, after: FileModel) -> Optional[str]:
    """Why a fix is refused when the fixed code has more iterations too large to analyse than the code before."""
    if len(skipped_steps(after)) > len(skipped_steps(before)):
        return "the fixed code has a training iteration too large to analyse"
    return None
