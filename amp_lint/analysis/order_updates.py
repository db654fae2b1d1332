"""The protocol's `update()` questions: an update that runs twice in an iteration (AMP023), before the
iteration's inf checks or between an `unscale_` and its step (AMP022), or never (AMP021).

Each query yields `order.Breach`es; see `order` for what a breach holds.
"""

from __future__ import annotations

import weakref
from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.analysis import protocol as P
from amp_lint.analysis import typestate
from amp_lint.analysis.accumulation import accumulation, target_names
from amp_lint.analysis.single_pass_loops import per_pass_names
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.iteration_limit import analysed_steps
from amp_lint.analysis.names import GRAD_SCALER, dotted_name
from amp_lint.analysis.steps import callee_scope, handed_on
from amp_lint.analysis.syntax import code_of, ifs_in, loop_counters, tests_any
from amp_lint.analysis.flow_queries import again_in_loop, first_of, last_of
from amp_lint.analysis.order import Breach
from amp_lint.analysis.paths import ASSUMED, PROVED, Proof
from amp_lint.analysis.scaler_flow import StepFlow, flow_of

# --- update() twice (AMP023) ------------------------------------------------------------------------
UPDATE_AGAIN = "update-again"  # another update() of the scaler can follow on a path of the iteration
UPDATE_PER_OPTIMIZER = "update-per-optimizer"  # inside an inner loop that also steps: once per pass


def updates_twice(model: FileModel) -> Iterator[Breach]:
    """The protocol's "update-twice": an update() after which the same iteration updates the scaler again
    (`last`: the last of those later updates), or an update() in an inner loop of the iteration that also
    steps the scaler and can run again on the loop's next pass (one update per optimizer).
    `update(new_scale)` sets the scale (icefall, matcha): not a second per-iteration update; but
    `update(x)` where `x` is None on a path the code shows is `update()` there (`_bare_update`)."""
    for step in analysed_steps(model):
        updates = [u for u in step.of(EventKind.SCALER_UPDATE) if _bare_update(model, u, step)]
        flow = flow_of(model, step) if updates else None
        for update in updates:
            scaler = update.receiver
            if not model.scaler_enabled(scaler, step.scope):
                continue
            later, proof = typestate.follows(flow, update, P.RESETS_SCALER, scaler, among=updates)
            later = _next_rounds_left_out(flow, step, update, scaler, later)
            later = _complete_cycles_left_out(flow, step, update, scaler, later)
            if later:
                yield Breach(
                    UPDATE_AGAIN, update, step, scaler, flow, last=last_of(flow, later), related=tuple(later), proof=proof
                )
                continue
            again = _again_in_inner_loop_with_step(flow, update)
            if again is not None:
                yield Breach(UPDATE_PER_OPTIMIZER, update, step, scaler, flow, proof=again)


def _next_rounds_left_out(flow: StepFlow, step: TrainingStep, update: Event, scaler: str, later: List[Event]) -> List[Event]:
    """An iteration steps each optimizer once: a later update whose path from `update` steps an optimizer
    that was stepped before `update` closes the next round, not this one (mmf's tests run
    `_do_a_fp16_pass()`, backward, step, update, twice in a row). A GAN's phases step different
    optimizers, each with its update: one iteration that updates twice (the catalog: still fire)."""
    steps = step.scaler_events(scaler, EventKind.SCALER_STEP)
    before = {s.target for s in steps if s.target is not None and flow.path(s, update) is not None}
    if not later or not before:
        return later

    def next_round(other: Event) -> bool:
        return any(s.target in before and flow.path(update, s) is not None and flow.path(s, other) is not None for s in steps)

    return [other for other in later if not next_round(other)]


