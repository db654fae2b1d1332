"""The guard's engine: it follows each GradScaler and optimizer through the protocol table and reports breaches.

:class:`ProtocolMonitor` knows nothing of torch: the hooks (:mod:`amp_lint.guard.hooks`) call its ``on_*`` methods
with the objects involved and the call site (a ``(filename, line)`` pair in the user's code), and it looks the
call up in the static analysis' protocol table (:mod:`amp_lint.analysis.protocol`), worded by
:mod:`amp_lint.guard.breaches`. A breach becomes a :class:`Violation`, handed to the report
(:mod:`amp_lint.guard.report`), which warns, raises or records it.

The state lives on the objects it describes (one :class:`_ScalerState` per scaler, held in a weak dictionary), so a
scaler built per epoch and dropped takes its state with it.
"""

from __future__ import annotations

import linecache
import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from amp_lint.analysis import protocol as table
from amp_lint.guard import breaches
from amp_lint.guard.breaches import Breach

Site = Optional[tuple[str, int]]
"""Where a call was made in the user's code: (file name, line), or None when it cannot be told."""


@dataclass
class Violation:
    """One breach of the protocol at one place; ``count`` says how many times it happened there."""

    rule: str
    message: str
    filename: str | None
    line: int | None
    count: int = 1

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.line}" if self.filename else "<unknown>"

    def __str__(self) -> str:
        return f"{self.where}: {self.rule} {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "message": self.message, "file": self.filename, "line": self.line,
                "count": self.count}  # fmt: skip


@dataclass
class _OptimizerState:
    stage: str = table.READY
    """The scaler's stage for this optimizer (the table's READY / UNSCALED / STEPPED)."""
    grads: str = table.FRESH
    """The scale of its gradients (the table's FRESH, SCALED, UNSCALED, ...)."""
    last_site: Site = None
    """Where the last unscale_ or step on this optimizer ran."""
    scales_at_last_call: int = 0
    """The scaler's count of scale() calls when the last unscale_ or step ran (a later scale(): a new iteration)."""
    zeroed: tuple[int, Site] | None = None
    """(backward count, site) of a zero_grad() after a scaled backward, until the next backward."""
    parameters: frozenset[int] = frozenset()
    """The ids of the optimizer's parameters, read when it is first met."""
    scaler: Optional["_ScalerState"] = None


@dataclass
class _ScalerState:
    built_at: Site = None
    loaded: bool = False
    """load_state_dict() was called: a scaler built again but resumed from saved state does not restart."""
    scales: int = 0
    scaled_since_update: bool = False
    inf_checks: bool = False
    """The table's inf checks: recorded by unscale_ / step since the last update()."""
    updated_at: Site = None
    """The update() of this iteration (since the last scale()), if any."""
    updates: int = 0
    optimizers: weakref.WeakKeyDictionary[Any, _OptimizerState] = field(default_factory=weakref.WeakKeyDictionary)
    states: list[_OptimizerState] = field(default_factory=list)
    """The values of ``optimizers`` as a list: iterating a weak dictionary costs microseconds per call."""
    pending: list[tuple[str, frozenset[int], Site]] = field(default_factory=list)
    """Clips and gradient reads since the first scale() of the iteration: (call, parameter ids, site)."""
    last_scale_site: Site = None
    collapsed: bool = False


