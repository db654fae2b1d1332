"""The protocol's `unscale_()` questions (AMP024): an `unscale_` of an optimizer that is already UNSCALED
(a second `unscale_` with no `update()` between) or STEPPED (`unscale_` after the step), in this
iteration or, when a path skips the update, in the next one (or the next call of a per-call step
function). Each query yields `order.Breach`es; see `order`.
"""

from __future__ import annotations

import re
from typing import Iterator, List, Set

import libcst as cst

from amp_lint.analysis import protocol as P
from amp_lint.analysis import typestate
from amp_lint.analysis.accumulation import accumulation
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.iteration_limit import analysed_steps
from amp_lint.analysis.flow_queries import last_of
from amp_lint.analysis.names import plain_target_names
from amp_lint.analysis.order import Breach
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis.conditions import normalise
from amp_lint.analysis.syntax import code_of

UNSCALE_TWICE = "unscale-twice"  # `cause`: the earlier unscale_ of the optimizer, no update() between
UNSCALE_AFTER_STEP = "unscale-after-step"  # `cause`: the step; `related`: the unscale_/step before it
UNSCALE_NEXT_ITERATION = "unscale-next-iteration"  # a path skips the update: the next iteration's unscale_ raises


def unscales_twice(model: FileModel) -> Iterator[Breach]:
    """Each `unscale_(optimizer)` that meets its optimizer UNSCALED or STEPPED on some path (the protocol's
    "unscale-twice" / "unscale-after-step"; `proof`: the path from `cause` with no update between), or that
    a path from it to the end of the iteration leaves UNSCALED with no update (`detail`: "iteration" or
    "call"). An `unscale_` that asks the scaler's state first (allennlp) is not one. Each call once."""
    reported: Set[int] = set()
    yield from _twice_in_one_block(model, reported)
    for step in analysed_steps(model):
        for unscale in step.of(EventKind.SCALER_UNSCALE):
            if id(unscale.call) in reported or not unscale.call.args or _guarded_by_scaler_state(unscale, step):
                continue
            if _guarded_by_a_latch(model, step, unscale):
                continue
            scaler = unscale.receiver
            if not model.scaler_enabled(scaler, step.scope):
                continue
            flow = flow_of(model, step)
            earlier = _protocol_before(model, step, unscale, scaler)
            if not earlier:
                skipped = _next_iteration_without_update(model, step, unscale, scaler)
                if skipped is not None:
                    reported.add(id(unscale.call))
                    detail = "iteration" if step.loop is not None else "call"
                    yield Breach(UNSCALE_NEXT_ITERATION, unscale, step, scaler, flow, proof=skipped, detail=detail)
                continue
            previous = last_of(flow, earlier)
            updates = step.scaler_events(scaler, EventKind.SCALER_UPDATE)
            proof = flow.path(previous, unscale, updates)
            reported.add(id(unscale.call))
            kind = UNSCALE_TWICE if previous.kind is EventKind.SCALER_UNSCALE else UNSCALE_AFTER_STEP
            yield Breach(kind, unscale, step, scaler, flow, cause=previous, related=tuple(earlier), proof=proof)


def _protocol_before(model: FileModel, step: TrainingStep, unscale: Event, scaler: str) -> List[Event]:
    """The protocol's violations at `unscale` ("unscale-twice", "unscale-after-step"): the unscale_/step
    that left this optimizer UNSCALED or STEPPED on some path with no update() since (and, for a step,
    the unscale_ before it)."""
    flow = flow_of(model, step)
    found = typestate.violations_of(flow, unscale, UNSCALE_TWICE, UNSCALE_AFTER_STEP)
    causes = {id(v.cause): v.cause for v in found if v.cause is not None}
    previous = [e for e in causes.values() if _same_optimizer(step, e, unscale)]
    if not previous:
        return []
    last = last_of(flow, previous)
    if last.kind is EventKind.SCALER_STEP:
        before_step, _ = typestate.follows(flow, last, (P.UNSCALE,), scaler, typestate.optimizer_key(unscale), before=True)
        return [e for e in before_step if e is not unscale] + [last]
    return [last]


