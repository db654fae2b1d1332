"""What an order rule asks: the places where an iteration breaks the GradScaler protocol.

The protocol is the table (`protocol`), run over an iteration's paths by its engine (`typestate`); the
questions below are the order rules' predicates over it and over the paths (`scaler_flow`), answered here
once, so that every rule (and anything else: the fix check, the server) asks the same thing. Each answer
is a `Breach`: which condition (`kind`), at which event, the events that make it so (the earlier call
that left the state, the later call it breaks), and whether it is proved or rests on a condition.
A rule turns a breach into its message and fix (`rules._helpers.OrderRule`: one message per predicate,
keyed by the breach's kind); it computes nothing of its own.

Every breach kind is an entry of the protocol's predicate table (`protocol.PREDICATES`, `Breach.predicate`):
"event E while the state is S", plus what the entry's `where` names beyond the state (a path on, a
micro-batch, the call's syntax). The state part is evaluated by one engine (`typestate.holds`,
`typestate.matching`, `typestate.violations_of`, and `typestate.proof_of`: on every state that reaches
the event, or on some); the rule lists its entries next to its docs.

The questions live by subject: `order_updates` (update() too early, twice, never), `order_unscale`
(unscale_ twice, after the step, left for the next call), `order_accumulation` (micro-batch
boundaries), `order_gradients` (zero_grad, closures, checkpoint state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

from amp_lint.analysis.protocol import PREDICATE_OF, Predicate
from amp_lint.analysis.scaler_flow import assumption_text

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.analysis.accumulation import Accumulation
    from amp_lint.analysis.events import Event
    from amp_lint.analysis.file_model import TrainingStep
    from amp_lint.analysis.paths import Proof
    from amp_lint.analysis.scaler_flow import StepFlow


@dataclass(frozen=True, eq=False)
class Breach:
    """One place where an iteration breaks (or, on an assumed path, may break) the protocol.

    `kind` names the condition (each query documents its kinds); `event` is where it happens; `cause` the
    earlier event whose state it breaks on (the unscale_ before a second one); `other` the later event it
    breaks (the first step after an early update); `last` the last of the related events (where a fix
    moves to); `related` the events the condition rests on; `proof` None or PROVED when proved, ASSUMED
    when a branch condition has to go one way.
    """

    kind: str
    event: "Event"  # (a `CallSite` for the questions asked of calls rather than events: AMP081's)
    step: Optional["TrainingStep"] = None
    scaler: Optional[str] = None
    flow: Optional["StepFlow"] = None
    cause: Optional["Event"] = None
    other: Optional["Event"] = None
    last: Optional["Event"] = None
    related: Tuple["Event", ...] = ()
    proof: Optional["Proof"] = None
    detail: str = ""
    node: Optional[object] = None  # the syntax the breach is about, when not the event's call
    accumulation: Optional["Accumulation"] = None  # the accumulation boundary it breaks
    assumed: Optional[str] = None  # what it rests on, when that is not a branch condition

    @property
    def assumption(self) -> Optional[str]:
        """What the breach rests on when it is not proved (a finding's `assumption`)."""
        return self.assumed or assumption_text(self.proof)

    @property
    def predicate(self) -> Predicate:
        """The order rule's predicate this breach is ("event E while the state is S", `protocol.PREDICATES`)."""
        return PREDICATE_OF[self.kind]

    @property
    def context(self) -> str:
        return (self.step or self.event).scope.name
