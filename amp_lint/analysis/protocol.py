"""The GradScaler protocol, written once, as data (Infer's Topl idea: a table of states and transitions).

Pure data and one pure step function (`transition`): no LibCST, no analysis import, so that anything
(the analysis' engine `typestate`, the fix check, a runtime guard) can run the same table. It models what
`torch/amp/grad_scaler.py` does (torch 2.x):

Per (scaler, optimizer), the scaler's stage as PyTorch keeps it (`OptState`):

    READY --unscale_--> UNSCALED --step--> STEPPED
    READY --step------> STEPPED      (step() calls unscale_() itself when the stage is READY)
    update() / update(new_scale): every optimizer of that scaler back to READY

    unscale_ on UNSCALED: RuntimeError "unscale_() has already been called on this optimizer since the
    last update()"; unscale_ on STEPPED: RuntimeError "unscale_() is being called after step()"; step on
    STEPPED: RuntimeError "step() has already been called since the last update()".

Per (scaler, optimizer), the gradients' scale: FRESH (no backward this iteration yet, or not known),
ZEROED, SCALED (by the scaler's current scale), UNSCALED, TWICE (divided by the scale twice), MIXED
(scaled gradients added onto unscaled ones), and whether they accumulate earlier micro-batches
(`accumulating`: a scaled backward onto gradients that were already scaled).

Per scaler, whether inf checks were recorded since the last update (unscale_ and step record them;
update() consumes them and, unless given `new_scale`, asserts "No inf checks were recorded prior to
update").

Each violation the table can name (`VIOLATIONS`) says which rule reports it; an order rule is a predicate
over these states and violations.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Optional, Tuple

# --- operations: what an event of the training step does to the protocol -------------------------------
SCALED_BACKWARD = "scaled backward"  # scaler.scale(loss).backward()
UNSCALE = "unscale_"  # scaler.unscale_(optimizer)
STEP = "step"  # scaler.step(optimizer)
UPDATE = "update"  # scaler.update()
UPDATE_NEW_SCALE = "update(new_scale)"  # scaler.update(new_scale): sets the scale, needs no inf checks
ZERO_GRAD = "zero_grad"  # optimizer.zero_grad() / model.zero_grad()
READ_GRADS = "read grads"  # clip_grad_norm_, a norm, a log, a finiteness test of .grad
OPTIMIZER_STEP = "optimizer.step"  # optimizer.step() applied directly

OPERATIONS: FrozenSet[str] = frozenset(
    {SCALED_BACKWARD, UNSCALE, STEP, UPDATE, UPDATE_NEW_SCALE, ZERO_GRAD, READ_GRADS, OPTIMIZER_STEP}
)

# --- states ------------------------------------------------------------------------------------------
# The scaler's stage per optimizer (torch.amp.grad_scaler.OptState).
READY = "ready"
UNSCALED = "unscaled"
STEPPED = "stepped"
STAGES = (READY, UNSCALED, STEPPED)

# The gradients' scale per optimizer.
FRESH = "fresh"
ZEROED = "zeroed"
SCALED = "scaled"
GRADS_UNSCALED = "unscaled"
TWICE = "unscaled twice"
MIXED = "mixed"
GRAD_STATES = (FRESH, ZEROED, SCALED, GRADS_UNSCALED, TWICE, MIXED)

ANY = "*"  # a wildcard in the tables below

# --- transitions -------------------------------------------------------------------------------------
# (operation, stage before) -> (stage after, violation or None). Operations not listed leave the stage.
STAGE_TRANSITIONS: Dict[Tuple[str, str], Tuple[str, Optional[str]]] = {
    (UNSCALE, READY): (UNSCALED, None),
    (UNSCALE, UNSCALED): (UNSCALED, "unscale-twice"),
    (UNSCALE, STEPPED): (STEPPED, "unscale-after-step"),
    (STEP, READY): (STEPPED, None),  # unscales by itself first
    (STEP, UNSCALED): (STEPPED, None),
    (STEP, STEPPED): (STEPPED, "step-twice"),
}

# Operations that put every optimizer of their scaler back to READY and clear its inf checks.
RESETS_SCALER: FrozenSet[str] = frozenset({UPDATE, UPDATE_NEW_SCALE})

# Operations that record inf checks for their scaler (what update() needs).
RECORDS_INF_CHECKS: FrozenSet[str] = frozenset({UNSCALE, STEP})

# Operations that need inf checks recorded since the last update: violation when there are none
# ("update-twice" instead when an update of this iteration consumed them).
NEEDS_INF_CHECKS: FrozenSet[str] = frozenset({UPDATE})

# (operation, stage before, gradients before) -> (gradients after, violation or None); the most specific
# row wins (`transition` tries the stage, then ANY, for the gradients as given, then ANY).
GRAD_TRANSITIONS: Dict[Tuple[str, str, str], Tuple[str, Optional[str]]] = {
    (SCALED_BACKWARD, ANY, FRESH): (SCALED, None),
    (SCALED_BACKWARD, ANY, ZEROED): (SCALED, None),
    (SCALED_BACKWARD, ANY, SCALED): (SCALED, None),  # accumulates (see ACCUMULATES)
    (SCALED_BACKWARD, ANY, GRADS_UNSCALED): (MIXED, None),
    (SCALED_BACKWARD, ANY, TWICE): (MIXED, None),
    (SCALED_BACKWARD, ANY, MIXED): (MIXED, None),
    (UNSCALE, READY, SCALED): (GRADS_UNSCALED, None),
    # A per-call step function whose backward runs elsewhere (a sibling method, the caller): whatever the
    # gradients held, unscale_() divided them, so a second division is provable within the call.
    (UNSCALE, READY, FRESH): (GRADS_UNSCALED, None),
    (UNSCALE, READY, MIXED): (MIXED, "unscaled-mixed"),
    (UNSCALE, READY, GRADS_UNSCALED): (TWICE, "unscaled-twice"),  # unscale_(); update(); unscale_()
    (STEP, READY, SCALED): (GRADS_UNSCALED, None),  # step() unscales by itself
    (STEP, READY, GRADS_UNSCALED): (TWICE, "unscaled-twice"),  # unscale_(); update(); step()
    (READ_GRADS, ANY, SCALED): (SCALED, "read-scaled"),
    (OPTIMIZER_STEP, ANY, SCALED): (SCALED, "step-scaled"),
    (ZERO_GRAD, ANY, ANY): (ZEROED, None),
}

# A scaled backward onto gradients in one of these states adds to them (gradient accumulation).
ACCUMULATES: FrozenSet[str] = frozenset({SCALED, MIXED})

# --- what each violation is, and which rule reports it --------------------------------------------------
VIOLATIONS: Dict[str, Tuple[str, str]] = {
    "unscale-twice": ("AMP024", "RuntimeError: unscale_() has already been called on this optimizer since the last update()"),
    "unscale-after-step": ("AMP024", "RuntimeError: unscale_() is being called after step()"),
    "step-twice": ("AMP021", "RuntimeError: step() has already been called since the last update()"),
    "update-without-inf-checks": ("AMP022", "AssertionError: No inf checks were recorded prior to update."),
    "update-twice": ("AMP023", "AssertionError: No inf checks were recorded prior to update."),
    "unscaled-twice": ("AMP022", "the gradients are divided by the scale twice"),
    "unscaled-mixed": ("AMP041", "scaled gradients were added onto unscaled ones before this unscale_"),
    "read-scaled": ("AMP030", "the gradients read are still multiplied by the scale"),
    "step-scaled": ("AMP020", "the optimizer applies gradients still multiplied by the scale"),
}


def stage_after(operation: str, stage: str) -> Tuple[str, Optional[str]]:
    """The scaler stage of one optimizer after `operation`, and the violation it is, if any."""
    if operation in RESETS_SCALER:
        return READY, None
    return STAGE_TRANSITIONS.get((operation, stage), (stage, None))


def grads_after(operation: str, stage: str, grads: str) -> Tuple[str, Optional[str]]:
    """The gradients' scale after `operation` (the stage is the one *before* it), and the violation."""
    for key in ((operation, stage, grads), (operation, ANY, grads), (operation, stage, ANY), (operation, ANY, ANY)):
        found = GRAD_TRANSITIONS.get(key)
        if found is not None:
            return found
    return grads, None


def inf_checks_after(operation: str, recorded: bool, updated: bool) -> Tuple[bool, Optional[str]]:
    """Whether the scaler holds inf checks after `operation`, and the violation (`updated`: an update of
    this iteration already ran)."""
    violation = None
    if operation in NEEDS_INF_CHECKS and not recorded:
        violation = "update-twice" if updated else "update-without-inf-checks"
    if operation in RESETS_SCALER:
        return False, violation
    if operation in RECORDS_INF_CHECKS:
        return True, violation
    return recorded, violation


def rule_of(violation: str) -> str:
    return VIOLATIONS[violation][0]
