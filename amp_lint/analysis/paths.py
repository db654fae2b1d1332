"""Questions about the paths of one flow graph, with correlated conditions and confidence.

`Paths.query(src, dst, avoid)` asks: is there a feasible forward path from `src` to `dst` that passes no
node of `avoid`? The answer is one of

- `None`: no feasible path (the branches that would be needed contradict each other);
- `PROVED`: a path exists whatever the *unknown* conditions are (only conditions that decide whether the
  end points run at all, and *varying* ones, may be chosen);
- `ASSUMED`: a path exists only if some unknown condition goes one particular way (or an exception
  happens): a finding built on it rests on that assumption.

Correlated conditions (a test that decides two or more branches of the scope) are assigned once per
path: every assignment is tried. Other tests are independent per branch. Forward edges go from larger
node numbers to smaller ones (`amp_lint.analysis.cfg`), so each answer is one pass over the nodes.
"""

from __future__ import annotations

import enum
import itertools
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from amp_lint.analysis.cfg import EXCEPTION, Graph
from amp_lint.analysis.conditions import is_varying

_MAX_UNKNOWN_KEYS = 5  # 32 assignments; more correlated tests are treated as independent
_MAX_VARYING_KEYS = 3


class Proof(enum.Enum):
    PROVED = "proved"
    ASSUMED = "assumed"


PROVED = Proof.PROVED
ASSUMED = Proof.ASSUMED

Assignment = Tuple[Tuple[str, bool], ...]


class Paths:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        count: Dict[str, int] = {}
        for edges in graph.succ:
            keys = {atom.key for _, atom in edges if atom is not None and atom is not EXCEPTION}
            for key in keys:
                count[key] = count.get(key, 0) + 1
        correlated = sorted((k for k, n in count.items() if n >= 2 and not k.startswith("<")), key=lambda k: -count[k])
        self.varying_keys = [k for k in correlated if is_varying(k)][:_MAX_VARYING_KEYS]
        self.unknown_keys = [k for k in correlated if not is_varying(k)][:_MAX_UNKNOWN_KEYS]
        enumerated = set(self.varying_keys) | set(self.unknown_keys)
        # Branch nodes whose choice the analysis cannot know (and cannot relate to another branch).
        self.unknown_branch = [False] * len(graph)
        for node, edges in enumerate(graph.succ):
            normal = [(m, a) for m, a in edges if a is not EXCEPTION]
            if len({m for m, _ in normal}) < 2:
                continue
            keys = {a.key for _, a in normal if a is not None}
            if keys & enumerated:
                continue
            if any(is_varying(k) for k in keys):
                continue
            self.unknown_branch[node] = True
        self._cache: Dict[tuple, object] = {}
        # Where each enumerated key decides a branch: a query only enumerates the keys between its ends.
        self._key_nodes: Dict[str, List[int]] = {}
        for node, edges in enumerate(graph.succ):
            for _, atom in edges:
                if atom is not None and atom.key in enumerated:
                    nodes = self._key_nodes.setdefault(atom.key, [])
                    if not nodes or nodes[-1] != node:
                        nodes.append(node)

    # --- one pass per (target, avoided nodes, assignment, mode), computed only as far as it is asked ---
    def _successors(self, node: int, assignment: Dict[str, bool], exceptions: bool) -> Iterable[int]:
        return _successors(self.graph, node, assignment, exceptions)

    def _reach(self, dst: int, avoid: FrozenSet[int], assignment: Assignment, exceptions: bool) -> "_Pass":
        """Which nodes reach `dst` passing no node of `avoid` (the ends excepted)."""
        key = ("reach", dst, avoid, assignment, exceptions)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = _Pass(self.graph, dst, avoid, dict(assignment), exceptions)
        return cached

    def _runs(self, node: int, origin: int, assignment: Assignment) -> bool:
        """Can `node` run after `origin` under `assignment`? From the scope's entry, one forward pass per
        assignment answers it for every node (each of N loops of one function asks it: issue 45)."""
        if origin != self.graph.entry:
            return self._reach(node, frozenset(), assignment, True)[origin]
        key = ("from entry", assignment)
        reached = self._cache.get(key)
        if reached is None:
            values = dict(assignment)
            reached = [False] * len(self.graph)
            reached[origin] = True
            for at in range(origin, -1, -1):
                if reached[at]:
                    for m in self._successors(at, values, True):
                        reached[m] = True
            self._cache[key] = reached
        return reached[node]

    def _must(self, dst: int, avoid: FrozenSet[int], assignment: Assignment) -> "_Pass":
        """Which nodes reach `dst` whichever way each unknown branch on the way goes."""
        key = ("must", dst, avoid, assignment)
        cached = self._cache.get(key)
        if cached is None:
            live = self._reach(dst, frozenset(), assignment, False)
            cached = self._cache[key] = _Pass(self.graph, dst, avoid, dict(assignment), False, (self.unknown_branch, live))
        return cached

    def _assignments(self, low: int, high: int) -> Iterable[Tuple[Assignment, Assignment]]:
        """Assignments of the correlated keys deciding some branch with a node number in [low, high]."""

        def inside(key: str) -> bool:
            return any(low <= n <= high for n in self._key_nodes.get(key, ()))

        varying_keys = [k for k in self.varying_keys if inside(k)]
        unknown_keys = [k for k in self.unknown_keys if inside(k)]
        varying = [tuple(zip(varying_keys, bits)) for bits in itertools.product((True, False), repeat=len(varying_keys))]
        unknown = [tuple(zip(unknown_keys, bits)) for bits in itertools.product((True, False), repeat=len(unknown_keys))]
        for v in varying:
            yield v, unknown  # type: ignore[misc]

    def query(
        self, src: int, dst: int, avoid: Iterable[int] = (), start: Optional[int] = None, holding: Tuple[Tuple[str, bool], ...] = ()
    ) -> Optional[Proof]:
        """Is there a feasible path src -> dst avoiding `avoid` (src itself may be avoided)? With `holding`,
        (condition key, value) pairs, only the paths on which those conditions have those values count
        (PROVED then: a path whatever the other unknown conditions are, given those)."""
        fixed = dict(holding)
        avoided = frozenset(n for n in avoid if n != src and n != dst)
        origin = self.graph.entry if start is None else start
        found = False
        proved = False
        for varying, unknowns in self._assignments(min(src, dst), max(origin, src)):
            varying = tuple(kv for kv in varying if kv[0] not in fixed)
            here = False
            every = True
            for unknown in unknowns:  # type: ignore[attr-defined]
                assignment = tuple(holding) + varying + tuple(kv for kv in unknown if kv[0] not in fixed)
                if not self._runs(src, origin, assignment):
                    continue  # src cannot run under this assignment
                if not self._reach(dst, frozenset(), assignment, True)[src]:
                    continue
                if self._reach(dst, avoided, assignment, True)[src]:
                    found = here = True
                if not self._must(dst, avoided, assignment)[src]:
                    every = False
            if here and every:
                proved = True
        if not found:
            return None
        return PROVED if proved else ASSUMED

    def reachable(self, src: int, dst: int) -> bool:
        return self.query(src, dst) is not None


