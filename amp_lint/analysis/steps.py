"""Training steps: each scope's events grouped into iterations, with helpers' events where they are called.

`training_steps` runs once the walk is done. An iteration (`TrainingStep`) is the innermost loop body
around a backward call, or a whole function body when the function is itself the step (a
`train_step()` helper). Before grouping, `with_helpers_inlined` puts the events of the file's helper
functions and methods at their calls, through their `function_summary.Summary` (parameters renamed to
the caller's arguments); a project index's summaries of other files' functions plug in at the same place
(`project_hooks.SUMMARIES`). `callee_scope` and `function_called` say which function a call calls.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Set

import libcst as cst

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope, TrainingStep
from amp_lint.analysis.function_summary import Summary, call_params
from amp_lint.analysis.names import dotted_name, plain_target_names
from amp_lint.analysis.project_hooks import SUMMARIES
from amp_lint.analysis.single_pass_loops import repeating, single_pass_loops
from amp_lint.analysis.syntax import Loop


def training_steps(model: FileModel) -> List[TrainingStep]:
    """Group each scope's events, helpers' events included where they are called, into iterations."""
    steps: List[TrainingStep] = []
    for scope in model.scopes:
        if not scope.events:
            continue
        events = with_helpers_inlined(model, scope, scope.events, depth=0, active={scope})
        anchors = [e for e in events if e.kind in (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD)]
        if not anchors:
            # A function that steps, unscales or updates but does not backpropagate (an `optimizer_step()`
            # or `unscale_gradients()` helper): one iteration per call (issue 26, principle 2).
            if any(e.kind in _PER_CALL_KINDS for e in events):
                loop = _loop_stepping_through_calls(model, events)
                if loop is not None:
                    steps.append(TrainingStep(scope, loop, [e for e in events if loop in e.loops]))
                    events = [e for e in events if loop not in e.loops]
                if any(e.kind in _PER_CALL_KINDS for e in events):
                    steps.append(TrainingStep(scope, None, events))
            continue
        loops: List[Optional[Loop]] = []
        seen: Set[int] = set()
        steppers = [e for e in events if e.kind in (EventKind.SCALER_STEP, EventKind.OPTIMIZER_STEP)]
        stepping_loops = {id(loop) for e in steppers for loop in e.loops}
        # A retry loop around the backward runs it once per call, not once per iteration (single_pass_loops).
        once = single_pass_loops(events, lambda e: _in_training_loop(model, e))
        for anchor in anchors:
            around = repeating(anchor.loops, once)
            loop = around[-1] if around else None
            # A micro-step loop (`for m in range(k): scaler.scale(loss).backward()`) inside the loop that
            # steps is part of that loop's iteration (miles-credit PR #141).
            if loop is not None and steppers and id(loop) not in stepping_loops:
                outer = [l for l in around[:-1] if id(l) in stepping_loops]
                if outer:
                    loop = outer[-1]
            if id(loop) not in seen:
                seen.add(id(loop))
                loops.append(loop)
        # A loop nested in another anchor loop belongs to the outer iteration only if it holds no backward itself.
        # (By identity, and each loop's events found in one pass: a function of N loops costs N, not N * N.)
        anchor_loops = {id(loop) for loop in loops if loop is not None}
        inside: Dict[int, List[Event]] = {}
        for event in events:
            for around_event in event.loops:
                if id(around_event) in anchor_loops:
                    inside.setdefault(id(around_event), []).append(event)
        for loop in loops:
            if loop is None:
                members = [e for e in events if not any(id(l) in anchor_loops for l in e.loops)]
                if not scope.is_function:
                    members = [e for e in members if not e.loops]
                steps.append(TrainingStep(scope, None, members))
            else:
                members = [
                    e
                    for e in inside.get(id(loop), ())
                    if not any(id(l) in anchor_loops for l in e.loops[_position(e.loops, loop) + 1 :])
                ]
                steps.append(TrainingStep(scope, loop, members))
    return steps


def _loop_stepping_through_calls(model: FileModel, events: List[Event]) -> Optional[Loop]:
    """A loop of a function with no backward of its own that calls, on every pass, a helper stepping the
    scaler once per call (`_train_batch()`: its retry loop and its loop over optimizers run once per call):
    the loop repeats the step, so its body is the iteration (issue 26, principle 2), as a loop around a
    backward is. The innermost such loop that repeats (`single_pass_loops`: not a retry loop, not a loop
    over optimizers) and does not itself bind the optimizer the step takes (`for opt in opts:
    self.step_one(opt)` steps each optimizer once); None when there is none, or when steps through
    calls sit in different loops."""
    may_train = lambda e: _in_training_loop(model, e)  # noqa: E731
    through_calls = [e for e in events if e.kind is EventKind.SCALER_STEP and e.via is not None]
    if not through_calls:
        return None
    once = single_pass_loops(events, may_train)
    found: List[Loop] = []
    for event in through_calls:
        loops = repeating(event.trail()[0].loops, once)
        if not loops:
            return None
        if loops[-1] not in found:
            found.append(loops[-1])
    if len(found) != 1:
        return None
    loop = found[0]
    bound = _names_bound_in(loop)
    for event in events:
        if loop in event.loops and event.kind in (EventKind.SCALER_STEP, EventKind.OPTIMIZER_STEP):
            optimizer = event.target if event.kind is EventKind.SCALER_STEP else event.receiver
            if optimizer is None or optimizer.split(".")[0] in bound:
                return None
    return loop


def _names_bound_in(loop: Loop) -> set:
    """Names the loop (its target and its body, not nested functions) binds."""
    bound = set()

    class _Binder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            pass

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            bound.update(plain_target_names(node.target))

        def visit_For(self, node: cst.For) -> None:
            bound.update(plain_target_names(node.target))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            bound.update(plain_target_names(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            bound.update(plain_target_names(node.target))

        def visit_AsName(self, node: cst.AsName) -> None:
            bound.update(plain_target_names(node.name))

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            bound.update(plain_target_names(node.target))

    loop.visit(_Binder())
    return bound


# A function running one of these with no backward of its own is one iteration per call.
_PER_CALL_KINDS = frozenset(
    {EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE, EventKind.OPTIMIZER_STEP}
)

_MAX_INLINE_DEPTH = 3
# A helper whose loop runs these is a training loop, not a step part; a loop over the parameters that
# only reads or clips their gradients (a grad-norm helper) is part of the caller's step (issue 26,
# principle 3: a project helper that reads gradients is a gradient read where it is called).
_TRAINING_LOOP = frozenset(
    {
        EventKind.BACKWARD,
        EventKind.AUTOGRAD_GRAD,
        EventKind.SCALER_STEP,
        EventKind.SCALER_UPDATE,
        EventKind.SCALER_UNSCALE,
        EventKind.OPTIMIZER_STEP,
        EventKind.ZERO_GRAD,
        EventKind.SCALER_SCALE,
    }
)


def _in_training_loop(model: FileModel, event: Event) -> bool:
    """Is the event one that makes its loop a training loop (a call counts when it calls a function of
    this file, or one a project index follows: `float(...)`, `log(...)` do not)?"""
    if event.kind is EventKind.CALL:
        return callee_scope(model, event) is not None or "." in (event.target or "")
    return event.kind in _TRAINING_LOOP


def with_helpers_inlined(model: FileModel, scope: Scope, events: List[Event], depth: int, active: set) -> List[Event]:
    """Put the events of helper functions and methods (of this file) where the iteration calls them.

    Each callee's effect is its `Summary` (`amp_lint.analysis.function_summary`): its events, helpers of its
    own included, applied at the call with its parameters renamed to the caller's arguments.
    `self.backward(loss)` then `self.optimizer_step()` become one iteration with the helpers' backward,
    step and update in it. A helper that runs a loop of its own is a training loop, not a step part, and
    is not inlined (a retry loop or a loop over optimizers is not one: `runs_a_loop_of_its_own`); recursion
    is cut off.
    """
    out: List[Event] = []
    for event in events:
        out.append(event)
        if event.kind is not EventKind.CALL or depth >= _MAX_INLINE_DEPTH:
            continue
        callee = callee_scope(model, event)
        summary: Optional[Summary] = None
        if callee is not None:
            may_train = lambda e: _in_training_loop(model, e)  # noqa: E731
            if callee in active or runs_a_loop_of_its_own(callee.events, may_train):
                continue
            inner = with_helpers_inlined(model, callee, callee.events, depth + 1, active | {callee})
            inner = once_per_call(inner, single_pass_loops(callee.events, may_train))
            summary = Summary(scope=callee, events=tuple(inner), params=tuple(call_params(callee)))
        else:
            for provider in SUMMARIES:  # functions of other files, from a project index
                summary = provider(model, event)
                if summary is not None:
                    break
        if summary is not None:
            out.extend(summary.applied_at(event, depth, _rebased))
    return out


def runs_a_loop_of_its_own(events: Sequence[Event], counts: Callable[[Event], bool]) -> bool:
    """Does a function (its `events`) run a loop of its own: a loop holding an event that `counts` (one that
    may train)? Its retry loops and loops over optimizers (`analysis.single_pass_loops`) run once per call:
    not loops of its own (issue 26, principle 2)."""
    candidates = [e for e in events if e.loops and counts(e)]
    if not candidates:
        return False
    once = single_pass_loops(events, counts)
    return any(repeating(e.loops, once) for e in candidates)


def once_per_call(events: List[Event], once) -> List[Event]:
    """A callee's events as one call runs them: the loops in `once` (its retry loops and loops over
    optimizers, `single_pass_loops`) run once per call, so they are no loop of the caller's iteration."""
    if not once:
        return events
    out = []
    for event in events:
        loops = repeating(event.loops, once)
        out.append(event if len(loops) == len(event.loops) else dataclasses.replace(event, loops=loops))
    return out


