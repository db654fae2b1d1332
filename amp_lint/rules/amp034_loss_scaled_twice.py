from __future__ import annotations

import re
from typing import Iterator, List, Optional, Sequence

import libcst as cst

from amp_lint.analysis.file_model import AssignmentSite, CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.rules._helpers import contains, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class LossScaledTwice(Rule):
    """
    ## What it does
    Finds a loss that goes through `GradScaler.scale` twice: `scaler.scale(scaler.scale(loss))`, or
    `scaler.scale(x)` on a name that an earlier statement of the same block bound to `scaler.scale(...)`
    (`loss = scaler.scale(loss)` and then `scaler.scale(loss).backward()`), with no other assignment of
    the name in between.

    ## Why is this bad?
    `scale()` multiplies its argument by the current scale (65536 at first), so the gradients come out
    multiplied by the scale squared (2**32). `unscale_()` and `step()` divide by the scale once: the
    gradients stay 65536 times too large, overflow to inf in float16 on nearly every step, and the scaler
    skips the step and halves the scale again and again until the product fits: training stalls for
    dozens of iterations and then runs with a scale far below what the loss needs.

    ## Example
    ```python
    loss = scaler.scale(loss)
    scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    ```

    ## Fix safety
    Safe: the result is the loss scaled once, whatever the scale. For the nested form the inner `scale`
    is dropped (`scaler.scale(scaler.scale(loss))` becomes `scaler.scale(loss)`); when the name already
    holds the scaled loss, the second `scaler.scale(x)` becomes `x`, so that every other reader of `x`
    keeps the value it had. Only a scale on every path to the second one counts (the same block, no
    assignment of the name in between); a scaler built with `enabled=False` scales nothing and is not
    reported.

    ## Preview
    A new rule (issue 30): it runs only with `--preview` (or `preview = true`) until it is proved on real
    code.

    ## References
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.scale` (`outputs * self._scale`), `unscale_`
      (multiplies the gradients by `1 / scale` once), `update` (backs off by `backoff_factor` on inf)
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    """

    code = "AMP034"
    name = "loss-scaled-twice"
    summary = "A loss passed through GradScaler.scale twice (gradients times the scale squared)"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    preview = True
    needs = (r"\bscale\b", r"[Ss]caler")

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
""",
        # Two losses, each scaled once.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
scaled = scaler.scale(loss_a)
scaler.scale(loss_b).backward()
scaled.backward()
""",
        # The name is rebound to the unscaled loss before the second scale.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
scaled = scaler.scale(loss)
log(scaled.item())
scaled = compute_loss()
scaler.scale(scaled).backward()
""",
        # Scaled on one branch only: not proved on every path.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def step(loss, eager):
    if eager:
        loss = scaler.scale(loss)
    scaler.scale(loss).backward()
""",
        # A disabled scaler multiplies by nothing.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
scaler.scale(scaler.scale(loss)).backward()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(scaler.scale(loss)).backward()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss = scaler.scale(loss)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # The second scale nested in a block after the first.
        Invalid(
            """
import torch
class Trainer:
    def step(self, loss):
        scaled = self.scaler.scale(loss)
        if self.training:
            self.scaler.scale(scaled).backward()
""",
            fixed="""
import torch
class Trainer:
    def step(self, loss):
        scaled = self.scaler.scale(loss)
        if self.training:
            scaled.backward()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for site in model.call_sites:
            scaler = _scaler_of(model, site.call, site)
            if scaler is None or len(site.call.args) != 1 or site.call.args[0].star:
                continue
            argument = site.call.args[0].value
            if isinstance(argument, cst.Call) and _scaler_of(model, argument, site) is not None:
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 50)}` scales the loss twice: the gradients come out multiplied by the scale "
                    "squared and `unscale_` divides once; drop the inner `scale`",
                    fix=_drop_inner(model, site.call, argument),
                    context=site.scope.name,
                )
                continue
            if not isinstance(argument, cst.Name):
                continue
            earlier = _scaled_before(model, site, argument.value)
            if earlier is None:
                continue
            yield self.finding(
                site.call,
                f"`{argument.value}` already holds `{short(earlier.value, 40)}` (the scaled loss); `{short(site.call, 40)}` "
                "scales it again: the gradients come out multiplied by the scale squared",
                fix=_use_scaled(model, site.call, argument),
                context=site.scope.name,
                related=(("scaled", earlier.value),),
            )


def _scaler_of(model: FileModel, call: cst.Call, site: CallSite) -> Optional[str]:
    """The scaler key of `<scaler>.scale(...)`, for an enabled (or run-time enabled) scaler."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "scale":
        return None
    key = dotted_name(func.value)
    if key is None or not model.is_scaler(key, site.scope) or not model.scaler_enabled(key, site.scope):
        return None
    return key


def _scaled_before(model: FileModel, site: CallSite, name: str) -> Optional[AssignmentSite]:
    """The assignment `name = <scaler>.scale(...)` that holds on every path to `site`: in the block of a
    statement that holds the site, before it, with no other assignment of `name` in between."""
    for assignment in model.assignments_in(site.scope, name):
        value = assignment.value
        if not isinstance(value, cst.Call) or _scaler_of(model, value, site) is None or assignment.statement is None:
            continue
        if value is site.call or contains(value, site.call):
            continue
        block = model.block_of(assignment.statement)
        if not block:
            continue
        statements = list(block)
        start = statements.index(assignment.statement)
        holder = next((i for i, s in enumerate(statements) if i > start and contains(s, site.statement)), None)
        if holder is None and assignment.statement is not site.statement:
            continue
        between: Sequence[cst.CSTNode] = statements[start + 1 : holder] if holder is not None else []
        if any(_assigns(node, name) for node in between):
            continue
        if holder is not None and statements[holder] is not site.statement and _assigns(statements[holder], name, site.call):
            continue
        return assignment
    return None


_ASSIGNMENT = r"(?<![\w.]){name}\s*(?:[-+*/@%&|^]|//|\*\*|>>|<<|:)?=(?!=)"


def _assigns(node: cst.CSTNode, name: str, before: Optional[cst.Call] = None) -> bool:
    """Might `node` (up to `before`, when given) bind `name`? Assignments, `for`/`with ... as`, walrus, del."""
    text = code_of(node)
    if before is not None:
        cut = text.find(code_of(before))
        text = text[:cut] if cut >= 0 else text
    word = re.escape(name)
    patterns: List[str] = [
        _ASSIGNMENT.format(name=word),
        rf"\bfor\b[^\n]*(?<![\w.]){word}\b[^\n]*\bin\b",
        rf"\bas\s+\(?[^\n:]*(?<![\w.]){word}\b",
        rf"\bdel\b[^\n]*(?<![\w.]){word}\b",
        rf"\b(?:global|nonlocal)\b[^\n]*\b{word}\b",
    ]
    return any(re.search(pattern, text) for pattern in patterns)


def _drop_inner(model: FileModel, outer: cst.Call, inner: cst.Call) -> Optional[Fix]:
    if len(inner.args) != 1 or inner.args[0].star or inner.args[0].keyword is not None:
        return None
    value = inner.args[0].value
    builder = FixBuilder(model.module)
    builder.replace(inner, lambda updated: value)
    return builder.build("Drop the inner `scale`", Applicability.SAFE)


def _use_scaled(model: FileModel, call: cst.Call, name: cst.Name) -> Fix:
    builder = FixBuilder(model.module)
    builder.replace(call, lambda updated: cst.Name(name.value))
    return builder.build(f"Use `{name.value}`, which is scaled already", Applicability.SAFE)