def _guarded_by_scaler_state(unscale: Event, step: TrainingStep) -> bool:
    """`if scaler._per_optimizer_states[id(opt)]["stage"] is not OptState.UNSCALED: scaler.unscale_(opt)`
    (allennlp's trainer): the code asks the scaler whether it already unscaled. The guard does not cover
    a second unscale_ of the same optimizer inside the same guarded block: the test ran before the first."""
    guards = [b.node for b in unscale.branches if _STATE_TEST.search(code_of(b.node.test))]
    if not guards:
        return False
    return not any(
        e.index < unscale.index
        and e.receiver == unscale.receiver
        and e.target == unscale.target
        and any(b.node is guards[-1] for b in e.branches)
        for e in step.of(EventKind.SCALER_UNSCALE)
    )


def _guarded_by_a_latch(model: FileModel, step: TrainingStep, unscale: Event) -> bool:
    """`if not unscaled: scaler.unscale_(opt); unscaled = True` (a flag the code keeps for itself, in a
    helper called twice or beside a logging branch that unscales first): the unscale_ runs only while the
    flag is false, and every other unscale_ of that optimizer sets it right after, in its own block (the
    same helper's unscale_ reached through another call is one of those). No two of them run without the
    code resetting the flag (issue 26, principle 4: values followed)."""
    flags = [normalise(b.node.test)[0] for b in unscale.branches if b.condition[1] is False]
    flags = [f for f in flags if re.fullmatch(r"[A-Za-z_][\w.]*", f)]
    if not flags:
        return False
    others = [
        e for e in step.of(EventKind.SCALER_UNSCALE)
        if e is not unscale and e.receiver == unscale.receiver and e.target == unscale.target
    ]
    return any(all(_sets_after(model, e, flag) for e in others) for flag in flags)


def _sets_after(model: FileModel, event: Event, flag: str) -> bool:
    """An assignment `flag = True` after the event's statement, in its block."""
    block = model.block_of(event.statement) or []
    position = {id(statement): i for i, statement in enumerate(block)}
    here = position.get(id(event.statement))
    return here is not None and any(
        site.target == flag and isinstance(site.value, cst.Name) and site.value.value == "True"
        and position.get(id(site.statement), -1) > here
        for site in model.assignment_sites
    )


_STATE_TEST = re.compile(r"_per_optimizer_states|OptState|\bstage\b")


def _next_iteration_without_update(model: FileModel, step: TrainingStep, unscale: Event, scaler: str):
    """A path from `unscale` to the end of the iteration that skips every update (`if not finite: continue`,
    LVSM PR #19, espnet #2362), so the next iteration's unscale_ finds the optimizer already unscaled."""
    updates = step.scaler_events(scaler, EventKind.SCALER_UPDATE)
    if not updates or unscale.in_helper:
        return None
    acc = accumulation(model, step)
    if acc is not None and acc.every_micro_batch(unscale) is not None:
        return None  # an unscale_ on every micro-batch of an accumulation loop is AMP041's
    if step.loop is None:
        return _next_call_without_update(model, step, unscale, scaler, updates)
    # An unscale_ in an inner `for opt in optimizers:` loop runs once per optimizer on each pass of it: the
    # question is the iteration's, from the unscale_ to the iteration's end and from its start to the
    # unscale_, each avoiding every update (the inner loop's own next pass is another optimizer).
    # A path through a step of that optimizer ends the iteration STEPPED, not UNSCALED: AMP021's.
    steps = [e for e in step.scaler_events(scaler, EventKind.SCALER_STEP) if e.target == unscale.target]
    flow = flow_of(model, step)
    return flow.next_iteration(unscale, unscale, list(updates) + steps)