def _rebased(via: Event, outer: Event) -> Event:
    """Chain an inner call path under the outer call."""
    if via.via is None:
        return dataclasses.replace(via, via=outer)
    return dataclasses.replace(via, via=_rebased(via.via, outer))


def callee_scope(model: FileModel, call: Event) -> Optional[Scope]:
    """The function or method of this file that a CALL event calls, when that is unambiguous."""
    return function_called(model, call.target or "", call.scope)


def function_called(model: FileModel, target: str, scope: Scope) -> Optional[Scope]:
    """The function or method of this file that a call of `target` (as written) made in `scope` calls,
    when that is unambiguous."""
    if target.startswith("self."):
        name = target[len("self.") :]
        candidates = [
            s
            for s in model.function_scopes_named(name)
            if s.is_function
            and s.node.name.value == name
            and scope.class_name is not None
            and s.class_name == scope.class_name
            and s.parent is not None
            and not s.parent.is_function
        ]
    elif target and "." not in target:
        visible = set(scope.chain())
        candidates = [
            s
            for s in model.function_scopes_named(target)
            if s.is_function
            and s.node.name.value == target
            and s.parent in visible
            and (s.parent.is_function or s.class_name is None)
        ]
    else:
        return None
    return candidates[0] if len(candidates) == 1 else None


def handed_on(model: FileModel, site) -> Set[str]:
    """The dotted names a call site hands to its callee as arguments (`self.optimizers.step_all(self.grad_scaler)`)
    when that callee may step a scaler: one this file does not show (issue 26, principle 3: what a call the
    analysis cannot see into does is unknown), or a function of this file that steps or unscales. A function
    of this file that does neither is read, not guessed."""
    handed = {dotted_name(arg.value) for arg in site.call.args} - {None}
    if not handed:
        return set()
    callee = function_called(model, site.func, site.scope) if site.func else None
    if callee is not None and not any(e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE) for e in callee.events):
        return set()
    return handed


def _position(loops: Sequence[Loop], loop: Loop) -> int:
    return next(i for i, around in enumerate(loops) if around is loop)
