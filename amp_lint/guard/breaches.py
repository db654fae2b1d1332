"""What the guard says when the run breaks the protocol: the wording at a call site, not the protocol itself.

The GradScaler protocol (stages per optimizer, the gradients' scale, inf checks per scaler, the transitions and
the violation each one names, with the rule that reports it) is the static analysis' own table,
:mod:`amp_lint.analysis.protocol` (pure data: importing it imports neither torch nor LibCST). The guard's
monitor runs that table; this module only words its violations for a run, where the names come from the
source line of the call the guard saw instead of from the syntax tree. Each wording ends with the table's own
message (``{reason}``), and its rule is the table's (``VIOLATIONS[name][0]``).

The checks outside the table (the table has no row for them: they are about autocast, a scaler's lifetime, the
scale's value, or ``zero_grad`` between the backward and the step) are the guard's own breaches below, worded as
the static rules word theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from amp_lint.analysis import protocol as table


@dataclass(frozen=True)
class Breach:
    """A call the protocol forbids: the static rule's ID and its message, with ``{placeholders}`` for names.

    Placeholders: ``call`` (the source of the offending call), ``previous`` (the call it conflicts with),
    ``scaler`` (the scaler's name in the caller's code when it can be read, else ``scaler``), ``optimizer``,
    ``what`` (``clips`` or ``reads``, for a gradient access), ``where`` (what the run showed of the place).
    """

    rule: str
    message: str


#: How the guard words each violation of the table at the call it sees; ``{reason}`` is the table's message.
#: A second form for the first call of a new iteration (a scale() ran since the optimizer's last call): the
#: update the previous iteration needed is what is missing.
_AT_CALL: dict[str, str] = {
    "unscale-twice": "`{call}` runs again after `{previous}` with no `{scaler}.update()` between: {reason}",
    "unscale-after-step": "`{call}` runs after `{previous}` with no `{scaler}.update()` between: {reason}",
    "step-twice": "`{previous}` is never followed by `{scaler}.update()` {where}: {reason}",
    "update-without-inf-checks": "`{call}` runs before `{scaler}.step()`; update() must come after every step() of "
    "the iteration: {reason}",
    "update-twice": "`{call}` runs again later in the same iteration; update() once, after the last step(): {reason}",
    "unscaled-twice": "`{call}` runs before `{later}`; update() must come after every step() of the iteration: "
    "{reason}",
    "read-scaled": "`{call}` {what} gradients before `{scaler}.unscale_({optimizer})`: {reason}",
}
_NEW_ITERATION: dict[str, str] = {
    "unscale-twice": "`{previous}` is never followed by `{scaler}.update()` {where}; `{call}` of the next iteration "
    "then fails: {reason}",
    "unscale-after-step": "`{previous}` is never followed by `{scaler}.update()` {where}; `{call}` of the next "
    "iteration then fails: {reason}",
}


def of_violation(name: str, new_iteration: bool = False) -> Breach:
    """The guard's breach for the table's violation ``name`` (a key of ``analysis.protocol.VIOLATIONS``).

    ``new_iteration``: the call is the first on its optimizer since a new scale(), so the previous iteration
    ended with the optimizer unscaled or stepped and no update(): the end state the static rules report as the
    missing update, whatever the next call is (AMP021, the rule of the table's "step-twice"; AMP024 leaves that
    case to it), with the table's message for the call that fails."""
    rule, reason = table.VIOLATIONS[name]
    wording = (_NEW_ITERATION.get(name) if new_iteration else None) or _AT_CALL[name]
    if new_iteration and name in _NEW_ITERATION:
        rule = table.rule_of("step-twice")
    return Breach(rule, wording.replace("{reason}", reason.replace("{", "{{").replace("}", "}}")))


# --- checks outside the protocol table ----------------------------------------------------------------------

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

#: The checks outside the table.
OWN_BREACHES = (BACKWARD_IN_AUTOCAST, ZERO_GRAD_BEFORE_STEP, SCALER_REBUILT, SCALE_COLLAPSED)

#: The table's violations the guard reports. Not ``step-scaled`` (it would need a hook on every optimizer's own
#: ``step()``) nor ``unscaled-mixed`` (the guard cannot see every way gradients are cleared: ``model.zero_grad()``,
#: ``p.grad = None``; it takes a scaled backward after an update to start on cleared gradients).
SEEN_VIOLATIONS = tuple(_AT_CALL)

#: Every rule the guard can report, for documentation and tests.
RULES = tuple(sorted({table.rule_of(name) for name in SEEN_VIOLATIONS} | {breach.rule for breach in OWN_BREACHES}))