def _complete_cycles_left_out(flow: StepFlow, step: TrainingStep, update: Event, scaler: str, later: List[Event]) -> List[Event]:
    """Issue 46, two complete cycles per iteration: `scale -> backward -> step(opt_a) -> update`, then the same
    for `opt_b` (weights, then architecture parameters; a GAN's two phases). A later update is legal when
    every step of this scaler between the two updates steps gradients of a scaled backward that runs after
    the first update: those gradients are scaled and unscaled with the same scale."""
    steps = step.scaler_events(scaler, EventKind.SCALER_STEP)
    backwards = [b for b in step.of(EventKind.BACKWARD) if b.scaled_by == scaler]
    if not later or not backwards:
        return later

    def fresh_cycle(other: Event) -> bool:
        between = [s for s in steps if flow.path(update, s) is not None and flow.path(s, other) is not None]
        return bool(between) and all(
            any(flow.path(update, b) is not None and flow.path(b, stepped) is not None for b in backwards)
            for stepped in between
        )

    return [other for other in later if not fresh_cycle(other)]


def _bare_update(model: FileModel, update: Event, step: TrainingStep) -> bool:
    """`update()`, or `update(x)` where `x` is `None` on some path the code shows (torch's `update(new_scale)`
    with `new_scale=None` consumes the inf checks like `update()`, and asserts when there are none): `None`
    itself, or a name / `self.x` that its function (its class, for `self.x`) assigns `None` to
    (mmengine's `self._scale_update_param`, None unless a static loss scale is configured)."""
    args = update.call.args
    if not args:
        return True
    if len(args) != 1 or args[0].star or (args[0].keyword is not None and args[0].keyword.value != "new_scale"):
        return False
    value = args[0].value
    if isinstance(value, cst.Name) and value.value == "None":
        return True
    text = dotted_name(value)
    if text is None or text.count(".") > 1 or (text.count(".") == 1 and not text.startswith("self.")):
        return False
    return any(
        site.target == text
        and isinstance(site.value, cst.Name)
        and site.value.value == "None"
        and (site.scope is step.scope or (text.startswith("self.") and site.scope.class_name == step.scope.class_name))
        for site in model.assignment_sites
    )


def _again_in_inner_loop_with_step(flow: StepFlow, update: Event) -> Optional[Proof]:
    """The innermost loop inside the iteration around `update` that also steps this scaler: can the
    update run again on that loop's next pass (no `break` or `return` right after it)?"""
    step = flow.step
    if step.loop is None and not step.of(EventKind.BACKWARD):
        return None  # no backward here: the iteration's own loop is unknown
    inner = update.loops[update.loops.index(step.loop) + 1 :] if step.loop in update.loops else update.loops
    if not inner:
        return None
    loop = inner[-1]
    if not any(e.kind is EventKind.SCALER_STEP and e.receiver == update.receiver and loop in e.loops for e in step.events):
        return None
    return again_in_loop(flow, update, loop)


# --- update() before the iteration's inf checks (AMP022) ---------------------------------------------
RESETS_UNSCALED = "update-resets-unscaled"  # unscale_(); update(); step(): the step divides again
BREAKS_EVERY_PATH = "update-breaks-every-path"  # no inf checks on one path, an unscaled optimizer on the others
CHECKS_ONLY_ON_SOME_PATHS = "update-checks-on-some-paths"  # the step/unscale_ before it only under a branch
BEFORE_STEP = "update-before-step"  # no step/unscale_ before it, a step after it
NEVER_STEPPED = "update-never-stepped"  # a scaler this file builds and never steps

_INF_CHECKS = (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE)


