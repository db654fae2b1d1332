"""The GradScaler protocol the guard checks, as data: states, calls, and what each call does in each state.

This is the run-time face of the protocol the static rules check (AMP001, AMP013, AMP021, AMP022, AMP023, AMP024,
AMP030, AMP043): the same rule IDs, and messages worded as the rules word theirs, with the names filled in from the
call site the guard sees (the source line of the call) instead of from the syntax tree. It is kept as plain tables
so that it can be replaced by the shared protocol table of the static analysis once both read from one.

Per optimizer, within one iteration of a GradScaler (from one ``update()`` to the next), an optimizer is
``ready`` (its gradients, once a scaled backward ran, are still scaled), ``unscaled`` (``unscale_`` ran) or
``stepped``. ``update()`` puts every optimizer of the scaler back to ``ready``. :data:`OPTIMIZER_TRANSITIONS` says,
for a state and a call, the next state, or the breach (:class:`Breach`) that the call is. Some breaches depend on
one more fact, which the key's third part names: ``"new iteration"`` when the scaler scaled a loss since the
optimizer stepped (the call belongs to the next iteration, so the update between was missed), ``"same iteration"``
otherwise. :data:`SCALER_TRANSITIONS` does the same for ``update()`` over the scaler as a whole.

Pure data: importing this module imports nothing (no torch, no LibCST).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

READY = "ready"
UNSCALED = "unscaled"
STEPPED = "stepped"

#: Scaler-wide states for ``update()``: nothing stepped since the last update, something stepped, or the last
#: call on the scaler was ``update()`` itself.
IDLE = "idle"
STEPPED_SOME = "stepped"
UPDATED = "updated"

#: The calls (events) the guard observes. ``clip`` is ``clip_grad_norm_`` / ``clip_grad_value_`` on parameters of
#: the optimizer; ``read_grad`` a ``.grad`` read from the user's code; ``zero_grad`` the optimizer's own.
UNSCALE = "unscale_"
STEP = "step"
CLIP = "clip"
READ_GRAD = "read_grad"
ZERO_GRAD = "zero_grad"
UPDATE = "update"

NEW_ITERATION = "new iteration"
SAME_ITERATION = "same iteration"


@dataclass(frozen=True)
class Breach:
    """A call the protocol forbids: the static rule's ID and its message, with ``{placeholders}`` for names.

    Placeholders: ``call`` (the source of the offending call), ``previous`` (the call it conflicts with),
    ``scaler`` (the scaler's name in the caller's code when it can be read, else ``scaler``), ``optimizer``, and
    ``what`` (``clips`` or ``reads``, for a gradient access), ``where`` (what the run showed of the place).
    """

    rule: str
    message: str


Transition = Union[str, Breach, None]
"""The next state, a breach, or None (the call changes nothing and is fine)."""

_UNSCALE_TWICE = Breach(
    "AMP024",
    "`{call}` runs again after `{previous}` with no `{scaler}.update()` between: "
    "RuntimeError 'unscale_() has already been called'",
)
_UNSCALE_AFTER_STEP = Breach(
    "AMP024",
    "`{call}` runs after `{previous}`: RuntimeError 'unscale_() is being called after step()'; unscale before stepping",
)
_MISSING_UPDATE = Breach(
    "AMP021",
    "`{previous}` is never followed by `{scaler}.update()` {where}; the next `{scaler}.step()` raises RuntimeError",
)
_SCALED_GRADIENTS = Breach(
    "AMP030", "`{call}` {what} gradients still scaled by `{scaler}`; call `{scaler}.unscale_({optimizer})` first"
)

#: (state, call[, fact]) -> next state | Breach | None. A key without the fact applies whatever the fact is.
OPTIMIZER_TRANSITIONS: dict[tuple[str, ...], Transition] = {
    (READY, UNSCALE): UNSCALED,
    (READY, STEP): STEPPED,
    (READY, CLIP): _SCALED_GRADIENTS,  # only while a scaled backward has run since the last update()
    (READY, READ_GRAD): _SCALED_GRADIENTS,  # likewise
    (UNSCALED, UNSCALE, SAME_ITERATION): _UNSCALE_TWICE,
    (UNSCALED, UNSCALE, NEW_ITERATION): _MISSING_UPDATE,
    (UNSCALED, STEP): STEPPED,
    (UNSCALED, CLIP): None,
    (UNSCALED, READ_GRAD): None,
    (STEPPED, UNSCALE, SAME_ITERATION): _UNSCALE_AFTER_STEP,
    (STEPPED, UNSCALE, NEW_ITERATION): _MISSING_UPDATE,
    (STEPPED, STEP): _MISSING_UPDATE,
    (STEPPED, CLIP): None,  # step() unscaled them
    (STEPPED, READ_GRAD): None,
}

#: ``update()`` against the scaler as a whole: (scaler state, call) -> next scaler state | Breach.
SCALER_TRANSITIONS: dict[tuple[str, str], Transition] = {
    (STEPPED_SOME, UPDATE): UPDATED,
    (IDLE, UPDATE): Breach(
        "AMP022",
        "`{call}` runs before `{scaler}.step()`; update() must come after every step() of the iteration",
    ),
    (UPDATED, UPDATE): Breach(
        "AMP023", "`{call}` runs again later in the same iteration; update() once, after the last step()"
    ),
}

#: A backward pass while autocast is enabled (AMP001).
BACKWARD_IN_AUTOCAST = Breach(
    "AMP001", "`{call}` runs inside {where} `{autocast}`; run the backward pass after leaving autocast"
)

#: ``zero_grad()`` between a scaled backward and the step that reads its gradients (AMP043): reported when the
#: optimizer steps with no backward since it was zeroed.
ZERO_GRAD_BEFORE_STEP = Breach(
    "AMP043",
    "`{previous}` clears the gradients of `{backward}` before `{call}` reads them: 'No inf checks were recorded' (or "
    "a step on zero gradients); zero them after `{scaler}.update()`",
)

#: A GradScaler built again for an optimizer an earlier GradScaler already stepped, without loading its state
#: (AMP013).
SCALER_REBUILT = Breach(
    "AMP013",
    "`{call}` builds a new GradScaler {where}: the scale restarts at its initial value and never calibrates; build it "
    "once, before the loop",
)

#: No static rule can see this: the scale fell below :data:`COLLAPSED_SCALE`, so float16 overflows (inf/NaN) even
#: unscaled and nearly every step is skipped. A guard-only ID.
SCALE_COLLAPSED = Breach(
    "AMPG01",
    "the loss scale of `{scaler}` fell to {scale:g}: nearly every step overflows in float16 and is skipped (the "
    "loss or the model yields inf/NaN even unscaled); check the loss and the inputs, or train in bfloat16",
)
COLLAPSED_SCALE = 1.0

#: Every rule the guard can report, for documentation and tests.
RULES = ("AMP001", "AMP013", "AMP021", "AMP022", "AMP023", "AMP024", "AMP030", "AMP043", "AMPG01")


def transition(state: str, call: str, fact: str | None = None) -> Transition:
    """What ``call`` does to an optimizer in ``state``: the most specific entry (with ``fact``) first."""
    if fact is not None and (state, call, fact) in OPTIMIZER_TRANSITIONS:
        return OPTIMIZER_TRANSITIONS[(state, call, fact)]
    return OPTIMIZER_TRANSITIONS.get((state, call))
