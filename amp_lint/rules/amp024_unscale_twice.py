from __future__ import annotations

import re
from typing import Iterator, List, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.accumulation import accumulation
from amp_lint.rules._helpers import short
from amp_lint.analysis import typestate
from amp_lint.analysis.scaler_flow import assumption_text, flow_of
from amp_lint.analysis.flow_queries import last_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class UnscaleTwice(Rule):
    """
    ## What it does
    Finds `scaler.unscale_(optimizer)` called a second time for the same optimizer in one iteration (no
    `scaler.update()` in between), or called after `scaler.step(optimizer)`.

    ## Why is this bad?
    "unscale_ should only be called once per optimizer per step call." GradScaler records the state
    per optimizer and raises `RuntimeError: unscale_() has already been called on this optimizer since
    the last update().` or `RuntimeError: unscale_() is being called after step().`

    ## Example
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe. The second `unscale_` is removed (the gradients are already unscaled); an `unscale_` after the
    step with none before it moves to right before the step. No fix when the call is not a statement of
    its own or sits in a helper function.

    ## References
    - [AMP examples: gradient clipping](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping)
    - `torch/amp/grad_scaler.py`: `GradScaler.unscale_`
    """

    code = "AMP024"
    name = "unscale-twice"
    summary = "scaler.unscale_() twice per optimizer per iteration, or after step()"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bunscale_\b", r"[Ss]caler")

    valid = [
        # The scaler's own state decides (allennlp's gradient_descent_trainer: rescale, then clip).
        """
from torch.amp.grad_scaler import OptState
class Trainer:
    def rescale_gradients(self):
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
    def clip_gradient(self):
        if self._scaler is not None:
            state = self._scaler._per_optimizer_states[id(self.optimizer)]
            if state["stage"] is not OptState.UNSCALED:
                self._scaler.unscale_(self.optimizer)
    def train(self, loader):
        for batch in loader:
            self._scaler.scale(self.model(batch)).backward()
            self.rescale_gradients()
            self.clip_gradient()
            self._scaler.step(self.optimizer)
            self._scaler.update()
""",
        """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        # One unscale_ per optimizer.
        """
for x in loader:
    scaler.scale(loss).backward()
    scaler.unscale_(opt_a)
    scaler.unscale_(opt_b)
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
""",
        # Two phases, each updated.
        """
for x in loader:
    scaler.scale(d_loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    scaler.scale(g_loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
""",
        # Exclusive branches.
        """
for x in loader:
    scaler.scale(loss).backward()
    if clip:
        scaler.unscale_(opt)
        clip_grads(model)
    else:
        scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
""",
        # `optimizers[i]` is another optimizer on every pass of its own loop.
        """
for x in loader:
    scaler.scale(loss).backward()
    for i in range(k):
        scaler.unscale_(optimizers[i])
    for i in range(k, len(optimizers)):
        scaler.unscale_(optimizers[i])
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
""",
        # Exclusive `match` cases, the optimizer named by a subscript: each pass unscales once (the lexical
        # fallback took two calls with no `if` between them for one pass).
        """
for x in loader:
    scaler.scale(loss).backward()
    match mode:
        case "clip":
            scaler.unscale_(optimizers[0])
            clip_grads(model)
        case _:
            scaler.unscale_(optimizers[0])
    scaler.step(optimizers[0])
    scaler.update()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.step(self.optimizer)
    self.scaler.unscale_(self.optimizer)
    self.scaler.update()
""",
            fixed="""
def train_step(self, loss):
    self.scaler.scale(loss).backward()
    self.scaler.unscale_(self.optimizer)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        ),
        # A per-call step function (issue 26, principle 2) that returns after unscale_ on a skip branch.
        Invalid(
            """
import torch
class Trainer:
    def train_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if not torch.isfinite(norm):
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        reported: Set[int] = set()
        yield from self._twice_in_one_block(model, reported)
        for step in model.steps:
            for unscale in step.of(EventKind.SCALER_UNSCALE):
                if id(unscale.call) in reported or not unscale.call.args or _guarded_by_scaler_state(unscale, step):
                    continue
                scaler = unscale.receiver
                if not model.scaler_enabled(scaler, step.scope):
                    continue
                key = _optimizer(unscale)
                flow = flow_of(model, step)
                earlier = _protocol_before(model, step, unscale, scaler)
                if earlier is None:  # not in the flow graph, or an optimizer that is no plain name
                    earlier = _since_update(flow, unscale, scaler, key)
                if not earlier:
                    skipped = _next_iteration_without_update(model, step, unscale, scaler)
                    if skipped is not None:
                        reported.add(id(unscale.call))
                        yield self.finding(
                            unscale.call,
                            f"`{short(unscale.call)}` can run again in the next "
                            f"{'iteration' if step.loop is not None else 'call'} with no "
                            f"`{scaler}.update()` since it ran (a path skips the update): RuntimeError "
                            "'unscale_() has already been called'",
                            context=step.scope.name,
                            assumption=assumption_text(skipped),
                        )
                    continue
                previous = last_of(flow, earlier)
                updates = step.scaler_events(scaler, EventKind.SCALER_UPDATE)
                proof = flow.path(previous, unscale, updates)
                reported.add(id(unscale.call))
                if previous.kind is EventKind.SCALER_UNSCALE:
                    message = (
                        f"`{short(unscale.call)}` runs again after `{short(previous.call)}` with no "
                        f"`{scaler}.update()` between: RuntimeError 'unscale_() has already been called'"
                    )
                    fix = _remove_fix(model, unscale, previous)
                else:
                    message = (
                        f"`{short(unscale.call)}` runs after `{short(previous.call)}`: RuntimeError "
                        "'unscale_() is being called after step()'; unscale before stepping"
                    )
                    unscaled_before = [e for e in earlier if e.kind is EventKind.SCALER_UNSCALE]
                    fix = _remove_fix(model, unscale) if unscaled_before else _move_before_fix(model, step, unscale, previous)
                yield self.finding(
                    unscale.call, message, fix=fix, context=step.scope.name, assumption=assumption_text(proof)
                )


    def _twice_in_one_block(self, model: FileModel, reported: Set[int]) -> Iterator[Finding]:
        """Issue 26, principle 2 (per call): `unscale_(opt)` and again `unscale_(opt)` in one block of statements,
        nothing between them that could run `update()` (no call, no jump): the first leaves the optimizer
        UNSCALED (or raises), so the second raises whatever came before, in a function whose scaler calls
        no training step holds (composer's `_train_microbatches`: the unscale_ after a micro-batch loop)."""
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
                yield self.finding(
                    second.call,
                    f"`{short(second.call)}` runs again after `{short(first.call)}` with no "
                    f"`{first.receiver}.update()` between: RuntimeError 'unscale_() has already been called'",
                    fix=_remove_fix(model, second, first),
                    context=scope.name,
                )


def _adjacent_in_one_block(model: FileModel, first: Event, second: Event) -> bool:
    """Both calls are whole statements of one block, and the statements between them hold no call and no jump."""
    if not (_own_statement(first) and _own_statement(second)):
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


def _inert(statement: cst.CSTNode) -> bool:
    """No call, no jump, no compound statement: cannot update the scaler or leave the block."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    text = code_of(statement)
    return "(" not in text and not re.search(r"\b(return|break|continue|raise|yield)\b", text)


def _protocol_before(model: FileModel, step: TrainingStep, unscale: Event, scaler: str) -> Optional[List[Event]]:
    """The protocol's violations at `unscale` ("unscale-twice", "unscale-after-step"): the unscale_/step
    that left this optimizer UNSCALED or STEPPED on some path with no update() since (and, for a step,
    the unscale_ before it). None when the engine does not see the call."""
    if unscale.target is None:
        return None
    flow = flow_of(model, step)
    states = typestate.run(flow)
    if id(unscale) not in states.before:
        return None
    causes = {id(v.cause): v.cause for v in states.at(unscale, "unscale-twice", "unscale-after-step") if v.cause is not None}
    previous = [e for e in causes.values() if _same_optimizer(step, e, unscale)]
    if not previous:
        return []
    last = last_of(flow, previous)
    if last.kind is EventKind.SCALER_STEP:
        before_step = [
            e
            for e in step.of(EventKind.SCALER_UNSCALE)
            if e.receiver == scaler and e.target == unscale.target and e is not unscale and flow.path(e, last) is not None
        ]
        return before_step + [last]
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


_STATE_TEST = re.compile(r"_per_optimizer_states|OptState|\bstage\b")


def _next_iteration_without_update(model: FileModel, step: TrainingStep, unscale: Event, scaler: str):
    """A path from `unscale` to the end of the iteration that skips every update (`if not finite: continue`,
    LVSM PR #19, espnet #2362), so the next iteration's unscale_ finds the optimizer already unscaled."""
    updates = step.scaler_events(scaler, EventKind.SCALER_UPDATE)
    if not updates or unscale.in_helper or accumulation(model, step) is not None:
        return None  # an unscale_ on every micro-batch of an accumulation loop is AMP041's
    if step.loop is None:
        return _next_call_without_update(model, step, unscale, scaler, updates)
    if unscale.loop is not step.loop:
        return None  # an unscale_ in an inner `for opt in optimizers:` loop runs once per optimizer
    flow = flow_of(model, step)
    return flow.next_iteration(unscale, unscale, updates)


def _next_call_without_update(model: FileModel, step: TrainingStep, unscale: Event, scaler: str, updates):
    """A per-call step function (issue 26, principle 2: one call is one iteration) that updates the scaler
    itself on one path and returns on another after `unscale_` with neither step nor update: the
    protocol's end state leaves the optimizer UNSCALED, and the next call's `unscale_` raises. Only when
    the function owns the update (its caller then does not update between calls) and the unscale_ is not
    in a loop of the function."""
    if not step.scope.is_function or unscale.loops or any(u.in_helper for u in updates):
        return None
    ends = typestate.run(flow_of(model, step)).end
    left = [s.stage(scaler, unscale.target) for s in ends if unscale.target is not None]
    if not any(stage is not None and stage[0] == typestate.UNSCALED and stage[1] is unscale for stage in left):
        return None
    flow = flow_of(model, step)
    steps = step.scaler_events(scaler, EventKind.SCALER_STEP)
    if not any(flow.path(unscale, u) is not None for u in updates):
        return None  # the function never updates after this unscale_: its caller completes it
    # Open world: a call the analysis could not follow may step or update (a callback, a hook).
    unknown = [e for e in step.of(EventKind.CALL) if not any(inner.via is e for inner in step.events)]
    return flow.to_end(unscale, list(updates) + list(steps) + unknown)


def _optimizer(event: Event) -> str:
    return code_of(event.call.args[0].value) if event.call.args else ""


def _since_update(flow, unscale: Event, scaler: str, key: str) -> List[Event]:
    """unscale_/step of the same optimizer that a path of the iteration runs before `unscale` with no
    update() between."""
    step = flow.step
    updates = step.scaler_events(scaler, EventKind.SCALER_UPDATE)
    found: List[Event] = []
    for event in step.scaler_events(scaler, EventKind.SCALER_UNSCALE, EventKind.SCALER_STEP):
        if event is unscale or not event.call.args or _optimizer(event) != key:
            continue
        if not _same_optimizer(step, event, unscale):
            continue
        if flow.path(event, unscale, updates) is not None:
            found.append(event)
    return found


def _same_optimizer(step: TrainingStep, first: Event, second: Event) -> bool:
    """Do the two calls name one optimizer? Not when the name reads the variable of a loop inside the
    iteration that only one of them sits in (`for opt in optimizers:`, `optimizers[i]` under
    `for i in range(n):`: another optimizer on every pass)."""
    if not first.call.args:
        return True
    names = _names_in(first.call.args[0].value)

    def binders(event: Event):
        inner = event.loops[event.loops.index(step.loop) + 1 :] if step.loop in event.loops else event.loops
        return [id(loop) for loop in inner if isinstance(loop, cst.For) and names & _target_names(loop.target)]

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


def _target_names(target: cst.BaseExpression) -> Set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_target_names(e.value) for e in target.elements)) if target.elements else set()
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return set()


def _own_statement(event: Event) -> bool:
    return (
        not event.in_helper
        and isinstance(event.small_statement, cst.Expr)
        and event.small_statement.value is event.call
    )


def _twice_in_one_helper_block(model: FileModel, first: Event, second: Event) -> bool:
    """Both calls are statements of one block of one helper's body, reached through the same call, the first
    before the second: the helper itself unscales twice on every call, so removing the second is right for
    every caller (not an edit of the helper on one caller's behalf)."""
    if not second.in_helper or [id(e) for e in first.trail()] != [id(e) for e in second.trail()]:
        return False
    if not isinstance(second.small_statement, cst.Expr) or second.small_statement.value is not second.call:
        return False
    block = model.block_of(second.statement)
    return (
        block is not None
        and first.statement in block
        and second.statement in block
        and list(block).index(first.statement) < list(block).index(second.statement)
    )


def _remove_fix(model: FileModel, event: Event, previous: Optional[Event] = None) -> Optional[Fix]:
    if not _own_statement(event) and not (previous is not None and _twice_in_one_helper_block(model, previous, event)):
        return None
    builder = FixBuilder(model.module)
    builder.remove(removal_target(event.statement, event.small_statement))
    return builder.build("Remove the second `unscale_`", Applicability.SAFE)


def _move_before_fix(model: FileModel, step: TrainingStep, unscale: Event, scaler_step: Event) -> Optional[Fix]:
    if not _own_statement(unscale) or scaler_step.in_helper:
        return None
    anchor = step.anchor_statement(scaler_step)
    target = removal_target(unscale.statement, unscale.small_statement)
    if target is anchor or unscale.statement is anchor or not isinstance(anchor, cst.BaseStatement):
        return None
    builder = FixBuilder(model.module)
    builder.remove(target)
    builder.insert_before(anchor, builder.statement(f"{code_of(unscale.call)}\n"))
    return builder.build("Move `unscale_` before the step", Applicability.SAFE)
