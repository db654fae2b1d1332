"""The facts of one function: its `Scope`, the training-step `Event`s in it, and where each sits.

The tree walk (`builder`) makes a `Scope` per function (and one for the module body) and records an
`Event` for each backward call (scaled or not), `scaler.scale/unscale_/step/update`, `optimizer.step`,
gradient clipping, `zero_grad`, gradient read and call of a helper, in source order, with the loops,
`if` branches (`Branch`) and autocast regions (`AutocastRegion`, the code a `with` item or decorator runs
under autocast) around it; `enabled_region` says which region is in force. `steps` groups a scope's events
into iterations; `scaler_flow` places each event on the function's control-flow graph
(`Event.flow_statement`) and asks the protocol's questions along its paths.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import libcst as cst

from amp_lint.analysis.autocast import AutocastSpec
from amp_lint.analysis.conditions import atom_of
from amp_lint.analysis.names import NameTable
from amp_lint.analysis.syntax import Loop, Statement, code_of


class EventKind(enum.Enum):
    BACKWARD = "backward"  # x.backward(), torch.autograd.backward(x)
    AUTOGRAD_GRAD = "autograd.grad"  # torch.autograd.grad(x, ...)
    SCALER_SCALE = "scaler.scale"  # scaler.scale(x) that is not immediately backpropagated
    SCALER_STEP = "scaler.step"
    SCALER_UPDATE = "scaler.update"
    SCALER_UNSCALE = "scaler.unscale_"
    OPTIMIZER_STEP = "optimizer.step"
    CLIP = "clip"  # torch.nn.utils.clip_grad_norm_ and friends
    GRAD_READ = "grad read"  # `p.grad` of a parameter in `for p in model.parameters():` (event.call is the Attribute)
    ZERO_GRAD = "zero_grad"
    CALL = "call"  # a call of a function or method defined in this file, or one that looks like an unscale


SCALER_KINDS = frozenset(
    {EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE, EventKind.SCALER_SCALE}
)


@dataclass(frozen=True)
class Branch:
    """One enclosing `if` and which way it went."""

    node: cst.If
    taken: bool  # True: body; False: else branch

    @property
    def condition(self) -> Tuple[str, bool]:
        """(normalised test, whether it holds here): `if amp:` body and `if not amp:` else are the same path.

        The test is normalised as the control-flow graph's branch atoms are (`conditions.normalise`), so
        the lexical checks (`Event.compatible`) and the path checks agree on which tests are one.
        """
        return atom_of(self.node.test, self.taken)


@dataclass(eq=False)
class AutocastRegion:
    """Code that runs under autocast: the body of a `with` item, or a decorated function."""

    node: Union[cst.With, cst.FunctionDef]
    spec: AutocastSpec
    item: Optional[cst.WithItem] = None  # the `with` item (None for a decorator)
    scope: Optional["Scope"] = None
    parent: Optional["AutocastRegion"] = None  # the lexically enclosing region, if any
    loops: Tuple[Loop, ...] = ()  # loops around the region within its scope, outermost first

    @property
    def is_decorator(self) -> bool:
        return isinstance(self.node, cst.FunctionDef)


def enabled_region(regions: Sequence[AutocastRegion], off: Sequence[AutocastRegion] = ()) -> Optional[AutocastRegion]:
    """The region in force among nested `regions` (outermost first), as `Event.in_enabled_autocast`; `off`:
    regions whose `enabled=` flag is known false where the question is asked (they switch autocast off)."""
    disabled_devices = set()
    for region in reversed(regions):
        if not region.spec.is_enabled or any(region is other for other in off):
            # autocast(enabled=False) only switches off its own device type (AMP053).
            disabled_devices.add(region.spec.device or "*")
            continue
        if "*" in disabled_devices or region.spec.device in disabled_devices:
            return None
        if region.spec.device is None and disabled_devices:
            return None
        return region
    return None



@dataclass(eq=False)
class Scope:
    """The module body, or one function (methods included)."""

    node: Union[cst.Module, cst.FunctionDef]
    name: str  # qualified: "Trainer.train_step"; "" for the module
    parent: Optional["Scope"]
    class_name: Optional[str] = None  # for methods, the enclosing class
    names: NameTable = field(default_factory=NameTable)
    params: Dict[str, Optional[cst.BaseExpression]] = field(default_factory=dict)  # name -> annotation
    events: List[Event] = field(default_factory=list)
    regions: List[AutocastRegion] = field(default_factory=list)
    assignments: Dict[str, List[Tuple[cst.BaseExpression, Statement]]] = field(default_factory=dict)
    decorator_region: Optional[AutocastRegion] = None
    # `regions_in_iteration`'s index: (position of each region, decorator regions, regions by enclosing loop)
    _region_index: Optional[Tuple[Dict[int, int], List[AutocastRegion], Dict[int, List[AutocastRegion]]]] = field(
        default=None, repr=False
    )

    @property
    def is_function(self) -> bool:
        return isinstance(self.node, cst.FunctionDef)

    def regions_in_iteration(self, loop: Optional[Loop]) -> List[AutocastRegion]:
        """The scope's regions that an iteration of `loop` (None: the whole scope) may run, in source order:
        those inside the loop, and decorator regions. Indexed once per scope (after the model is built), so
        that N loops of one function cost N, not N * N (issue 45)."""
        if loop is None:
            return self.regions
        if self._region_index is None:
            by_loop: Dict[int, List[AutocastRegion]] = {}
            for region in self.regions:
                for around in region.loops:
                    by_loop.setdefault(id(around), []).append(region)
            position = {id(region): i for i, region in enumerate(self.regions)}
            self._region_index = (position, [r for r in self.regions if r.item is None], by_loop)
        position, decorators, by_loop = self._region_index
        inside = by_loop.get(id(loop), [])
        if not decorators:
            return inside
        return sorted(decorators + inside, key=lambda region: position[id(region)])

    def chain(self) -> Iterator["Scope"]:
        scope: Optional[Scope] = self
        while scope is not None:
            yield scope
            scope = scope.parent


@dataclass(eq=False)
class Event:
    kind: EventKind
    call: cst.Call
    statement: Statement  # the innermost statement holding the call
    small_statement: Optional[cst.BaseSmallStatement]  # the small statement holding the call, if any
    scope: "Scope"
    loops: Tuple[Loop, ...]  # enclosing loops within the scope, outermost first
    branches: Tuple[Branch, ...]  # enclosing ifs within the scope, outermost first
    regions: Tuple[AutocastRegion, ...]  # enclosing autocast regions, outermost first
    receiver: Optional[str] = None  # dotted receiver of a method call ("scaler", "self.optimizer")
    target: Optional[str] = None  # loss of a backward; optimizer of a step/unscale_; callee of a CALL
    scaled_by: Optional[str] = None  # for BACKWARD / AUTOGRAD_GRAD: the scaler key when the loss is scaled
    scale_call: Optional[cst.Call] = None  # the scaler.scale(...) call feeding a backward
    loss: Optional[cst.BaseExpression] = None  # for BACKWARD / AUTOGRAD_GRAD: the expression backpropagated
    index: float = 0  # position in the iteration's order (source order; helpers' events sit at their call)
    # For an event of a helper function inlined into the iteration that calls it: the call it came through.
    via: Optional["Event"] = None
    # The flow-graph statement: `statement`, or the one-line suite (`if x: step()`) that holds the call.
    flow_statement: Optional[cst.CSTNode] = None

    @property
    def in_helper(self) -> bool:
        """True for an event seen through a call: fixes never edit a helper on one caller's behalf."""
        return self.via is not None

    def trail(self) -> List["Event"]:
        """The calls that led from the iteration to this event, outermost first."""
        calls = []
        event = self.via
        while event is not None:
            calls.append(event)
            event = event.via
        return list(reversed(calls))

    def reached_alike(self, other: "Event") -> bool:
        """Reached through the same calls (both the iteration's own, or both inside one call of one helper)."""
        return [id(e) for e in self.trail()] == [id(e) for e in other.trail()]

    @property
    def loop(self) -> Optional[Loop]:
        return self.loops[-1] if self.loops else None

    @property
    def region(self) -> Optional[AutocastRegion]:
        """The innermost autocast region around the event (a disabled one counts: it switches autocast off)."""
        return self.regions[-1] if self.regions else None

    def in_enabled_autocast(self) -> Optional[AutocastRegion]:
        """The enclosing region that is in force, unless an inner `enabled=False` region switches it off."""
        return enabled_region(self.regions, self.flag_off_regions())

    def flag_off_regions(self) -> List[AutocastRegion]:
        """Issue 46, correlated flags: regions `autocast(enabled=flag)` whose flag is false where this event
        runs (it sits on the `else:` of `if flag:`, or after `if flag: ...; return`), so autocast is off here."""
        if not self.branches:
            return []
        off = []
        for region in self.regions:
            flag = region.spec.enabled_node
            if flag is None or region.spec.enabled is not None:
                continue  # no flag, or a literal one
            key, holds = atom_of(flag, True)
            if any(branch.condition == (key, not holds) and _inside(branch.node, region) for branch in self.branches):
                off.append(region)
        return off

    @property
    def failing_tests(self) -> set:
        """The (normalised) tests that are false where the event runs: `scaler` under `else:` of `if scaler:`
        or of `if scaler is not None:`, where that scaler is None or off."""
        return {key for key, holds in (b.condition for b in self.branches) if not holds}

    def compatible(self, other: "Event") -> bool:
        """Can both events run in the same pass through the code (no `if`/`else` between them)?"""
        return branches_meet(self.branches, other.branches)

    def describe(self) -> str:
        return code_of(self.call)