def updates_before_inf_checks(model: FileModel) -> Iterator[Breach]:
    """The protocol's "update-without-inf-checks", and "unscaled-twice" caused by an update:

    - RESETS_UNSCALED: `unscale_(); update(); step()` (`update(new_scale)` too: it needs no inf checks but
      still resets every optimizer); `other` the step that divides again, `last` the last step after it.
    - BREAKS_EVERY_PATH: whichever way the branches go, the update is wrong (`_breaks_on_every_path`);
      `other`/`last`: the first/last step after it.
    - CHECKS_ONLY_ON_SOME_PATHS: inf checks run before the update only on some paths (`related`: those
      checks, `last` the last of them); ASSUMED when no path is proved to skip them all.
    - BEFORE_STEP: no check before it, a step after it (`other`/`last`: first/last such step).
    - NEVER_STEPPED: nothing in the file steps or unscales the scaler, nor hands it to a call, and this
      file builds and keeps it.
    """
    stepped_anywhere = {e.receiver for e in model.events if e.kind in _INF_CHECKS}
    handed_on: List[set] = []  # asked once, and only for a scaler that nothing here steps
    for step in analysed_steps(model):
        for update in step.of(EventKind.SCALER_UPDATE):
            scaler = update.receiver
            if not model.scaler_enabled(scaler, step.scope):
                continue
            flow = flow_of(model, step)
            if update.call.args:
                yield from _between_unscale_and_step(flow, update, scaler)
                continue
            checks = [e for e in step.of(*_INF_CHECKS) if e.receiver == scaler]
            earlier = [e for e in checks if flow.path(e, update) is not None]
            if earlier:
                # A path of the iteration that reaches the update with no step/unscale_ before it. Two
                # optimizers under two flags and one update (DLRM) need both flags false: an
                # assumption, not a proof; the same `if scaler is not None` around both: no path.
                uncovered = flow.from_start(update, checks, _loops_stepping_each(flow, update, checks))
                if uncovered is None:
                    yield from _between_unscale_and_step(flow, update, scaler)
                    continue
                broken = uncovered is not PROVED and _breaks_on_every_path(flow, update, scaler)
                later, _ = typestate.follows(flow, update, (P.STEP,), scaler, proved=True)
                if broken and later:
                    first, last = first_of(flow, later), last_of(flow, later)
                    yield Breach(BREAKS_EVERY_PATH, update, step, scaler, flow, other=first, last=last, related=tuple(later))
                    continue
                yield Breach(
                    CHECKS_ONLY_ON_SOME_PATHS, update, step, scaler, flow,
                    last=last_of(flow, earlier), related=tuple(earlier), proof=uncovered,
                )
                continue
            later, proof = typestate.follows(flow, update, (P.STEP,), scaler)
            if later:
                first, last = first_of(flow, later), last_of(flow, later)
                yield Breach(BEFORE_STEP, update, step, scaler, flow, other=first, last=last, related=tuple(later), proof=proof)
            elif scaler not in stepped_anywhere and _owned_by_file(model, scaler, step):
                if not handed_on:
                    handed_on.append(_handed_on(model))
                if scaler not in handed_on[0]:
                    yield Breach(NEVER_STEPPED, update, step, scaler, flow)


def _loops_stepping_each(flow: StepFlow, update: Event, checks: List[Event]) -> List[int]:
    """The headers of the loops of the iteration that step each optimizer they go over (`for opt in optimizers:
    scaler.step(opt)`, the step on every pass) and that do not hold `update`: such a loop is a step, and the path
    on which it runs no times is no path without inf checks (issue 44, PyTorch's multi-optimizer example)."""
    graph = flow.flow.graph
    headers: List[int] = []
    for check in checks:
        if check.kind is not EventKind.SCALER_STEP or not check.loops or check.target is None:
            continue
        loop = check.loops[-1]
        if loop is flow.step.loop or loop in update.loops or not isinstance(loop, cst.For):
            continue
        if check.target not in target_names(loop.target) or id(loop) not in graph.loop_body:
            continue
        node, body, latch = flow.node(check), graph.loop_body[id(loop)], graph.loop_latch[id(loop)]
        if node is None:
            continue
        if node != body and flow.flow.paths.query(body, latch, [node]) is not None:
            continue  # a pass that skips the step (`if opt is None: continue`)
        headers.append(graph.loop_header[id(loop)])
    return headers


def _breaks_on_every_path(flow: StepFlow, update: Event, scaler: str) -> bool:
    """Issue 26, principle 1: whichever way the branches go, this `update()` is wrong. On every protocol
    state that reaches it, either no inf checks were recorded ("update-without-inf-checks") or an optimizer
    of the scaler is still UNSCALED (not stepped) and a `scaler.step` of it follows the update whatever
    the conditions (it then unscales the gradients a second time, "unscaled-twice"):
    `if clip: unscale_(); clip()` then `update(); step()`."""
    states = typestate.run(flow).before.get(id(update))
    if not states:
        return False
    later, _ = typestate.follows(flow, update, (P.STEP,), scaler, proved=True)
    for state in states:
        if typestate.proof_of([state], scaler, None, BREAKS_EVERY_PATH):
            continue  # no inf checks recorded: the update raises
        unscaled = state.optimizers(scaler, P.UNSCALED)
        if not unscaled or state.optimizers(scaler, P.STEPPED):
            return False
        if not any(typestate.optimizer_key(e) in unscaled for e in later):
            return False
    return True


