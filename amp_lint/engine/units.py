"""Units below the file: check again only what an edit can change, reuse the rest (the language server's engine).

A module is a sequence of units (`engine.unit_split`): each top-level function or statement, and for a class its
header and each of its members (a method with its decorators, a class-level statement). Each unit has a text
hash, and per hash what `ast` says of it once: the names it binds, the words it uses, whether it holds a name the
rules look for (`Rule.needs`, the prefilter's patterns) or a `# noqa` comment.

What the rules can see of a file is its *core*: the units that hold such a name, and, until nothing more is
added, every unit that binds a name the core uses (a called helper, a module-level binding, an import) or that
uses a name the core binds (a caller). A unit outside the core names nothing the rules look for and is not
reached from what they look at, so the findings are those of the core alone. The core is checked as a text of
the file's length with every other unit's lines left empty (rows and columns stay the file's), by the engine's
own `check_text`: the findings are the checker's, never re-derived.

That text is the key of the result. An edit outside the core that keeps the core's lines where they are (a
changed line in an unrelated function, a constant at the end) gives the same text: the result is reused without
running the checker. An edit inside the core checks the core again.

When unsure, the whole file is checked: a text `ast` cannot parse (the checker reports the syntax error), a
file-level `# amp-lint: noqa`, line breaks other than `\\n`, form feeds, or a file the parse guard refuses.
"""

from __future__ import annotations

import gc
import hashlib
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

from amp_lint.diagnostics import Applicability, Diagnostic
from amp_lint.engine.runner import CheckConfig, FileOutcome, check_text
from amp_lint.engine.unit_results import (
    COARSE,
    FINE,
    OWN,
    Verification,
    coarse_groups,
    file_noqa,
    gap_comments,
    layout_of,
    located_in,
    moved,
    own_key,
    own_rows,
    seen,
)
from amp_lint.engine.unit_signature import signature_lines
from amp_lint.engine.unit_split import HEADER, MEMBER, Unit, UnitFacts, owners, split_units, unit_facts

__all__ = ["UnitChecker", "Unit", "UnitFacts", "FINE", "COARSE", "OWN"]

# What the checker's own line splitting and LibCST's round trip treat specially: such files are checked whole.
# (Searched one by one: ten scans of a 100 kB text take a tenth of the time of one regex character class.)
_UNSURE_CHARACTERS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_UNIT_INFO_LIMIT = 20_000  # unit facts kept (per process), by unit text hash
# Facts of units no open document holds any more (an edit's superseded versions) kept for an undo; the rest are
# dropped (a long-lived server: 200 edits left 200 versions of the edited function's facts behind).
_SUPERSEDED_KEPT = 64
_RESULTS_PER_DOCUMENT = 4  # core results kept per document


