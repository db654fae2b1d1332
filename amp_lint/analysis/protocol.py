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

from dataclasses import dataclass
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

# Per optimizer, the steps that applied its gradients in this iteration (update() does not reset them; a
# scaler step counts once its scaler's scaled backward ran): a scaler step and a direct optimizer.step()
# of one optimizer, in either order, apply one iteration's gradients twice.
# (operation, the earlier step's operation) -> violation.
APPLIED_TWICE: Dict[Tuple[str, str], str] = {(OPTIMIZER_STEP, STEP): "applied-twice", (STEP, OPTIMIZER_STEP): "applied-twice"}

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
    "applied-twice": ("AMP020", "the optimizer applies one iteration's gradients twice"),
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


# --- the order rules, as predicates over the protocol ----------------------------------------------------
# Each order rule is "event E happens while the state is S": one `Predicate` per condition it reports (its
# `kind`, the `Breach.kind` the analysis answers with). `operation` is E (an operation above, or one of the
# pseudo-events below); the state is given as data, for the (scaler, optimizer) the event names:
#   stage: the scaler's stage of the optimizer (READY / UNSCALED / STEPPED), or None (any);
#   grads: the gradients' states it holds in (a tuple of GRAD_STATES), or None (any);
#   accumulating: the gradients hold earlier micro-batches (True), or None (either);
#   checks: inf checks recorded since the last update (True / False), or None (either);
#   updated: an update of this iteration already ran (True / False), or None (either);
#   violation: the table's violation at the event that this predicate is (`VIOLATIONS`), when it is one.
# `where` names what the predicate needs beyond the state (a path on, a micro-batch, the syntax of the
# call); `typestate.matching` evaluates the state part, one engine for every entry.
END = "end of the iteration"  # the state the next iteration (or the next call) starts from
MICRO_BATCH = "a micro-batch that only accumulates"  # a path on which the accumulation boundary is false
SAVE = "save the scaler"  # torch.save / pickle / deepcopy of the scaler, or its state_dict()


@dataclass(frozen=True)
class Predicate:
    rule: str
    kind: str
    operation: str
    stage: Optional[str] = None
    grads: Optional[Tuple[str, ...]] = None
    accumulating: Optional[bool] = None
    checks: Optional[bool] = None
    updated: Optional[bool] = None
    violation: Optional[str] = None
    where: str = ""

    def describe(self) -> str:
        """`kind`: event while state (one line, for the rule's docs)."""
        state = [f"stage {self.stage}"] if self.stage else []
        state += [f"gradients {' or '.join(self.grads)}"] if self.grads else []
        state += ["accumulating"] if self.accumulating else []
        state += [f"inf checks {'recorded' if self.checks else 'not recorded'}"] if self.checks is not None else []
        state += ["after an update of this iteration"] if self.updated else []
        text = f"`{self.kind}`: {self.operation} while " + (", ".join(state) or "any state")
        text += f" ({self.where})" if self.where else ""
        return text + (f"; {VIOLATIONS[self.violation][1]}" if self.violation else "")


