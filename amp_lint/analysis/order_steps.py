"""The protocol's questions about a direct `optimizer.step()` (AMP020): the optimizer steps on gradients
its scaler still holds SCALED (the protocol's "step-scaled"), around a scaler that UNSCALED it (an
overflow never skipped), again after `scaler.step` stepped it, or before an `update()` that then finds
no inf checks. Each query yields `order.Breach`es; see `order`.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import protocol as P
from amp_lint.analysis import typestate
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep, known_not_a_scaler
from amp_lint.analysis.iteration_limit import analysed_steps
from amp_lint.analysis.conditions import FINITE, OPAQUE, finiteness, normalise
from amp_lint.analysis.flow_queries import last_of
from amp_lint.analysis.order import Breach
from amp_lint.analysis.order_reads import unscaled_by_hand
from amp_lint.analysis.paths import PROVED, weakest
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis.syntax import argument

STEPPED_TWICE = "optimizer-stepped-twice"  # `scaler.step(opt)` and `opt.step()` in one iteration; `related`: those scaler steps
AROUND_UNSCALED = "step-around-unscaled"  # UNSCALED by the scaler (`cause`: its unscale_), an update follows
CLOSED_BY_UPDATE = "step-closed-by-update"  # no scaled backward here, no scaler.step, an update (`other`) follows
STEP_SCALED = "step-scaled"  # the iteration's scaled backward reaches it, no scaler.step of the optimizer



def direct_steps(model: FileModel) -> Iterator[Breach]:
    """Each direct `optimizer.step()` that breaks the protocol, by the first question that holds:

    - STEPPED_TWICE: a scaled backward, `scaler.step(opt)` and `opt.step()` share one path (torchvision's
      references: `if scaler: scale/backward/step/update else: backward`, then an `optimizer.step()` after
      the `if` that runs on both paths).
    - AROUND_UNSCALED: issue 26, principle 1: the protocol reaches the step with the optimizer UNSCALED by
      its scaler (an `unscale_` of this iteration, no `scaler.step` since) and the scaler's `update()`
      follows: the right magnitude, but an overflowing step is never skipped. Not under a test of its
      own (a manual inf check).
    - CLOSED_BY_UPDATE: the scaled backward runs elsewhere (a sibling method, a callback, the caller), and
      the iteration steps directly, then closes with `update()`, with no `scaler.step` of that scaler in it
      (issue 26, principles 2 and 3): no inf checks for the update, or an overflow never skipped.
    - STEP_SCALED: the backward whose gradients it applies is scaled, and the scaler never steps this
      optimizer. The iteration's own unscaled backward (the fp32 branch of `if amp: ... else: ...`) is not.
    """
    for breach in _direct_steps(model):
        if breach.scaler is not None and known_not_a_scaler(breach.scaler, breach.step.scope, model):
            continue  # `self.grad_scaler = DummyGradScaler()`: its `scale()` is its own
        if not _scaler_disabled_on(model, breach.event, breach.scaler):
            yield breach


def _scaler_disabled_on(model: FileModel, optimizer_step: Event, scaler: Optional[str]) -> bool:
    """The direct step runs only where the scaler is disabled: the else of `if scaler.is_enabled():
    scaler.step(opt)`, or the else of `if amp:` where every construction that reaches it is
    `GradScaler(enabled=amp)` (a construction inside `if amp and ...:` does not). A disabled scaler's
    `unscale_`, `step` and `update` pass through: stepping directly is what `scaler.step` would do."""
    if scaler is None:
        return False
    false_here = optimizer_step.failing_tests  # normalised as the flow graph's branch atoms are
    if f"{scaler}.is_enabled()" in false_here or f"{scaler}._enabled" in false_here:
        return True
    bindings = [b for b in model.scaler_bindings(scaler, optimizer_step.scope) if b.call is not None]
    if not false_here or not bindings:
        return False
    for binding in bindings:
        enabled = argument(binding.call, None, "enabled")
        if enabled is not None and normalise(enabled.value) in {(key, True) for key in false_here}:
            continue  # built disabled where the step runs
        required = {normalise(part) for b in binding.branches if b.taken for part in _conjuncts(b.node.test)}
        if not any(key in false_here and holds for key, holds in required):
            return False  # built enabled, or on a path the step's may share
    return True


def _conjuncts(test: cst.BaseExpression) -> list:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def _direct_steps(model: FileModel) -> Iterator[Breach]:
    for step in analysed_steps(model):
        flow = flow_of(model, step)
        for optimizer_step in step.of(EventKind.OPTIMIZER_STEP):
            optimizer = optimizer_step.target
            twice = _stepped_twice(model, step, optimizer_step)
            if twice is not None:
                scaler, proof = twice
                through = [e for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler and e.target == optimizer]
                yield Breach(STEPPED_TWICE, optimizer_step, step, scaler, flow, related=tuple(through), proof=proof)
                continue
            bypass = _after_unscale(model, step, optimizer_step)
            if bypass is not None:
                yield bypass
                continue
            backward = _latest_backward(model, step, optimizer_step)
            if backward is None:
                # CLOSED_BY_UPDATE: the first update after it of a scaler that never steps in the iteration.
                for update in typestate.follows(flow, optimizer_step, P.RESETS_SCALER)[0]:
                    scaler = update.receiver
                    if scaler is not None and model.scaler_enabled(scaler, step.scope) and not step.scaler_events(scaler, EventKind.SCALER_STEP):
                        yield Breach(CLOSED_BY_UPDATE, optimizer_step, step, scaler, flow, other=update, proof=flow.path(optimizer_step, update))
                        break
                continue
            if backward.scaled_by is None:
                continue
            scaler = backward.scaled_by
            if not model.scaler_enabled(scaler, step.scope):
                continue
            if any(e.receiver == scaler and e.target == optimizer for e in step.of(EventKind.SCALER_STEP)):
                continue
            if unscaled_by_hand(model, step, scaler):
                continue  # gradients rescaled by `scaler.get_scale()` by hand: which ones, the code alone knows
            states = typestate.run(flow).before.get(id(optimizer_step), ())
            if states and typestate.proof_of(states, scaler, optimizer, STEP_SCALED) is None and _manual_inf_check(optimizer_step):
                continue  # unscaled on every state, and a test of its own proved them finite: a manual skip
            yield Breach(STEP_SCALED, optimizer_step, step, scaler, flow, cause=backward)


def _after_unscale(model: FileModel, step: TrainingStep, optimizer_step: Event) -> Optional[Breach]:
    if _manual_inf_check(optimizer_step):
        return None
    flow = flow_of(model, step)
    states = typestate.run(flow).before.get(id(optimizer_step), ())
    optimizer = optimizer_step.target
    for state in states:
        for scaler, o, _, unscale in state.stages:
            if o != optimizer or not typestate.matching([state], AROUND_UNSCALED, scaler, o):
                continue
            if not model.scaler_enabled(scaler, step.scope):
                continue
            updates, _ = typestate.follows(flow, optimizer_step, P.RESETS_SCALER, scaler)
            if not updates:
                if step.loop is None and not step.scaler_events(scaler, EventKind.SCALER_UPDATE):
                    # A per-call helper that unscales and steps directly, leaving the update to its caller
                    # (issue 26, principles 2 and 3): whatever the caller does next, this step already ran
                    # on gradients nobody checked for inf.
                    return Breach(AROUND_UNSCALED, optimizer_step, step, scaler, flow, cause=unscale, proof=flow.path(unscale, optimizer_step))
                continue
            proof = weakest(flow.path(unscale, optimizer_step), flow.path(optimizer_step, updates[0]))
            if proof is not PROVED and _every_state_breaks(flow, states, scaler, optimizer_step, updates[0]):
                proof = PROVED
            return Breach(AROUND_UNSCALED, optimizer_step, step, scaler, flow, cause=unscale, other=updates[0], proof=proof)
    return None


def _manual_inf_check(optimizer_step: Event) -> bool:
    """The direct step runs only where a test of its own proved the gradients finite (the else of `if not
    torch.isfinite(norm): skip`): a manual skip. The edge of `if norm is None or isfinite(norm):` proves
    nothing (no norm, no check), and the body of `if not isfinite(norm):` steps on the overflow."""
    for b in optimizer_step.branches:
        test = getattr(b.node, "test", None)
        if test is not None and finiteness(test, b.taken) & {FINITE, OPAQUE}:
            return True
    return False


def _every_state_breaks(flow, states, scaler: str, optimizer_step: Event, update: Event) -> bool:
    """Issue 26, principle 1: on every protocol state reaching the direct step, it is wrong: the optimizer
    UNSCALED (an overflow never skipped), its gradients still SCALED (an `unscale_` in a loop over the
    optimizers that may skip this one: espnet's `if iopt != optim_idx: continue`), or no inf checks recorded and none until the update, which
    then raises (`if clip: unscale_(); clip()` then `opt.step(); update()`)."""
    if flow.path(optimizer_step, update) is not PROVED:
        return False
    checks = [e for e in flow.step.events if e.receiver == scaler and e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE)]
    kinds = (AROUND_UNSCALED, STEP_SCALED)
    if flow.path(optimizer_step, update, checks) is not None:
        kinds += (CLOSED_BY_UPDATE,)
    return typestate.proof_of(states, scaler, optimizer_step.target, *kinds) is PROVED


def _stepped_twice(model: FileModel, step: TrainingStep, optimizer_step: Event):
    """(scaler, proof) when `scaler.step(opt)`, after its scaled backward, and `opt.step()` apply one
    iteration's gradients (the protocol's "applied-twice", at whichever of the two runs second).

    torchvision's references: `if scaler: scale/backward/step/update else: backward`, then an
    `optimizer.step()` after the `if` that runs on both paths.
    """
    flow = flow_of(model, step)
    engine = typestate.run(flow)
    pairs = [(v.cause, v.scaler) for v in engine.at(optimizer_step, "applied-twice")]
    pairs += [(e, v.scaler) for e in step.of(EventKind.SCALER_STEP) for v in engine.at(e, "applied-twice") if v.cause is optimizer_step]
    for scaler_step, scaler in sorted(pairs, key=lambda pair: pair[0].index):
        if model.scaler_enabled(scaler, step.scope):
            return scaler, flow.path(scaler_step, optimizer_step) or flow.path(optimizer_step, scaler_step)
    return None


def _latest_backward(model: FileModel, step: TrainingStep, event: Event) -> Optional[Event]:
    """The backward that last runs before `event` on its paths (whose gradients the step applies)."""
    flow = flow_of(model, step)
    reaching = [b for b in step.of(EventKind.BACKWARD) if flow.path(b, event) is not None]
    return last_of(flow, reaching) if reaching else None