def _needs_patterns(config: CheckConfig) -> Tuple["re.Pattern", ...]:
    from amp_lint import rules as registry

    patterns = {pattern for entry in registry.entries(config.enabled) for pattern in entry.needs}
    return tuple(re.compile(pattern) for pattern in sorted(patterns))


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class UnitChecker:
    """Checks documents unit by unit; one per configuration (the facts depend on the enabled rules)."""

    def __init__(self, config: CheckConfig, eager: bool = True) -> None:
        self.config = config
        self.eager = eager  # verify the groups at once (else: `settle`, step by step)
        self.pending: Dict[str, Verification] = {}
        self.patterns = _needs_patterns(config)
        # One search for any of them, or a `# noqa` / `amp-lint` comment.
        self.any_pattern = re.compile("|".join(["noqa", "amp-lint"] + [f"(?:{p.pattern})" for p in self.patterns]))
        self._groups_of: "OrderedDict[tuple, List[List[int]]]" = OrderedDict()  # unit facts, level -> groups
        self.facts: "OrderedDict[str, UnitFacts]" = OrderedDict()
        self.signatures: Dict[str, Tuple[str, ...]] = {}  # unit digest -> its lines in the signature (`check`)
        self.held: Dict[str, int] = {}  # unit digest -> how many open documents' current units have it
        self.superseded: "OrderedDict[str, None]" = OrderedDict()  # digests no document holds, newest last
        self.results: Dict[str, "OrderedDict[str, FileOutcome]"] = {}  # document -> core digest -> outcome
        self.stats = {"reused": 0, "core": 0, "whole": 0, "groups": 0, "verified": 0}
        self.group_results: Dict[str, "OrderedDict[str, FileOutcome]"] = {}  # document -> group text digest -> outcome
        # document -> `own_key` -> (the unit's own findings in its group's text, that text's layout)
        self.own_results: Dict[str, "OrderedDict[str, tuple]"] = {}
        self.previous: Dict[str, Tuple[List[str], List[Unit]]] = {}  # document -> its last lines and units
        # document -> (signature, the grouping whose union was the whole core's findings, or None) (`check`)
        self.verified: Dict[str, Tuple[tuple, Optional[int]]] = {}

    def forget(self, document: str) -> None:
        self.results.pop(document, None)
        self._hold(self.previous.pop(document, None), None)
        self.group_results.pop(document, None)
        self.own_results.pop(document, None)
        self.verified.pop(document, None)
        self.pending.pop(document, None)

    # --- units ---------------------------------------------------------------------------------------

    def units(self, text: str, document: Optional[str] = None) -> Optional[List[Unit]]:
        """The units of `text` (`engine.unit_split`), or None when it must be checked whole. With the
        `document`'s previous units known, only the lines an edit touched (and the unit on each side) are
        parsed again: inside a class body, as members of that class."""
        if any(character in text for character in _UNSURE_CHARACTERS):
            return None
        lines = text.split("\n")
        previous = self.previous.get(document) if document is not None else None
        units = self._units_after_edit(lines, previous) if previous is not None else None
        if units is None:
            units = split_units(lines, 0, len(lines), self._facts_of)
        if document is not None:
            if units is None:
                self._hold(self.previous.pop(document, None), None)
            else:
                self._hold(previous, units)
                self.previous[document] = (lines, units)
        return units

    def _hold(self, previous, units: Optional[List[Unit]]) -> None:
        """A document's units are now `units` (None: closed): the facts of the units it held before and no
        document holds now are superseded, and dropped once more than `_SUPERSEDED_KEPT` are."""
        old = previous[1] if previous is not None else ()
        if old is units:
            return
        for unit in units or ():
            self.held[unit.digest] = self.held.get(unit.digest, 0) + 1
            self.superseded.pop(unit.digest, None)
        for unit in old:
            count = self.held.get(unit.digest, 0) - 1
            if count > 0:
                self.held[unit.digest] = count
            else:
                self.held.pop(unit.digest, None)
                self.superseded[unit.digest] = None
        while len(self.superseded) > _SUPERSEDED_KEPT:
            digest, _ = self.superseded.popitem(last=False)
            self.facts.pop(digest, None)
            self.signatures.pop(digest, None)

    def _units_after_edit(self, lines: List[str], previous) -> Optional[List[Unit]]:
        old_lines, old_units = previous
        limit = min(len(lines), len(old_lines))
        same_head = 0
        while same_head < limit and lines[same_head] == old_lines[same_head]:
            same_head += 1
        same_tail = 0
        while same_tail < limit - same_head and lines[-1 - same_tail] == old_lines[-1 - same_tail]:
            same_tail += 1
        if same_head == len(lines) == len(old_lines):
            return old_units
        # Units wholly in the unchanged head or tail are kept, but for the one next to the edit on each side
        # (an edit can extend a function, or put a decorator on the next one).
        count = len(old_units)
        kept_head = max(sum(1 for u in old_units if u.last < same_head) - 1, 0)
        tail_start = len(old_lines) - same_tail
        after = [i for i, u in enumerate(old_units) if u.first >= tail_start]
        kept_tail = after[1] if len(after) > 1 else count  # the first unit kept after the edit
        shift = len(lines) - len(old_lines)
        old_owner = owners(old_units)
        if kept_head < count and old_units[kept_head].role == MEMBER and old_owner[kept_head] is not None:
            # The first unit parsed again is a member of a class whose header is kept: the piece is parsed
            # as that class's body, unless it closes the class or the kept units after it are another's.
            header = old_owner[kept_head]
            tail_ok = kept_tail == count or old_units[kept_tail].role != MEMBER or old_owner[kept_tail] == header
            if tail_ok:
                start = old_units[kept_head - 1].last + 1 if kept_head else 0
                end = old_units[kept_tail].first + shift if kept_tail < count else len(lines)
                middle = split_units(lines, start, end, self._facts_of, members=True)
                if middle is not None:
                    return old_units[:kept_head] + middle + [u.moved(shift) for u in old_units[kept_tail:]]
            kept_head = header  # parsed again from the class's header, at the top level
        while kept_tail < count and old_units[kept_tail].role == MEMBER:
            kept_tail += 1  # the members of a class whose header is parsed again
        start = old_units[kept_head - 1].last + 1 if kept_head else 0
        end = old_units[kept_tail].first + shift if kept_tail < count else len(lines)
        middle = split_units(lines, start, end, self._facts_of)
        if middle is None:
            return None
        return old_units[:kept_head] + middle + [u.moved(shift) for u in old_units[kept_tail:]]

    def _facts_of(self, text: str, statements, role: int, digest: str) -> UnitFacts:
        facts = self.facts.get(digest)
        if facts is None:
            facts = self.facts[digest] = unit_facts(text, statements, role, self.any_pattern)
            if len(self.facts) > _UNIT_INFO_LIMIT:
                self.signatures.pop(self.facts.popitem(last=False)[0], None)
        else:
            self.facts.move_to_end(digest)
        return facts

    def core(self, units: Sequence[Unit]) -> List[bool]:
        """Which units the rules can see: the relevant ones, and what binds a name they use or uses a name
        they bind (an import's users excepted), until nothing more joins. A class's header joins with any
        of its members, and brings the members that define the class (`UnitFacts.defines_class`), or its
        first member when it has none: a header is never left without a body."""
        inside = [unit.facts.relevant or unit.facts.future for unit in units]
        owner = owners(units)
        members: Dict[int, List[int]] = {}
        for index, header in enumerate(owner):
            if header is not None:
                members.setdefault(header, []).append(index)
        used: set = set()
        bound: set = set()

        def take(unit: Unit) -> None:
            used.update(unit.facts.words)
            # An import's users join only through a relevant import (`from torch.cuda.amp import autocast as
            # ac`: every `ac(...)` is a finding's place); `import torch` links nothing.
            if not unit.facts.only_imports or unit.facts.relevant:
                bound.update(name for name in unit.facts.binds if not _dunder(name))

        for unit, is_in in zip(units, inside):
            if is_in:
                take(unit)
        grown = True
        while grown:
            grown = False
            for index, unit in enumerate(units):
                if inside[index]:
                    continue
                facts = unit.facts
                join = any(name in used for name in facts.binds if not _dunder(name)) or not facts.words.isdisjoint(bound)
                if not join and unit.role == HEADER:
                    join = any(inside[m] for m in members.get(index, ()))
                elif not join and unit.role == MEMBER:
                    join = facts.defines_class and inside[owner[index]]
                if join:
                    inside[index] = True
                    take(unit)
                    grown = True
            if not grown:
                for header, its in members.items():
                    if inside[header] and not any(inside[m] for m in its):
                        inside[its[0]] = True
                        take(units[its[0]])
                        grown = True
        return inside

    # --- checking ------------------------------------------------------------------------------------

    def core_text(self, text: str, document: Optional[str] = None) -> Optional[str]:
        """`text` with the lines of every unit outside the core left empty; None: check it whole."""
        from amp_lint.parse.noqa_comments import file_level_noqa

        if file_level_noqa(text) is not None:
            return None
        units = self.units(text, document)
        if units is None or any(unit.facts.parse_refused for unit in units):
            return None
        return self._core_of(text, units)

    def groups(self, units: Sequence[Unit], level: int = FINE) -> List[List[int]]:
        """The core split into groups the rules can see apart; indices in file order, each group holding
        at least one relevant unit (units no group reaches are outside the core).

        FINE: each unit of the core with what it depends on, transitively: the units that bind a name its
        code uses (`UnitFacts.uses`: not a word of a comment or a docstring; a called function or method, the `__init__` that sets an attribute it reads, a module-level
        binding, an import), and its class's header with the members that define the class. A group that
        another holds is left out. An edit inside one method checks the groups that hold that method: its
        own, and its callers'.
        COARSE: two units are in one group when one binds a name the other uses, and a class's members are
        in its header's group; an import joins every group that uses what it binds without joining them
        together (`torch` links nothing). The fallback when the fine groups' findings are not the file's."""
        # What the groups depend on: each unit's names, words, kind and role, in order (an edit that changes a
        # number or a string inside a function leaves them as they were). Frozensets keep their hashes.
        key = (level,) + tuple(
            (u.facts.binds, u.facts.words, u.facts.uses, u.facts.relevant, u.facts.only_imports, u.facts.future, u.role)
            for u in units
        )
        known = self._groups_of.get(key)
        if known is None:
            known = self._groups_of[key] = self._fine(units) if level == FINE else coarse_groups(units, self.core(units))
            if len(self._groups_of) > 16:
                self._groups_of.popitem(last=False)
        else:
            self._groups_of.move_to_end(key)
        return [list(group) for group in known]

    def own_groups(self, units: Sequence[Unit]) -> List[Tuple[int, List[int]]]:
        """Each unit of the core with its *own group* (`OWN`): the unit and what it depends on, transitively,
        as for the fine groups (`groups`), none left out; (unit, group) in file order. The unit's own findings
        are those of its group's check located in its lines (`engine.unit_results`)."""
        key = (OWN,) + tuple(
            (u.facts.binds, u.facts.words, u.facts.reads, u.facts.relevant, u.facts.only_imports, u.facts.future, u.role) for u in units
        )
        known = self._groups_of.get(key)
        if known is None:
            known = self._groups_of[key] = self._fine(units, own=True)
            if len(self._groups_of) > 16:
                self._groups_of.popitem(last=False)
        else:
            self._groups_of.move_to_end(key)
        return [(root, list(group)) for root, group in known]

    def _fine(self, units: Sequence[Unit], own: bool = False):
        inside = self.core(units)
        owner = owners(units)
        core = [i for i in range(len(units)) if inside[i]]
        binders: Dict[str, List[int]] = {}
        defining: Dict[int, List[int]] = {}  # header -> the members that define its class
        first_member: Dict[int, int] = {}
        for index in core:
            for name in units[index].facts.binds:
                if not _dunder(name):
                    binders.setdefault(name, []).append(index)
            header = owner[index]
            if header is not None:
                first_member.setdefault(header, index)
                if units[index].facts.defines_class:
                    defining.setdefault(header, []).append(index)
        futures = [i for i in core if units[i].facts.future]

        def closure(root: int) -> frozenset:
            group = {root, *futures}
            stack = list(group)
            while True:
                while stack:
                    index = stack.pop()
                    unit = units[index]
                    reached = [b for name in (unit.facts.reads if own else unit.facts.uses) for b in binders.get(name, ())]
                    if unit.role == MEMBER and owner[index] is not None:
                        reached.append(owner[index])
                    elif unit.role == HEADER:
                        reached.extend(defining.get(index, ()))
                    for other in reached:
                        if other not in group:
                            group.add(other)
                            stack.append(other)
                # A header needs a member after it (one that defines the class was taken above).
                bare = [h for h in group if units[h].role == HEADER and not any(owner[i] == h for i in group)]
                if not bare:
                    return frozenset(group)
                for header in bare:
                    if header in first_member:
                        group.add(first_member[header])
                        stack.append(first_member[header])
                    else:  # cannot happen: the core gives every header of it a member
                        return frozenset(core)

        if own:
            return [(root, sorted(closure(root))) for root in core]
        roots = [i for i in core if not units[i].facts.only_imports]
        imports = [i for i in core if units[i].facts.only_imports]
        found = sorted({closure(root) for root in roots}, key=len, reverse=True)
        kept: List[frozenset] = []
        for group in found:
            if not any(group <= other for other in kept):
                kept.append(group)
        relevant_names = frozenset().union(*(units[i].facts.binds for i in imports if units[i].facts.relevant))
        groups = [
            sorted(group)
            for group in kept
            if any(units[i].facts.relevant or not relevant_names.isdisjoint(units[i].facts.words) for i in group)
        ]
        attached = {i for group in groups for i in group}
        for index in imports:  # a relevant import nothing uses (`from torch.cuda.amp import autocast`)
            if index not in attached and units[index].facts.relevant:
                groups.append(sorted({index, *futures}))
        groups.sort(key=lambda group: group[0])
        return groups

    def check(self, text: str, display_name: str, document: str) -> FileOutcome:
        """The engine's findings for `text` (identical to `check_text` of the whole text).

        The core is checked group by group (`groups`), each group's units alone, keyed by their hashes: an
        edit inside one method checks the groups that hold it again and reuses the others' results. That
        the union of the groups' findings is the whole core's is verified, against a check of the whole
        core, whenever the file's *signature* changes (the groups, and in each the lines that hold a name
        the rules look for): a rule may ask a question of the whole file ("a GradScaler anywhere?"), and
        only such a line can change its answer. The units' own groups are tried first (`own_groups`,
        `_check_own`: each unit's own findings, its callers checked again only when its summary changed), then
        the fine groups, then the coarse ones;
        until one is verified, and when neither is, the document is checked whole. The verification runs
        at once (`eager`), or step by step in `settle` (the server's idle time: the whole check's findings
        are published first)."""
        units = self.units(text, document)
        if units is None or any(unit.facts.parse_refused for unit in units) or file_noqa(text) or gap_comments(text, units):
            self.verified.pop(document, None)
            self.pending.pop(document, None)
            return self._check_core(text, display_name, document, text)
        groupings = [[group for _, group in self.own_groups(units)], self.groups(units, FINE), self.groups(units, COARSE)]
        kinds = [OWN, FINE, COARSE]
        if groupings[2] == groupings[1]:
            groupings.pop()
            kinds.pop()
        lines = self.previous[document][0] if document in self.previous else text.split("\n")
        signature = tuple(tuple(tuple(self._signature_of(units[i], lines) for i in group) for group in groups) for groups in groupings)
        job = self.pending.get(document)
        known = self.verified.get(document)
        if known is not None and known[0] == signature:
            self.pending.pop(document, None)
            if known[1] is not None:
                if known[1] == OWN:
                    split = self._check_own(lines, display_name, document, units)
                else:
                    split = self._check_groups(lines, display_name, document, units, groupings[kinds.index(known[1])])
                if split is not None:
                    return split
            return self._check_core(text, display_name, document, self._core_of(text, units))
        whole = self._check_core(text, display_name, document, self._core_of(text, units))
        if job is not None and job.signature == signature:
            # An edit before the verification of this signature was done: it goes on in idle time (`settle`). (Not
            # finished now: a big class's members are as many groups, each nearly the class: seconds, not one check.)
            return whole
        # The whole part's tree (cycles too) goes before anything kept is made: kept objects made among its
        # garbage hold on to the memory it leaves (a long-lived server). The lines are those `units` keeps.
        gc.collect()
        self.pending[document] = Verification(signature, lines, units, groupings, kinds, display_name, whole)
        if self.eager:
            while self.settle(document):
                pass
        return whole

    def _signature_of(self, unit: Unit, lines: List[str]) -> Tuple[str, ...]:
        """The unit's relevant lines without comments no rule reads (`engine.unit_signature`)."""
        if not unit.facts.relevant_lines:
            return ()
        found = self.signatures.get(unit.digest)
        if found is None:
            found = self.signatures[unit.digest] = signature_lines(lines[unit.first : unit.last + 1], unit.facts.relevant_lines)
        return found

    def settle(self, document: str) -> bool:
        """One step of the document's pending verification (one group checked); False when none is left."""
        job = self.pending.get(document)
        if job is None:
            return False
        kept = self.group_results.setdefault(document, OrderedDict())
        groups = job.groupings[job.level]
        usable = True
        for group in groups:
            if self._group_key(job.units, group) not in kept:
                if self._group_outcome(job.lines, job.units, group, job.display_name, kept) is None:
                    usable = False  # the groups cannot be used
                    break
                return True
        kind = job.kinds[job.level]
        split = None
        if usable and kind == OWN:
            split = self._check_own(job.lines, job.display_name, document, job.units, fresh=True)
        elif usable:
            split = self._check_groups(job.lines, job.display_name, document, job.units, groups)
        if split is not None and seen(split) == seen(job.whole):
            verdict: Optional[int] = kind
            if kind == OWN:  # each unit's own findings are kept: its group's whole outcome is not needed
                kept.clear()
        elif job.level + 1 < len(job.groupings):
            job.level += 1  # the fine groups next, then the coarse ones
            return True
        else:
            verdict = None  # checked whole
        self.verified[document] = (job.signature, verdict)
        self.stats["verified"] += 1
        if self.pending.get(document) is job:
            del self.pending[document]
        return False

    def _check_own(self, lines, display_name, document, units, fresh: bool = False) -> Optional[FileOutcome]:
        """The union of every core unit's own findings (`OWN`, `engine.unit_results`): kept ones where the unit
        and its group's summaries are as they were (`fresh`: none, for the verification), else its own group
        checked; None when a group cannot be used."""
        kept = self.group_results.setdefault(document, OrderedDict())
        own = self.own_results.setdefault(document, OrderedDict())
        diagnostics: List[Diagnostic] = []
        found_before = set()
        current, checked = set(), set()
        for root, group in self.own_groups(units):
            key = own_key(units, root, group)
            current.add(key)
            entry = None if fresh else own.get(key)
            found = None
            if entry is not None and entry[2] == display_name:
                rows = own_rows(units, group, entry[1], root) if entry[0] else []
                found = [moved(d, rows) for d in entry[0]]
                if any(d is None for d in found):
                    found = None  # it names a row of a member whose text changed
                else:
                    own.move_to_end(key)
                    self.stats["reused"] += 1
            if found is None:
                outcome = self._group_outcome(lines, units, group, display_name, kept)
                if outcome is None:
                    return None
                checked.add(self._group_key(units, group))
                layout = layout_of(units, group)
                mine = located_in(outcome, layout, group.index(root))
                # (the layout only where there is something to move: most units have no finding)
                own[key] = (mine, layout if mine else None, display_name)
                own.move_to_end(key)
                rows = own_rows(units, group, layout, root)
                found = [moved(d, rows) for d in mine]
                if any(d is None for d in found):
                    return None
            for diagnostic in found:
                if diagnostic not in found_before:
                    found_before.add(diagnostic)
                    diagnostics.append(diagnostic)
        for results, keep in ((own, current), (kept, checked)):
            stale = [key for key in results if key not in keep]
            for key in stale[: max(len(stale) - max(_RESULTS_PER_DOCUMENT, len(keep)), 0)]:
                del results[key]
        return self._outcome(display_name, diagnostics)

    def _outcome(self, display_name: str, diagnostics: List[Diagnostic]) -> FileOutcome:
        diagnostics.sort(key=lambda d: (d.location, d.code))
        unsafe = 0
        if not self.config.unsafe_fixes:
            unsafe = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability is Applicability.UNSAFE)
        return FileOutcome(display_name, diagnostics=diagnostics, unsafe_fixable=unsafe)

    def _core_of(self, text: str, units: Sequence[Unit]) -> str:
        lines = text.split("\n")
        for unit, is_in in zip(units, self.core(units)):
            if not is_in:
                for index in range(unit.first, unit.last + 1):
                    lines[index] = ""
        return "\n".join(lines)

    @staticmethod
    def _group_key(units: Sequence[Unit], group: Sequence[int]) -> str:
        return hashlib.blake2b("\0".join(units[i].digest for i in group).encode("ascii"), digest_size=20).hexdigest()

    def _group_outcome(self, lines, units, group, display_name, kept) -> Optional[FileOutcome]:
        """The check of one group's units alone (`ast` parsed each as whole statements, so they parse the
        same together), kept by their hashes; None when it said something other than findings."""
        digest = self._group_key(units, group)
        outcome = kept.get(digest)
        if outcome is not None and outcome.path == display_name:
            kept.move_to_end(digest)
            self.stats["reused"] += 1
            return outcome
        self.stats["core"] += 1
        self.stats["groups"] += 1
        group_text = "\n".join(line for i in group for line in lines[units[i].first : units[i].last + 1]) + "\n"
        outcome = check_text(group_text, display_name, self.config)
        if outcome.errors:
            return None
        kept[digest] = outcome
        return outcome

    def _check_groups(self, lines, display_name, document, units, groups) -> Optional[FileOutcome]:
        """The union of the groups' findings, moved back to the file's rows (an edit above a function moves
        its group's findings, it does not check it again); None when a group cannot be used."""
        kept = self.group_results.setdefault(document, OrderedDict())
        diagnostics: List[Diagnostic] = []
        shown = set()
        for group in groups:
            outcome = self._group_outcome(lines, units, group, display_name, kept)
            if outcome is None:
                return None
            if not outcome.diagnostics:
                continue
            rows: List[int] = []  # the file's 1-based row of each line of the group's text
            for index in group:
                rows.extend(range(units[index].first + 1, units[index].last + 2))
            for diagnostic in outcome.diagnostics:
                placed = moved(diagnostic, rows)
                if placed is None:
                    return None
                if placed not in shown:  # a finding in an import two groups share
                    shown.add(placed)
                    diagnostics.append(placed)
        # The current groups' results are kept, and the last few superseded ones (an undo); older ones go.
        current = {self._group_key(units, group) for group in groups}
        stale = [key for key in kept if key not in current]
        for key in stale[: max(len(stale) - _RESULTS_PER_DOCUMENT, 0)]:
            del kept[key]
        return self._outcome(display_name, diagnostics)

    def _check_core(self, text: str, display_name: str, document: str, core: str) -> FileOutcome:
        if core == text:
            self.stats["whole"] += 1
        digest = hashlib.blake2b(core.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()
        kept = self.results.setdefault(document, OrderedDict())
        found = kept.get(digest)
        if found is not None and found.path == display_name:
            kept.move_to_end(digest)
            self.stats["reused"] += 1
            return found
        self.stats["core"] += 1
        outcome = check_text(core, display_name, self.config)
        if not any(e.message.startswith("internal error") for e in outcome.errors):
            kept[digest] = outcome
            while len(kept) > _RESULTS_PER_DOCUMENT:
                kept.popitem(last=False)
        return outcome


