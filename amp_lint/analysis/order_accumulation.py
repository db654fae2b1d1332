"""The protocol's gradient-accumulation questions: what runs on every micro-batch of an iteration that
accumulates gradients until a boundary (`accumulation`): a step/update (AMP040), an unscale_ or a clip
(AMP041), a loss that is not divided by the number of micro-batches (AMP042). Each query yields
`order.Breach`es (`accumulation`: the boundary); see `order`.
"""

from __future__ import annotations

import re
from typing import Iterator, List, Optional, Set

import libcst as cst

from amp_lint.analysis.accumulation import accumulation, first_on_path
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.iteration_limit import analysed_steps
from amp_lint.analysis.flow_queries import path_with
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.order import Breach
from amp_lint.analysis.syntax import code_of

# --- step()/update() on every micro-batch (AMP040) ---------------------------------------------------
STEP_TWICE_PER_BOUNDARY = "step-every-micro-batch"  # the step runs before the boundary's: step-twice
STEP_ON_PARTIAL_SUMS = "step-on-partial-sums"  # zero_grad only at the boundary, the step on every micro-batch


def steps_every_micro_batch(model: FileModel) -> Iterator[Breach]:
    """A scaler step/update that a micro-batch which only accumulates runs (the boundary condition false
    on the path; `proof` of that path): `event` the first of them, `related` the unscale_/clip/step/update
    calls a fix moves into the boundary. STEP_TWICE_PER_BOUNDARY when the boundary steps too (the
    protocol's "step-twice" on the second micro-batch); STEP_ON_PARTIAL_SUMS when the gradients are
    zeroed only at the boundary (the step applies partial sums). An update() every micro-batch with the
    step at the boundary is AMP022's "update-without-inf-checks", not this."""
    for step in analysed_steps(model):
        acc = accumulation(model, step)
        if acc is None:
            continue
        pair = acc.protocol(EventKind.SCALER_STEP, EventKind.SCALER_UPDATE)
        every = {id(e): (e, p) for e in pair for p in [acc.every_micro_batch(e)] if p is not None}
        if not every or any(e.in_helper for e, _ in every.values()):
            continue
        at_boundary = [e for e in pair if acc.at_boundary(e)]
        zeros = acc.protocol(EventKind.ZERO_GRAD)
        kinds = {e.kind for e, _ in every.values()}
        if at_boundary:
            if EventKind.SCALER_STEP not in kinds:
                continue
            kind = STEP_TWICE_PER_BOUNDARY
        elif any(acc.at_boundary(z) for z in zeros) and not any(acc.unconditional(z) for z in zeros):
            kind = STEP_ON_PARTIAL_SUMS
        else:
            continue
        flow = acc.flow
        movers = [
            e
            for e in acc.protocol(EventKind.SCALER_UNSCALE, EventKind.CLIP, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE)
            if acc.unconditional(e) and flow.path(acc.backward, e) is not None
        ]
        first = first_on_path(flow, [e for e, _ in every.values()])
        assert first is not None
        yield Breach(kind, first, step, flow=flow, related=tuple(movers), proof=every[id(first)][1], accumulation=acc)


# --- unscale_()/clip on every micro-batch (AMP041) ---------------------------------------------------
UNSCALE_EVERY_MICRO_BATCH = "unscale-every-micro-batch"  # unscale_-twice on the second micro-batch
CLIP_EVERY_MICRO_BATCH = "clip-every-micro-batch"  # reads partial, still-scaled sums


def unscales_every_micro_batch(model: FileModel) -> Iterator[Breach]:
    """An unscale_ or clip that a micro-batch which only accumulates runs (a path from the iteration's
    start on which the boundary condition does not hold, under a test of its own or none: `if clip_grad:
    scaler.unscale_(optimizer)` on every micro-batch, Swin-Transformer #311), while the step waits for the
    boundary. `related`: every such call of the iteration (what a fix moves into the boundary)."""
    for step in analysed_steps(model):
        acc = accumulation(model, step)
        if acc is None:
            continue
        if not any(acc.at_boundary(e) for e in acc.protocol(EventKind.SCALER_STEP)):
            continue
        offenders = []
        for event in acc.protocol(EventKind.SCALER_UNSCALE, EventKind.CLIP):
            proof = None if event.in_helper else acc.every_micro_batch(event)
            if proof is not None:
                offenders.append((event, proof))
        related = tuple(e for e, _ in offenders)
        for event, proof in offenders:
            kind = UNSCALE_EVERY_MICRO_BATCH if event.kind is EventKind.SCALER_UNSCALE else CLIP_EVERY_MICRO_BATCH
            yield Breach(kind, event, step, flow=acc.flow, related=related, proof=proof, accumulation=acc)


# --- a loss accumulated undivided (AMP042) -----------------------------------------------------------
LOSS_NOT_DIVIDED = "loss-not-divided"

_NORMALISED = re.compile(r"accum|accumulat|grad_acc|reduction", re.IGNORECASE)


def losses_not_divided(model: FileModel) -> Iterator[Breach]:
    """The backward of an iteration that accumulates over `% n` micro-batches, whose loss (or what feeds it,
    two assignments deep) never mentions `n` or a normalisation (`node`: the divisor `n`)."""
    for step in analysed_steps(model):
        acc = accumulation(model, step)
        if acc is None or acc.backward.loss is None:
            continue
        divisor = _modulo_divisor(acc.boundary.test)
        if divisor is None:
            continue
        identifier = re.escape(code_of(divisor).split(".")[-1].strip())
        chain = _loss_chain(model, acc, acc.backward.loss)
        if any(re.search(rf"\b{identifier}\b", text) or _NORMALISED.search(text) for text in chain):
            continue
        yield Breach(LOSS_NOT_DIVIDED, acc.backward, step, flow=acc.flow, node=divisor, accumulation=acc)


def _modulo_divisor(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    found: List[cst.BaseExpression] = []

    class Modulo(cst.CSTVisitor):
        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if isinstance(node.operator, cst.Modulo):
                found.append(node.right)

    test.visit(Modulo())
    if len(found) != 1 or isinstance(found[0], (cst.Integer, cst.Float)):
        return None
    return found[0]


def _loss_chain(model: FileModel, acc, loss: cst.BaseExpression) -> List[str]:
    """The code of the backpropagated expression and of every assignment that feeds it (two levels).

    An assignment feeds it when a path leads from the assignment to the backward: `loss = loss / accum`
    after the backward (for the log line) does not divide the gradients.
    """
    texts = [code_of(loss)]
    names: Set[str] = set()
    key = dotted_name(loss)
    if key is not None:
        names.add(key)
    names |= set(re.findall(r"[A-Za-z_][\w.]*", code_of(loss)))
    scope = acc.step.scope
    sites = [
        site
        for site in model.assignment_sites
        if site.scope is scope and site.statement is not None and path_with(acc.flow, site, acc.backward) is not None
    ]
    for _ in range(2):
        new: Set[str] = set()
        for site in sites:
            if site.target in names:
                text = code_of(site.value)
                texts.append(text)
                new |= set(re.findall(r"[A-Za-z_][\w.]*", text))
        names |= new
    return texts