def _between_unscale_and_step(flow: StepFlow, update: Event, scaler: str) -> Iterator[Breach]:
    """`unscale_(); update(); step()`: the protocol's "unscaled-twice" at a step, caused by this update
    (the step finds the optimizer READY again and divides the unscaled gradients a second time; the
    next iteration's `unscale_()` then meets a STEPPED optimizer)."""
    steps = flow.step.of(EventKind.SCALER_STEP)
    hit = [e for e in steps if any(v.cause is update for v in typestate.violations_of(flow, e, RESETS_UNSCALED))]
    if not hit:
        return
    proof = flow.path(update, hit[0])
    if proof is None:
        return
    last = last_of(flow, typestate.follows(flow, update, (P.STEP,), scaler)[0])
    yield Breach(RESETS_UNSCALED, update, flow.step, scaler, flow, other=hit[0], last=last, proof=proof)


def _handed_on(model: FileModel) -> set:
    """The names handed on to a call that may step them (`steps.handed_on`), anywhere in the file."""
    names: set = set()
    for site in model.call_sites:
        names |= handed_on(model, site)
    return names


def _owned_by_file(model: FileModel, scaler: str, step: TrainingStep) -> bool:
    """Only claim "never stepped" for a scaler this file builds (a parameter may be stepped by a caller) and
    keeps itself: one stored on another object (`self.learn.scaler = GradScaler()`, fastai's callback) may be
    stepped by whatever holds that object (issue 26, principle 3)."""
    if scaler.count(".") > 1 or (scaler.count(".") == 1 and not scaler.startswith("self.")):
        return False
    return any(b.call is not None for b in model.scaler_bindings(scaler, step.scope))


# --- update() never (AMP021) -------------------------------------------------------------------------
MISSING_UPDATE = "update-missing"  # the iteration steps the scaler and nothing updates it (`detail`: where)
NEVER_UPDATED_IN_PROJECT = "update-never-in-project"  # a per-call step of a class-built scaler nothing updates
UPDATE_SKIPPED = "update-skipped"  # a path from the step to the next iteration's step skips every update


def missing_updates(model: FileModel) -> Iterator[Breach]:
    """Scalers an iteration steps and never updates, so that the next `step()` meets a STEPPED optimizer
    (the protocol's "step-twice"); `related`: the scaler's steps in the iteration, `last` the last one.

    - MISSING_UPDATE: a loop (`detail` "in this loop") or a function that no other part of the file
      completes (`detail` "anywhere in this file").
    - NEVER_UPDATED_IN_PROJECT: open world (issue 26, principle 3): a function that steps through the
      scaler but does not backpropagate is one part of its caller's iteration, and `update()` is the
      caller's to supply; unless nothing can: the class builds the scaler and runs its scaled backward in a
      sibling method, and no file of the project updates it or hands it on.
    A call that gets the scaler, or a function of this file that updates it, may be the update, unless
    nothing in the project updates the scaler.
    """
    for step in analysed_steps(model):
        for scaler in _scalers_stepped(step):
            if not model.scaler_enabled(scaler, step.scope):
                continue
            steps = step.scaler_events(scaler, EventKind.SCALER_STEP)
            updates = step.scaler_events(scaler, EventKind.SCALER_UPDATE)
            if updates:
                yield from _updates_skipped(model, step, scaler, steps, updates)
                continue
            if step.loop is not None and _each_pass_another_optimizer(step, steps):
                continue  # `for model, opt in zip(models, opts): ...; scaler.step(opt)`: the enclosing code updates
            if _helper_may_update(model, step, scaler) and not _nothing_in_project_updates(model, step, scaler):
                continue  # a call gets the scaler (or its holder), unless nothing in the project updates it
            if step.loop is None and not _runs_scaled_backward(step, scaler):
                # A caller in this file gets the helper's events inlined and is judged there; a public
                # method's callers are not seen.
                if _never_updated_in_project(model, step, scaler):
                    yield Breach(NEVER_UPDATED_IN_PROJECT, steps[-1], step, scaler, last=steps[-1], related=tuple(steps))
                continue
            if step.loop is None and _updates_elsewhere(model, step, scaler):
                continue  # the function is one part of a step whose update lives elsewhere
            where = "in this loop" if step.loop is not None else "anywhere in this file"
            yield Breach(MISSING_UPDATE, steps[-1], step, scaler, last=steps[-1], related=tuple(steps), detail=where)