def _next_call_without_update(model: FileModel, step: TrainingStep, unscale: Event, scaler: str, updates):
    """A per-call step function (issue 26, principle 2: one call is one iteration) that updates the scaler
    itself on one path and returns on another after `unscale_` with neither step nor update: the
    protocol's end state leaves the optimizer UNSCALED, and the next call's `unscale_` raises. Only when
    the function owns the update (its caller then does not update between calls) and the unscale_ is not
    in a loop of the function."""
    if not step.scope.is_function or unscale.loops or any(u.in_helper for u in updates):
        return None
    ends = typestate.run(flow_of(model, step)).end if unscale.target is not None else ()
    left = typestate.matching(ends, UNSCALE_NEXT_ITERATION, scaler, unscale.target)
    if not any(state.stage(scaler, unscale.target)[1] is unscale for state in left):
        return None
    flow = flow_of(model, step)
    steps = step.scaler_events(scaler, EventKind.SCALER_STEP)
    if not typestate.follows(flow, unscale, P.RESETS_SCALER, scaler)[0]:
        return None  # the function never updates after this unscale_: its caller completes it
    # Open world: a call the analysis could not follow may step or update (a callback, a hook).
    unknown = [e for e in step.of(EventKind.CALL) if not any(inner.via is e for inner in step.events)]
    return flow.to_end(unscale, list(updates) + list(steps) + unknown)


def _same_optimizer(step: TrainingStep, first: Event, second: Event) -> bool:
    """Do the two calls name one optimizer? Not when the name reads the variable of a loop inside the
    iteration that only one of them sits in (`for opt in optimizers:`, `optimizers[i]` under
    `for i in range(n):`: another optimizer on every pass)."""
    if not first.call.args:
        return True
    names = _names_in(first.call.args[0].value)

    def binders(event: Event):
        inner = event.loops[event.loops.index(step.loop) + 1 :] if step.loop in event.loops else event.loops
        return [id(loop) for loop in inner if isinstance(loop, cst.For) and names & plain_target_names(loop.target)]

    return binders(first) == binders(second)


def _names_in(expr: cst.BaseExpression) -> Set[str]:
    found: Set[str] = set()
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, cst.Attribute):
            todo.append(node.value)  # `self.optimizer` reads `self`, not a variable `optimizer`
        else:
            todo.extend(node.children)
    return found


def _twice_in_one_block(model: FileModel, reported: Set[int]) -> Iterator[Breach]:
    """Issue 26, principle 2 (per call): `unscale_(opt)` and again `unscale_(opt)` in one block of statements,
    nothing between them that could run `update()` (no call, no jump): the first leaves the optimizer
    UNSCALED (or raises), so the second raises whatever came before, in a function whose scaler calls
    no training step holds (an unscale_ after a micro-batch loop, then again before the step).
    UNSCALE_TWICE with no `step`: `cause` is the first call."""
    in_steps = {id(e.call) for step in model.steps for e in step.events}
    for scope in model.scopes:
        events = sorted((e for e in scope.events if not e.in_helper), key=lambda e: e.index)
        unscales = [e for e in events if e.kind is EventKind.SCALER_UNSCALE and id(e.call) not in in_steps]
        for first, second in zip(unscales, unscales[1:]):
            if id(second.call) in reported or first.receiver != second.receiver or first.target is None:
                continue
            if first.target != second.target or not model.scaler_enabled(first.receiver, scope):
                continue
            between = [e for e in events if first.index < e.index < second.index]
            if between or not _adjacent_in_one_block(model, first, second):
                continue
            reported.add(id(second.call))
            yield Breach(UNSCALE_TWICE, second, None, first.receiver, cause=first, related=(first,))


def _adjacent_in_one_block(model: FileModel, first: Event, second: Event) -> bool:
    """Both calls are whole statements of one block, and the statements between them hold no call and no jump."""
    if not (_whole_statement(first) and _whole_statement(second)):
        return False
    parent = model.parents.get(id(first.statement))
    if parent is None or parent is not model.parents.get(id(second.statement)):
        return False
    body = list(getattr(parent, "body", ()))
    try:
        start, end = body.index(first.statement), body.index(second.statement)
    except ValueError:
        return False
    return start < end and all(_inert(statement) for statement in body[start + 1 : end])


def _whole_statement(event: Event) -> bool:
    return not event.in_helper and isinstance(event.small_statement, cst.Expr) and event.small_statement.value is event.call


def _inert(statement: cst.CSTNode) -> bool:
    """No call, no jump, no compound statement: cannot update the scaler or leave the block."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    text = code_of(statement)
    return "(" not in text and not re.search(r"\b(return|break|continue|raise|yield)\b", text)
