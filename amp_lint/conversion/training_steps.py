"""Finding the training steps to convert: each fp32 iteration, its backwards and its optimizer steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Set

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope, TrainingStep
from amp_lint.analysis.syntax import code_of

BACKWARD_KINDS = (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD)
# --- the iterations to convert ------------------------------------------------------------------------


@dataclass(eq=False)
class Iteration:
    step: TrainingStep
    backwards: List[Event]  # unscaled, in source order
    optimizer_steps: List[Event]

    @property
    def scope(self) -> Scope:
        return self.step.scope

    @property
    def is_step_function(self) -> bool:
        return self.step.loop is None and self.scope.is_function


def own_events(step: TrainingStep, *kinds: EventKind) -> List[Event]:
    """The step's events of these kinds written in its own scope (not those of helpers it calls)."""
    return [e for e in step.of(*kinds) if e.scope is step.scope and getattr(e, "via", None) is None]


def find_iterations(model: FileModel) -> List[Iteration]:
    found: List[Iteration] = []
    seen: Set[int] = set()
    for step in model.steps:
        backwards = [e for e in own_events(step, *BACKWARD_KINDS) if e.scaled_by is None]
        if not backwards or id(backwards[0].call) in seen:
            continue
        if not own_events(step, EventKind.OPTIMIZER_STEP) and step.loop is not None:
            step = widen_to_stepping_loop(step, backwards[0]) or step
        for event in backwards:
            seen.add(id(event.call))
        found.append(Iteration(step, backwards, own_events(step, EventKind.OPTIMIZER_STEP)))
    return found


def widen_to_stepping_loop(step: TrainingStep, backward: Event) -> Optional[TrainingStep]:
    """Backward in an inner loop (micro-batches), step in an outer one: the outer loop is the iteration."""
    scope = step.scope
    for loop in reversed(backward.loops[:-1]):
        events = [e for e in scope.events if loop in e.loops]
        if any(e.kind is EventKind.OPTIMIZER_STEP for e in events):
            return TrainingStep(scope, loop, events)
    return None


def amp_in_reach(model: FileModel, scope: Scope) -> bool:
    if model.has_scaler_in_reach(scope):
        return True
    return any(outer.regions for outer in scope.chain())


def is_function_form(backward: Event) -> bool:
    """`torch.autograd.backward(loss)` rather than `loss.backward()`."""
    qualified = backward.scope.names.qualify(backward.call.func)
    return qualified is not None and qualified.startswith("torch.autograd")


def short_code(event: Event) -> str:
    text = code_of(event.call)
    return text if len(text) <= 60 else text[:57] + "..."