def _each_pass_another_optimizer(step: TrainingStep, steps: List[Event]) -> bool:
    """Each pass of the step's loop steps the optimizer it binds afresh (`for opt in optimizers`, `for model,
    opt in zip(models, opts)`): "step() twice without update()" is per optimizer, so the passes are one
    iteration's optimizers, and the update is for the code around the loop, which runs one after it (issue
    26, principle 1)."""
    if not isinstance(step.loop, cst.For):
        return False
    scaler = steps[0].receiver
    if not any(u.receiver == scaler and step.loop not in u.loops for u in step.scope.events if u.kind is EventKind.SCALER_UPDATE):
        return False  # nothing around the loop updates: the loop is all there is to ask
    names = per_pass_names(step.loop)
    return bool(names) and all(e.target in names for e in steps)


def _updates_skipped(model: FileModel, step: TrainingStep, scaler: str, steps: List[Event], updates) -> Iterator[Breach]:
    """UPDATE_SKIPPED: the iteration updates the scaler, but a path from one of its steps reaches the end of
    the iteration with no update, and the next iteration reaches that step again with none: the protocol's
    end state leaves the optimizer STEPPED, so the next step raises "step-twice" (espnet's `if not
    isfinite(grad_norm): scaler.step(opt)` branch written without its `update()`). Loops only: a function's
    caller may update between calls. A call that is handed the scaler (or its holder) may update it."""
    if step.loop is None or any(e.in_helper for e in steps):
        return
    flow = flow_of(model, step)
    avoid = list(updates) + _calls_given(step, scaler)
    acc = accumulation(model, step)
    for scaler_step in steps:
        if acc is not None and acc.every_micro_batch(scaler_step) is not None:
            continue  # a step on every micro-batch of an accumulation loop is AMP040's
        proof = flow.next_iteration(scaler_step, scaler_step, avoid)
        if proof is PROVED and _alternates(step, scaler_step, updates):
            proof = ASSUMED  # `if i % 2: scaler.step(opt_d) else: scaler.step(opt_g); scaler.update()`
        if proof is not None:
            yield Breach(UPDATE_SKIPPED, scaler_step, step, scaler, flow, last=scaler_step, related=(scaler_step,), proof=proof)
            return


def _alternates(step: TrainingStep, event: Event, updates) -> bool:
    """The path that skips the update is decided by a test of what the loop advances every pass, and an
    update sits under such a test that `event` is not under: the passes may alternate (a GAN stepping its
    discriminator on odd iterations and its generator, then the update, on even ones), so the next pass
    need not take the same way."""
    counters = loop_counters(step.loop)
    inside = ifs_in(step.loop)

    def counter_tests(e: Event):
        return {(id(b.node), b.taken) for b in e.branches if id(b.node) in inside and tests_any(b.node.test, counters)}

    own = counter_tests(event)
    return bool(own) and any(counter_tests(u) - own for u in updates)


def _calls_given(step: TrainingStep, scaler: str) -> List[Event]:
    """The iteration's calls, not followed by the analysis, that are handed the scaler or its holder."""
    return [e for e in step.of(EventKind.CALL) if not any(i.via is e for i in step.events) and _hands_the_scaler(e, scaler)]


def _hands_the_scaler(call: Event, scaler: str) -> bool:
    """An argument of the call is the scaler (`finish(scaler)`) or what holds it (`hook(self)`)."""
    names = (dotted_name(arg.value) for arg in call.call.args)
    return any(name is not None and (name == scaler or scaler.startswith(name + ".")) for name in names)


