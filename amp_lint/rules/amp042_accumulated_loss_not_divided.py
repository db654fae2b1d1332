from __future__ import annotations

import re
from typing import Iterator, List, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.flow_queries import path_with
from amp_lint.analysis.accumulation import accumulation
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Invalid, Rule

_NORMALISED = re.compile(r"accum|accumulat|grad_acc|reduction", re.IGNORECASE)


class AccumulatedLossNotDivided(Rule):
    """
    ## What it does
    Finds a gradient-accumulation loop (boundary `if (i + 1) % N == 0:`) whose scaled loss is never
    divided (or multiplied) by `N` on its way to `backward()`.

    ## Why is this bad?
    The AMP examples divide: `loss = loss / iters_to_accumulate`. Without it the accumulated gradient
    is N times the mean gradient: an N-times larger learning rate for SGD, a clipping threshold that
    means something else, and float16 scaled gradients that overflow earlier (the update was 4.00x
    with N=4 in a CPU reproduction).

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
            loss = loss / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    ```

    ## Fix safety
    No automatic fix: the loss may be normalised elsewhere (inside the loss function, with
    `reduction="sum"` and an explicit divisor). Off by default (heuristic), reported at medium confidence.

    ## References
    - [AMP examples: gradient accumulation](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation)
    """

    code = "AMP042"
    name = "accumulated-loss-not-divided"
    summary = "Accumulation loop: loss not divided by the number of accumulation steps"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"[Ss]caler", r"\bbackward\b")

    valid = [
        """
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        """
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    scaler.scale(loss / args.grad_accum_steps).backward()
    if (i + 1) % args.grad_accum_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # A periodic evaluation that zeroes the gradients is no accumulation boundary.
        """
for features, labels in loader:
    scaler.scale(loss_fct(model(features), labels)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    training_steps += 1
    if evaluator is not None and training_steps % evaluation_steps == 0:
        evaluate(model)
        model.zero_grad()
""",
        # No accumulation.
        """
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    if (i + 1) % n_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for step in model.steps:
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
            yield self.finding(
                acc.backward.call,
                f"`{short(acc.backward.call)}` accumulates over `{code_of(divisor)}` micro-batches but the loss is "
                f"never divided by `{code_of(divisor)}`: the accumulated gradient is that many times the mean",
                confidence=Confidence.MEDIUM,
                context=step.scope.name,
            )


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
