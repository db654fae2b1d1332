"""Where a finding's message points: the related places (in this file or, reached through a call, in another
module of the project), as text for the message and as locations for the report."""

from __future__ import annotations

import os
from typing import Tuple

import libcst as cst

from amp_lint.diagnostics import Location, RelatedLocation


def _related_text(related, range_of, foreign_place=None) -> str:
    """The " (label at line N; ...)" suffix of a message; `range_of(id(node))` gives a node's CodeRange,
    `foreign_place(node)` the (path, CodeRange) of a node of another module."""
    parts = []
    for label, node in dict.fromkeys(related):
        code_range = range_of(id(node))
        if code_range is None and foreign_place is not None:
            place = foreign_place(node)
            if place is not None:
                parts.append(f"{label} at `{_shown_path(place[0])}` line {place[1].start.line}")
                continue
        parts.append(f"{label} at line {code_range.start.line}" if code_range is not None else label)
    return " (" + "; ".join(dict.fromkeys(parts)) + ")"  # two events reached through one call: named once


def _related_locations(related, range_of, foreign_place=None) -> Tuple[RelatedLocation, ...]:
    """The related nodes that have a place in the file (or, with `filename`, in another module), 1-based,
    each (label, place) once."""
    located = []
    for label, node in dict.fromkeys(related):
        code_range = range_of(id(node))
        if code_range is None and foreign_place is not None:
            place = foreign_place(node)
            if place is not None:
                path, code_range = place
                start = Location(code_range.start.line, code_range.start.column + 1)
                end = Location(code_range.end.line, code_range.end.column + 1)
                located.append(RelatedLocation(label, start, end, filename=_shown_path(path)))
            continue
        if code_range is not None:
            start = Location(code_range.start.line, code_range.start.column + 1)
            located.append(RelatedLocation(label, start, Location(code_range.end.line, code_range.end.column + 1)))
    return tuple(dict.fromkeys(located))


def _shown_path(path: str) -> str:
    """A path as reports show it: relative to the working folder when it is below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _short_code(node: cst.CSTNode) -> str:
    text = " ".join(cst.Module([]).code_for_node(node).split())
    return text if len(text) <= 50 else text[:47] + "..."