_p = Predicate
_S = (SCALED,)
PREDICATES: Tuple[Predicate, ...] = (
    # AMP020: an optimizer applies gradients the scaler did not hand it.
    _p("AMP020", "step-scaled", OPTIMIZER_STEP, grads=_S, violation="step-scaled", where="no scaler.step of it"),
    _p("AMP020", "optimizer-stepped-twice", OPTIMIZER_STEP, violation="applied-twice", where="scaler.step of it before or after"),
    _p("AMP020", "step-around-unscaled", OPTIMIZER_STEP, stage=UNSCALED, where="an update follows"),
    _p("AMP020", "step-closed-by-update", OPTIMIZER_STEP, checks=False, where="an update follows, no scaler.step"),
    # AMP021: the iteration ends with the optimizer STEPPED: the next step() raises "step-twice".
    _p("AMP021", "update-missing", END, stage=STEPPED, violation="step-twice", where="no update anywhere"),
    _p("AMP021", "update-never-in-project", END, stage=STEPPED, violation="step-twice", where="nothing in the project updates"),
    _p("AMP021", "update-skipped", END, stage=STEPPED, violation="step-twice", where="a path skips the update, the next iteration steps again"),
    # AMP022: update() with no inf checks, or between unscale_ and step.
    _p("AMP022", "update-before-step", UPDATE, checks=False, violation="update-without-inf-checks", where="a step follows"),
    _p("AMP022", "update-checks-on-some-paths", UPDATE, checks=False, violation="update-without-inf-checks", where="on some paths"),
    _p("AMP022", "update-breaks-every-path", UPDATE, checks=False, violation="update-without-inf-checks", where="or UNSCALED, a step follows"),
    _p("AMP022", "update-never-stepped", UPDATE, checks=False, violation="update-without-inf-checks", where="nothing in the file steps"),
    _p("AMP022", "update-resets-unscaled", STEP, stage=READY, grads=(GRADS_UNSCALED,), violation="unscaled-twice"),
    # AMP023: update() again in the same iteration.
    _p("AMP023", "update-again", UPDATE, updated=True, violation="update-twice"),
    _p("AMP023", "update-per-optimizer", UPDATE, updated=True, violation="update-twice", where="the next pass of an inner loop"),
    # AMP024: unscale_ of an optimizer that is not READY.
    _p("AMP024", "unscale-twice", UNSCALE, stage=UNSCALED, violation="unscale-twice"),
    _p("AMP024", "unscale-after-step", UNSCALE, stage=STEPPED, violation="unscale-after-step"),
    _p("AMP024", "unscale-next-iteration", END, stage=UNSCALED, where="a path skips the update"),
    # AMP025: a closure to GradScaler.step (the call's arguments, whatever the state).
    _p("AMP025", "closure-keyword", STEP, where="closure= argument"),
    _p("AMP025", "closure-positional", STEP, where="a second positional argument"),
    # AMP030 / AMP031: gradients read while scaled; a clip that raises on the scaler's inf steps.
    _p("AMP030", "read-scaled", READ_GRADS, grads=_S, violation="read-scaled", where="a step of the scaler follows"),
    _p("AMP031", "clip-raises-nonfinite", READ_GRADS, where="error_if_nonfinite=True, a scaler step on its path"),
    # AMP040-AMP042: gradient accumulation.
    _p("AMP040", "step-every-micro-batch", MICRO_BATCH, violation="step-twice", where="the boundary steps too"),
    _p("AMP040", "step-on-partial-sums", MICRO_BATCH, grads=_S, accumulating=True, where="zero_grad only at the boundary"),
    _p("AMP041", "unscale-every-micro-batch", MICRO_BATCH, violation="unscaled-mixed", where="the step at the boundary"),
    _p("AMP041", "clip-every-micro-batch", MICRO_BATCH, grads=_S, accumulating=True, where="the step at the boundary"),
    _p("AMP042", "loss-not-divided", SCALED_BACKWARD, accumulating=True, where="the loss never names `% n`'s n"),
    # AMP043: zero_grad clears scaled gradients before the step reads them.
    _p("AMP043", "zero-grad-same-optimizer", ZERO_GRAD, grads=_S, where="the step of that optimizer follows"),
    _p("AMP043", "zero-grad-module", ZERO_GRAD, grads=_S, where="the optimizer holds the module's parameters"),
    _p("AMP043", "zero-grad-module-assumed", ZERO_GRAD, grads=_S, where="the optimizer not known"),
    # AMP081: the scaler saved mid-iteration.
    _p("AMP081", "pickled-mid-iteration", SAVE, checks=True, where="an update follows"),
    _p("AMP081", "state-saved-before-update", SAVE, grads=_S, where="an update follows"),
)

PREDICATE_OF: Dict[str, Predicate] = {p.kind: p for p in PREDICATES}


def predicates_of(rule: str) -> Tuple[Predicate, ...]:
    """The predicates a rule reports (for the rule's docs and tests)."""
    return tuple(p for p in PREDICATES if p.rule == rule)