class ProtocolMonitor:
    """Runs the protocol table (:mod:`amp_lint.analysis.protocol`) over the calls of a run: per scaler and
    optimizer, the stage, the gradients' scale and the inf checks; ``report(breach, site, names)`` receives each
    violation the table names, and each breach of the guard's own checks (:mod:`amp_lint.guard.breaches`)."""

    def __init__(self, report: Callable[[Breach, Site, dict[str, Any]], None]) -> None:
        self._report = report
        self._scalers: weakref.WeakKeyDictionary[Any, _ScalerState] = weakref.WeakKeyDictionary()
        self._stepped_by: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
        self._states_of: weakref.WeakKeyDictionary[Any, list[_OptimizerState]] = weakref.WeakKeyDictionary()
        self.backwards = 0
        self.inside_scaler = False
        """True while a GradScaler method runs: the calls it makes itself (step() calls unscale_()) are not the
        user's."""
        self.only: weakref.WeakSet[Any] | None = None
        """When set, the only scalers followed (those given to ``wrap``)."""

    def follows(self, scaler: Any) -> bool:
        return (self.only is None or scaler in self.only) and bool(scaler.is_enabled())

    # -- scaler events ------------------------------------------------------------------------------------------

    def _scaler(self, scaler: Any) -> _ScalerState:
        state = self._scalers.get(scaler)
        if state is None:
            state = self._scalers[scaler] = _ScalerState()
        return state

    def on_scaler_built(self, scaler: Any, site: Site) -> None:
        self._scaler(scaler).built_at = site

    def on_scaler_loaded(self, scaler: Any) -> None:
        self._scaler(scaler).loaded = True

    def on_scale(self, scaler: Any, site: Site) -> None:
        """A scaled loss: its backward follows. The guard cannot see every way gradients are cleared
        (``model.zero_grad()``, ``p.grad = None``), so the first scaled backward after an update() is taken to
        start on cleared gradients; later ones in the same iteration add to what is there (the table's rows)."""
        state = self._scaler(scaler)
        state.scales += 1
        state.scaled_since_update = True
        state.updated_at = None
        state.last_scale_site = site
        for optimizer_state in state.states:
            before = optimizer_state.grads
            if optimizer_state.stage == table.READY and before != table.SCALED:
                before = table.ZEROED
            optimizer_state.grads = table.grads_after(table.SCALED_BACKWARD, optimizer_state.stage, before)[0]

    def on_unscale(self, scaler: Any, optimizer: Any, site: Site) -> None:
        self._optimizer_call(scaler, optimizer, table.UNSCALE, site)

    def on_step(self, scaler: Any, optimizer: Any, site: Site) -> None:
        state = self._scaler(scaler)
        self._check_rebuilt(scaler, state, optimizer)
        optimizer_state = state.optimizers.get(optimizer)
        if optimizer_state is not None and optimizer_state.zeroed is not None:
            backwards, zero_site = optimizer_state.zeroed
            if backwards == self.backwards:
                self._breach(breaches.ZERO_GRAD_BEFORE_STEP, site, state, previous=zero_site, scaler_site=site,
                             backward=source_of(state.last_scale_site) or "the scaled backward")  # fmt: skip
        self._optimizer_call(scaler, optimizer, table.STEP, site)

    def on_update(self, scaler: Any, site: Site, new_scale: bool = False) -> None:
        state = self._scaler(scaler)
        operation = table.UPDATE_NEW_SCALE if new_scale else table.UPDATE
        state.inf_checks, violation = table.inf_checks_after(operation, state.inf_checks, state.updated_at is not None)
        if violation is not None:
            self._breach(breaches.of_violation(violation), site, state, scaler_site=site)
        state.updated_at = site
        state.updates += 1
        state.scaled_since_update = False
        state.pending.clear()
        for optimizer_state in state.states:
            optimizer_state.stage = table.stage_after(operation, optimizer_state.stage)[0]
            optimizer_state.zeroed = None

    def on_scale_value(self, scaler: Any, value: float) -> None:
        """The scale read after an update: below :data:`~amp_lint.guard.breaches.COLLAPSED_SCALE` it collapsed."""
        state = self._scaler(scaler)
        if value < breaches.COLLAPSED_SCALE and not state.collapsed:
            state.collapsed = True
            self._breach(breaches.SCALE_COLLAPSED, state.built_at, state, scale=value, scaler_site=state.built_at)

    # -- gradient events ----------------------------------------------------------------------------------------

    def on_backward(self, autocast: str | None, site: Site) -> None:
        """A backward pass; ``autocast`` describes the enabled autocast it runs in (None: none)."""
        self.backwards += 1
        if autocast is not None:
            self._breach(breaches.BACKWARD_IN_AUTOCAST, site, None, autocast=autocast, where="the block of")

    def on_clip(self, parameters: Iterable[Any], site: Site) -> None:
        self._gradient_access("clips", parameters, site)

    def on_grad_read(self, parameter: Any, site: Site) -> None:
        self._gradient_access("reads", [parameter], site)

    def on_zero_grad(self, optimizer: Any, site: Site) -> None:
        for optimizer_state in self._states_of.get(optimizer, ()):
            assert optimizer_state.scaler is not None
            if optimizer_state.scaler.scaled_since_update and optimizer_state.stage == table.READY:
                optimizer_state.zeroed = (self.backwards, site)
            optimizer_state.grads = table.grads_after(table.ZERO_GRAD, optimizer_state.stage, optimizer_state.grads)[0]

    def wants_grad_reads(self) -> bool:
        """Whether any scaler has gradients still scaled (a read now may be a breach): the cheap test first."""
        return any(state.scaled_since_update for state in self._scalers.values())

    # -- the table ----------------------------------------------------------------------------------------------

    def _gradient_access(self, what: str, parameters: Iterable[Any], site: Site) -> None:
        active = [state for state in self._scalers.values() if state.scaled_since_update]
        if not active:
            return
        ids = frozenset(id(parameter) for parameter in parameters)
        for state in active:
            # Known optimizers are checked now; the pending list lets an optimizer met later in the iteration
            # (the first iteration) be checked when it is unscaled or stepped.
            state.pending.append((what, ids, site))
            for optimizer_state in state.states:
                if ids & optimizer_state.parameters:
                    state.pending.pop()
                    self._read(state, what, site, optimizer_state, optimizer_state.last_site)
                    break

    def _read(self, state: _ScalerState, what: str, site: Site, optimizer_state: _OptimizerState, names_site: Site) -> None:
        optimizer_state.grads, violation = table.grads_after(table.READ_GRADS, optimizer_state.stage, optimizer_state.grads)
        if violation is not None:
            self._breach(breaches.of_violation(violation), site, state, scaler_site=names_site or state.last_scale_site,
                         optimizer=_argument(names_site) or "optimizer", what=what)  # fmt: skip

    def _optimizer_call(self, scaler: Any, optimizer: Any, call: str, site: Site) -> None:
        state = self._scaler(scaler)
        optimizer_state = state.optimizers.get(optimizer)
        if optimizer_state is None:  # first met: its gradients are as scaled as the scaler's last backward left them
            grads = table.SCALED if state.scaled_since_update else table.FRESH
            optimizer_state = _OptimizerState(grads=grads, parameters=_parameter_ids(optimizer), scaler=state)
            state.optimizers[optimizer] = optimizer_state
            state.states.append(optimizer_state)
            try:
                self._states_of.setdefault(optimizer, []).append(optimizer_state)
            except TypeError:  # not weak-referenceable: its zero_grad() cannot be followed
                pass
        if state.pending:
            parameters = optimizer_state.parameters
            for what, ids, pending_site in list(state.pending):
                if ids & parameters:
                    state.pending.remove((what, ids, pending_site))
                    self._read(state, what, pending_site, optimizer_state, site)
        new_iteration = state.scales > optimizer_state.scales_at_last_call
        stage, grads = optimizer_state.stage, optimizer_state.grads
        optimizer_state.stage, stage_violation = table.stage_after(call, stage)
        optimizer_state.grads, grads_violation = table.grads_after(call, stage, grads)
        state.inf_checks, checks_violation = table.inf_checks_after(call, state.inf_checks, state.updated_at is not None)
        if stage_violation is not None:
            self._breach(breaches.of_violation(stage_violation, new_iteration), site, state,
                         previous=optimizer_state.last_site, scaler_site=site)  # fmt: skip
        elif grads_violation is not None:  # `unscale_(); update(); step()`: the update between is the cause
            cause = state.updated_at or site
            self._breach(breaches.of_violation(grads_violation), cause, state, scaler_site=site,
                         later=source_of(site) or call)  # fmt: skip
        elif checks_violation is not None:
            self._breach(breaches.of_violation(checks_violation), site, state, scaler_site=site)
        optimizer_state.last_site = site
        optimizer_state.scales_at_last_call = state.scales
        optimizer_state.zeroed = None

    def _check_rebuilt(self, scaler: Any, state: _ScalerState, optimizer: Any) -> None:
        try:
            earlier = self._stepped_by.get(optimizer)
            self._stepped_by[optimizer] = weakref.ref(scaler)
        except TypeError:  # not weak-referenceable: cannot follow it
            return
        earlier_scaler = earlier() if earlier is not None else None
        if earlier is not None and earlier_scaler is not scaler and not state.loaded and state.updates == 0:
            self._breach(breaches.SCALER_REBUILT, state.built_at, state, scaler_site=state.built_at,
                         where="for an optimizer that an earlier GradScaler already stepped")  # fmt: skip

    def _breach(self, breach: Breach, site: Site, state: _ScalerState | None, *, previous: Site = None,
                scaler_site: Site = None, **names: Any) -> None:  # fmt: skip
        names.setdefault("call", source_of(site) or breach.rule)
        names.setdefault("previous", source_of(previous) or "the earlier call")
        names.setdefault("scaler", _receiver(scaler_site) or _receiver(state.last_scale_site if state else None) or "scaler")
        names.setdefault("optimizer", _argument(scaler_site) or "optimizer")
        names.setdefault("where", "in this loop")  # AMP021: the step() of one iteration, the next one's call
        self._report(breach, site, names)


def _parameter_ids(optimizer: Any) -> frozenset[int]:
    groups = getattr(optimizer, "param_groups", [])
    return frozenset(id(parameter) for group in groups for parameter in group.get("params", []))


def source_of(site: Site) -> str | None:
    """The call's source line, stripped (the call as the user wrote it), or None when it cannot be read."""
    if site is None:
        return None
    text = linecache.getline(site[0], site[1]).strip()
    return text.removeprefix("with ").rstrip(":") or None


_CALL = re.compile(r"([A-Za-z_][\w.]*)\.(?:scale|unscale_|step|update)\(\s*([^()]*?)\s*[,)]")
_BUILD = re.compile(r"([A-Za-z_][\w.]*)\s*=\s*[\w.]*GradScaler\(")


def _receiver(site: Site) -> str | None:
    text = source_of(site)
    if text is None:
        return None
    match = _CALL.search(text) or _BUILD.search(text)
    return match.group(1) if match else None


def _argument(site: Site) -> str | None:
    text = source_of(site)
    match = _CALL.search(text) if text else None
    return match.group(2) or None if match else None
