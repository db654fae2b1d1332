"""What `engine.units` keeps of a check, and how it is moved to where the units are now.

A group's findings are found in the group's own text (its units' lines one after the other) and moved back to the
file's rows (`moved`). In the units' own mode (`OWN`), each unit of the core is checked with what it depends
on (its *own group*: the functions it calls, the `__init__` that sets what it reads, its class's header, the
module-level names and imports it uses), and only the findings *located in the unit* are its own. They are
kept under a key made of the unit's text hash and of the other members' *summaries* (`UnitFacts.summary`: what
a caller can learn of a callee), not their texts: an edit inside a callee that leaves its summary as it was
reuses the callers' findings, and checks the callee's own group alone (issue 31: "its callers' when its summary
changed"). A kept finding that names a row of another member (a related location, "at line N") is reused only
while that member's text is the same (`own_rows`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import Diagnostic, Location
from amp_lint.engine.runner import FileOutcome
from amp_lint.engine.unit_split import Unit, owners

FINE, COARSE, OWN = 0, 1, 2  # the groupings (`UnitChecker.groups`, `UnitChecker.own_groups`)

# A group's layout when it was checked: (unit text hash, its first row in the group text, 1-based; its lines).
Layout = Tuple[Tuple[str, int, int], ...]


def own_key(units: Sequence[Unit], root: int, group: Sequence[int]) -> str:
    """The key of a unit's own findings: its text, its place in the group, and the other members' summaries."""
    parts = [f"{root in group and group.index(root)}", units[root].digest]
    parts.extend(units[i].facts.summary if i != root else "" for i in group)
    return hashlib.blake2b("\0".join(parts).encode("ascii"), digest_size=20).hexdigest()


def layout_of(units: Sequence[Unit], group: Sequence[int]) -> Layout:
    found = []
    row = 1
    for index in group:
        length = units[index].last + 1 - units[index].first
        found.append((units[index].digest, row, length))
        row += length
    return tuple(found)


def located_in(outcome: FileOutcome, layout: Layout, position: int) -> List[Diagnostic]:
    """The findings of a group's check located in the lines of its `position`-th member."""
    _, first, length = layout[position]
    return [d for d in outcome.diagnostics if first <= d.location.row < first + length]


def own_rows(units: Sequence[Unit], group: Sequence[int], layout: Layout, root: int) -> List[Optional[int]]:
    """For each row of the group text as it was checked (`layout`), the file's row now: the root's lines and the
    lines of every member whose text is unchanged; None for a member whose text changed (a finding that names
    one of its rows is not reused)."""
    rows: List[Optional[int]] = []
    for index, (digest, _, length) in zip(group, layout):
        unit = units[index]
        if index == root or unit.digest == digest:
            rows.extend(range(unit.first + 1, unit.last + 2))
        else:
            rows.extend([None] * length)
    return rows


_AT_LINE = re.compile(r"\bat line (\d+)\b")


def moved(diagnostic: Diagnostic, rows: Sequence[Optional[int]]) -> Optional[Diagnostic]:
    """A group's finding at the file's rows (`rows[i]`: the file's row of the group text's row i + 1);
    None when it names a row outside the group's lines (then the groups are not used)."""
    def row(number: int) -> int:
        if not 1 <= number <= len(rows) or rows[number - 1] is None:
            raise LookupError(number)  # outside the group, or in a unit whose text changed since (`own_rows`)
        return rows[number - 1]

    def place(location: Location) -> Location:
        return Location(row(location.row), location.column)

    try:
        message = _AT_LINE.sub(lambda match: f"at line {row(int(match.group(1)))}", diagnostic.message)
        related = tuple(
            r if r.filename is not None else replace(r, location=place(r.location), end_location=place(r.end_location))
            for r in diagnostic.related
        )
        fix = diagnostic.fix
        if fix is not None and fix.edits:
            fix = replace(
                fix, edits=tuple(replace(e, location=place(e.location), end_location=place(e.end_location)) for e in fix.edits)
            )
        return replace(
            diagnostic,
            message=message,
            location=place(diagnostic.location),
            end_location=place(diagnostic.end_location),
            related=related,
            fix=fix,
        )
    except LookupError:
        return None


@dataclass
class Verification:
    """A document's pending comparison of its groups' findings with its whole core's (`UnitChecker.settle`)."""

    signature: tuple
    lines: List[str]
    units: List[Unit]
    groupings: List[List[List[int]]]  # the units' own groups, the fine groups, then (when they differ) the coarse ones
    kinds: List[int]  # OWN, FINE or COARSE, for each grouping
    display_name: str
    whole: FileOutcome
    level: int = 0  # the grouping being verified


def gap_comments(text: str, units: Sequence[Unit]) -> bool:
    """A `# noqa` or `amp-lint` comment on a line outside every unit (between functions): the groups
    leave such lines out, so the file is checked whole (AMP900 may report it)."""
    if "noqa" not in text and "amp-lint" not in text:
        return False
    lines = text.split("\n")
    covered = bytearray(len(lines))
    for unit in units:
        covered[unit.first : unit.last + 1] = b"\1" * (unit.last + 1 - unit.first)
    return any(not covered[i] and ("noqa" in line or "amp-lint" in line) for i, line in enumerate(lines))


def file_noqa(text: str) -> bool:
    from amp_lint.parse.noqa_comments import file_level_noqa

    return file_level_noqa(text) is not None


def seen(outcome: FileOutcome):
    """What a user sees of an outcome (the verification's comparison)."""
    return (outcome.diagnostics, [(e.message, e.location) for e in outcome.errors], outcome.unsafe_fixable)


def coarse_groups(units: Sequence[Unit], inside: Sequence[bool]) -> List[List[int]]:
    """The COARSE groups (`UnitChecker.groups`) of the core (`inside`)."""
    count = len(units)
    parent = list(range(count))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    members = [i for i in range(count) if inside[i] and not units[i].facts.only_imports]
    binders: Dict[str, List[int]] = {}
    for index in members:
        for name in units[index].facts.binds:
            binders.setdefault(name, []).append(index)
    for index in members:
        for word in units[index].facts.words:
            for other in binders.get(word, ()):
                if other != index:
                    parent[root(other)] = root(index)
    for index, header in enumerate(owners(units)):  # a class's members are in its header's group
        if header is not None and inside[index] and inside[header]:
            parent[root(index)] = root(header)
    by_root: Dict[int, List[int]] = {}
    for index in members:
        by_root.setdefault(root(index), []).append(index)
    imports = [i for i in range(count) if inside[i] and units[i].facts.only_imports]
    # Names a relevant import binds: a group that uses one is seen by the rules (see `core`).
    relevant_names = frozenset().union(*(units[i].facts.binds for i in imports if units[i].facts.relevant))
    groups = [
        group
        for group in by_root.values()
        if any(units[i].facts.relevant or not relevant_names.isdisjoint(units[i].facts.words) for i in group)
    ]
    attached = set()
    for group in groups:
        words = frozenset().union(*(units[i].facts.words for i in group))
        for index in imports:
            if not units[index].facts.binds.isdisjoint(words):
                group.append(index)
                attached.add(index)
    for index in imports:
        if units[index].facts.future:  # in every group, as at the top of the file
            for group in groups:
                if index not in group:
                    group.append(index)
                    attached.add(index)
    for index in imports:  # a relevant import nothing uses (`from torch.cuda.amp import autocast`)
        if index not in attached and units[index].facts.relevant:
            groups.append([index])
    for group in groups:
        group.sort()
    groups.sort(key=lambda group: group[0])
    return groups