def _nothing_in_project_updates(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    """Issue 26, principle 3: `self.<scaler>` built by this class, and no file of the project updates the
    attribute, hands it on (an argument, an alias, a return value) or names it in a string: a callback
    given `self` cannot update it either."""
    parts = scaler.split(".")
    if len(parts) != 2 or parts[0] != "self" or step.scope.class_name is None:
        return False
    if _updates_elsewhere(model, step, scaler):
        return False
    built = [b for b in model.scaler_bindings(scaler, step.scope) if b.call is not None]
    # Built by a `GradScaler(...)` call: what the result cache's key follows (`callers.scaler_attributes`).
    # (or through a local alias of the class, `scaler_type = GradScaler; scaler_type()`: its qualified name)
    if built and all(
        code_of(b.call.func).split(".")[-1].endswith("GradScaler") or b.qualified_name in GRAD_SCALER for b in built
    ):
        from amp_lint.analysis.summaries import attribute_kept_in_project

        if attribute_kept_in_project(model, parts[1]) is True:
            return True
    return _package_drives_alone(model, parts[1], step)


def _package_drives_alone(model: FileModel, attribute: str, step: TrainingStep) -> bool:
    """The data-flow proof (`scaler_reach`): the package builds the scaler and nothing it reaches can update it."""
    from amp_lint.analysis.scaler_reach import package_drives_alone_for

    return package_drives_alone_for(model, attribute, step.scope.class_name)


def _never_updated_in_project(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    """A protocol object (issue 26, principles 2 and 3): its scaled backward in a sibling method, its step
    here, and nothing in the project that updates its scaler (`_nothing_in_project_updates`)."""
    class_name = step.scope.class_name
    if not any(
        e.kind is EventKind.BACKWARD and e.scaled_by == scaler and e.scope.class_name == class_name and e.scope is not step.scope
        for e in model.events
    ):
        # No scaled backward beside it: the step is still a second step() without update() on the next
        # call when the package is proved to be the scaler's only driver (`scaler_reach`).
        parts = scaler.split(".")
        return (
            len(parts) == 2 and parts[0] == "self" and step.scope.class_name is not None
            and not _updates_elsewhere(model, step, scaler) and _package_drives_alone(model, parts[1], step)
        )
    return _nothing_in_project_updates(model, step, scaler)


def _runs_scaled_backward(step: TrainingStep, scaler: str) -> bool:
    return any(e.scaled_by == scaler for e in step.of(EventKind.BACKWARD))


def _scalers_stepped(step: TrainingStep) -> List[str]:
    return list(dict.fromkeys(event.receiver for event in step.of(EventKind.SCALER_STEP)))


def _updates_elsewhere(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    for event in _scaler_updates(model):  # not all of `model.events` once per step: linear in the file
        if event.receiver == scaler and event not in step.events:
            if scaler.startswith("self.") and event.scope.class_name != step.scope.class_name:
                continue
            return True
        # Another method of the same object updates a scaler it reaches through an attribute
        # (fastai's callback: `self.scaler.step(self)` in before_step, `self.learn.scaler.update()` in
        # after_step): the order of the two calls is the framework's, not shown here.
        if (
            scaler.startswith("self.")
            and event.receiver is not None
            and event.receiver.startswith("self.")
            and event.scope.class_name == step.scope.class_name
            and event.receiver.split(".")[-1] == scaler.split(".")[-1]
        ):
            return True
    return False


_UPDATES: "weakref.WeakKeyDictionary[FileModel, List[Event]]" = weakref.WeakKeyDictionary()


def _scaler_updates(model: FileModel) -> List[Event]:
    updates = _UPDATES.get(model)
    if updates is None:
        updates = _UPDATES[model] = [e for e in model.events if e.kind is EventKind.SCALER_UPDATE]
    return updates


def _helper_may_update(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    """A call in the iteration that gets the scaler, or a function/method of this file that updates it."""
    for event in step.of(EventKind.CALL):
        if callee_scope(model, event) is not None and any(e.via is event for e in step.events):
            continue  # a helper of this file, inlined: its summary is in the iteration's events (no update)
        if _hands_the_scaler(event, scaler):
            return True
        callee = (event.target or "").split(".")[-1]
        for function in model.functions_named(callee):
            scope = model.scope_of(function)
            if scope is not None and any(
                e.kind is EventKind.SCALER_UPDATE for e in scope.events
            ):
                return True
    return False
