"""The guard's engine: it follows each GradScaler and optimizer through the protocol table and reports breaches.

:class:`ProtocolMonitor` knows nothing of torch: the hooks (:mod:`amp_lint.guard.hooks`) call its ``on_*`` methods
with the objects involved and the call site (a ``(filename, line)`` pair in the user's code), and it looks the
call up in :mod:`amp_lint.guard.protocol`. A breach becomes a :class:`Violation`, handed to the report
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

from amp_lint.guard import protocol
from amp_lint.guard.protocol import Breach

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
    state: str = protocol.READY
    last_site: Site = None
    """Where the last unscale_ or step on this optimizer ran."""
    scales_at_last_call: int = 0
    """The scaler's count of scale() calls when the last unscale_ or step ran (a later scale(): a new iteration)."""
    zeroed: tuple[int, Site] | None = None
    """(backward count, site) of a zero_grad() after a scaled backward, until the next backward."""
    parameters: frozenset[int] = frozenset()
    """The ids of the optimizer's parameters, read when it is first met."""


@dataclass
class _ScalerState:
    built_at: Site = None
    loaded: bool = False
    """load_state_dict() was called: a scaler built again but resumed from saved state does not restart."""
    scales: int = 0
    scaled_since_update: bool = False
    state: str = protocol.IDLE
    updates: int = 0
    optimizers: weakref.WeakKeyDictionary[Any, _OptimizerState] = field(default_factory=weakref.WeakKeyDictionary)
    pending: list[tuple[str, frozenset[int], Site]] = field(default_factory=list)
    """Clips and gradient reads since the first scale() of the iteration: (call, parameter ids, site)."""
    last_scale_site: Site = None
    collapsed: bool = False