def branches_meet(first: Sequence[Branch], second: Sequence[Branch]) -> bool:
    """Can code under the `if`s `first` and code under the `if`s `second` run in the same pass: not on two
    sides of one `if`, nor under opposite tests of one flag (`if use_deepspeed:` ... `elif scaler:` on the
    `else` of another `if use_deepspeed:`)?"""
    mine = {b.node: b.taken for b in first}
    for branch in second:
        if branch.node in mine and mine[branch.node] != branch.taken:
            return False
    if not first or not second:
        return True
    tests = dict(branch.condition for branch in first)
    for branch in second:
        key, holds = branch.condition
        if key in tests and tests[key] != holds:
            return False
    return True


def _inside(branch: cst.If, region: AutocastRegion) -> bool:
    """Is the `if` inside the region's block (its test then sees the flag the region was entered with)?"""
    node = region.node
    if not isinstance(node, cst.With):
        return True  # a decorated function: its flag is fixed for the whole call
    cached = _IFS_INSIDE.get(id(node))
    if cached is None or cached[0] is not node:
        ifs, stack = set(), [node.body]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.If):
                ifs.add(id(current))
            stack.extend(current.children)
        if len(_IFS_INSIDE) > 1_000:
            _IFS_INSIDE.clear()
        cached = _IFS_INSIDE[id(node)] = (node, ifs)
    return id(branch) in cached[1]


_IFS_INSIDE: dict = {}  # id(with) -> (the with, ids of the ifs in its body)