def _successors(graph: Graph, node: int, assignment: Dict[str, bool], exceptions: bool) -> Iterable[int]:
    for target, atom in graph.succ[node]:
        if atom is EXCEPTION:
            if exceptions:
                yield target
            continue
        if atom is not None:
            wanted = assignment.get(atom.key)
            if wanted is not None and wanted != atom.holds:
                continue
        yield target


class _Pass:
    """The values of one backward pass towards node `dst`, computed in node order as far as they are asked.

    Forward edges go from larger node numbers to smaller ones, so a node's value needs only the values of
    nodes below it; no node below `dst` reaches it. A query about a loop's iteration asks no node above the
    iteration's start: it costs the size of the iteration, not of the function around it (issue 45).
    Reach: some successor reaches `dst`. Must (`must`: the unknown branches and the reach pass of the same
    target): at an unknown branch every live successor must. Plain data only (no reference back to `Paths`,
    whose cache holds the pass): the graph's model is freed by refcounting, not by the cyclic collector."""

    __slots__ = ("graph", "dst", "avoid", "assignment", "exceptions", "must", "values")

    def __init__(self, graph: Graph, dst: int, avoid: FrozenSet[int], assignment: Dict[str, bool], exceptions: bool,
                 must: Optional[Tuple[List[bool], "_Pass"]] = None) -> None:  # fmt: skip
        self.graph, self.dst, self.avoid, self.assignment, self.exceptions = graph, dst, avoid, assignment, exceptions
        self.must = must
        self.values: List[bool] = []

    def __getitem__(self, node: int) -> bool:
        index = node - self.dst
        if index < 0:
            return False
        values = self.values
        while len(values) <= index:
            values.append(self._value(self.dst + len(values)))
        return values[index]

    def _value(self, node: int) -> bool:
        if node == self.dst:
            return True
        if node in self.avoid:
            return False
        successors = _successors(self.graph, node, self.assignment, self.exceptions)
        if self.must is not None and self.must[0][node]:  # an unknown branch
            live = self.must[1]
            alive = [m for m in successors if live[m]]
            return bool(alive) and all(self[m] for m in alive)
        return any(self[m] for m in successors)


def weakest(*proofs: Optional[Proof]) -> Optional[Proof]:
    """Both facts together: None if either is missing, ASSUMED if either is assumed."""
    if any(p is None for p in proofs):
        return None
    return ASSUMED if any(p is ASSUMED for p in proofs) else PROVED