class ProtocolMonitor:
    """Follows scalers and optimizers through the protocol; ``report(violation_args)`` receives each breach."""

    def __init__(self, report: Callable[[Breach, Site, dict[str, Any]], None]) -> None:
        self._report = report
        self._scalers: weakref.WeakKeyDictionary[Any, _ScalerState] = weakref.WeakKeyDictionary()
        self._stepped_by: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
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
        state = self._scaler(scaler)
        state.scales += 1
        state.scaled_since_update = True
        state.last_scale_site = site

    def on_unscale(self, scaler: Any, optimizer: Any, site: Site) -> None:
        self._optimizer_call(scaler, optimizer, protocol.UNSCALE, site)

    def on_step(self, scaler: Any, optimizer: Any, site: Site) -> None:
        state = self._scaler(scaler)
        self._check_rebuilt(scaler, state, optimizer)
        optimizer_state = state.optimizers.get(optimizer)
        if optimizer_state is not None and optimizer_state.zeroed is not None:
            backwards, zero_site = optimizer_state.zeroed
            if backwards == self.backwards:
                self._breach(protocol.ZERO_GRAD_BEFORE_STEP, site, state, previous=zero_site, scaler_site=site,
                             backward=source_of(state.last_scale_site) or "the scaled backward")  # fmt: skip
        self._optimizer_call(scaler, optimizer, protocol.STEP, site)
        state.state = protocol.STEPPED_SOME

    def on_update(self, scaler: Any, site: Site) -> None:
        state = self._scaler(scaler)
        outcome = protocol.SCALER_TRANSITIONS.get((state.state, protocol.UPDATE))
        if isinstance(outcome, Breach):
            self._breach(outcome, site, state, scaler_site=site)
        state.state = protocol.UPDATED
        state.updates += 1
        state.scaled_since_update = False
        state.pending.clear()
        for optimizer_state in state.optimizers.values():
            optimizer_state.state = protocol.READY
            optimizer_state.zeroed = None

    def on_scale_value(self, scaler: Any, value: float) -> None:
        """The scale read after an update: below :data:`~amp_lint.guard.protocol.COLLAPSED_SCALE` it collapsed."""
        state = self._scaler(scaler)
        if value < protocol.COLLAPSED_SCALE and not state.collapsed:
            state.collapsed = True
            self._breach(protocol.SCALE_COLLAPSED, state.built_at, state, scale=value, scaler_site=state.built_at)

    # -- gradient events ----------------------------------------------------------------------------------------

    def on_backward(self, autocast: str | None, site: Site) -> None:
        """A backward pass; ``autocast`` describes the enabled autocast it runs in (None: none)."""
        self.backwards += 1
        if autocast is not None:
            self._breach(protocol.BACKWARD_IN_AUTOCAST, site, None, autocast=autocast, where="the block of")

    def on_clip(self, parameters: Iterable[Any], site: Site) -> None:
        self._gradient_access(protocol.CLIP, parameters, site)

    def on_grad_read(self, parameter: Any, site: Site) -> None:
        self._gradient_access(protocol.READ_GRAD, [parameter], site)

    def on_zero_grad(self, optimizer: Any, site: Site) -> None:
        for state in self._scalers.values():
            optimizer_state = state.optimizers.get(optimizer)
            if state.scaled_since_update and optimizer_state is not None and optimizer_state.state == protocol.READY:
                optimizer_state.zeroed = (self.backwards, site)

    def wants_grad_reads(self) -> bool:
        """Whether any scaler has gradients still scaled (a read now may be a breach): the cheap test first."""
        return any(state.scaled_since_update for state in self._scalers.values())

    # -- the table ----------------------------------------------------------------------------------------------

    def _gradient_access(self, call: str, parameters: Iterable[Any], site: Site) -> None:
        active = [state for state in self._scalers.values() if state.scaled_since_update]
        if not active:
            return
        ids = frozenset(id(parameter) for parameter in parameters)
        for state in active:
            # Known optimizers are checked now; the pending list lets an optimizer met later in the iteration
            # (the first iteration) be checked when it is unscaled or stepped.
            state.pending.append((call, ids, site))
            for optimizer_state in state.optimizers.values():
                if optimizer_state.state == protocol.READY and ids & optimizer_state.parameters:
                    self._pending_breach(state, call, ids, site, optimizer_state)
                    state.pending.pop()
                    break

    def _optimizer_call(self, scaler: Any, optimizer: Any, call: str, site: Site) -> None:
        state = self._scaler(scaler)
        optimizer_state = state.optimizers.get(optimizer)
        if optimizer_state is None:
            optimizer_state = state.optimizers[optimizer] = _OptimizerState(parameters=_parameter_ids(optimizer))
        if optimizer_state.state == protocol.READY and state.pending:
            parameters = optimizer_state.parameters
            for pending_call, ids, pending_site in list(state.pending):
                if ids & parameters:
                    self._pending_breach(state, pending_call, ids, pending_site, optimizer_state, optimizer_site=site)
                    state.pending.remove((pending_call, ids, pending_site))
        fact = protocol.NEW_ITERATION if state.scales > optimizer_state.scales_at_last_call else protocol.SAME_ITERATION
        outcome = protocol.transition(optimizer_state.state, call, fact)
        if isinstance(outcome, Breach):
            self._breach(outcome, site, state, previous=optimizer_state.last_site, scaler_site=site)
        elif outcome is not None:
            optimizer_state.state = outcome
        optimizer_state.last_site = site
        optimizer_state.scales_at_last_call = state.scales
        optimizer_state.zeroed = None

    def _pending_breach(
        self, state: _ScalerState, call: str, ids: frozenset[int], site: Site, optimizer_state: _OptimizerState,
        optimizer_site: Site = None,
    ) -> None:  # fmt: skip
        outcome = protocol.transition(optimizer_state.state, call)
        if isinstance(outcome, Breach):
            names_site = optimizer_site or optimizer_state.last_site
            self._breach(outcome, site, state, scaler_site=names_site or state.last_scale_site,
                         optimizer=_argument(names_site) or "optimizer",
                         what="clips" if call == protocol.CLIP else "reads")  # fmt: skip

    def _check_rebuilt(self, scaler: Any, state: _ScalerState, optimizer: Any) -> None:
        try:
            earlier = self._stepped_by.get(optimizer)
            self._stepped_by[optimizer] = weakref.ref(scaler)
        except TypeError:  # not weak-referenceable: cannot follow it
            return
        earlier_scaler = earlier() if earlier is not None else None
        if earlier is not None and earlier_scaler is not scaler and not state.loaded and state.updates == 0:
            self._breach(protocol.SCALER_REBUILT, state.built_at, state, scaler_site=state.built_at,
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
