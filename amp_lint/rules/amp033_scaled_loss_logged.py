from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

import libcst as cst

from amp_lint.analysis.flow_queries import site_path, whole_scope_flow

from amp_lint.analysis.syntax import names_in
from amp_lint.analysis.file_model import AssignmentSite, CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

# Calls that report a value: print, loggers, progress bars, metric meters, TensorBoard, lists of losses.
_REPORTER = re.compile(
    r"(^|\.)(print|log|info|debug|warning|warn|add_scalar|add_scalars|append|extend|set_postfix|set_description|"
    r"update|write|record|log_dict|log_metrics)$"
)
_READOUT_METHODS = frozenset({"item", "tolist", "numpy"})  # not detach()/cpu(): those also feed computations


class ScaledLossLogged(Rule):
    """
    ## What it does
    Finds a loss rebound to its scaled value (`loss = scaler.scale(loss)`) that is then logged, read
    out (`loss.item()`) or returned.

    ## Why is this bad?
    The scaled loss is the loss times the current scale, 65536 at the start: the logged curve is about
    65536 times too large, and it jumps whenever the scaler backs off or grows. The scaled tensor exists
    only to be backpropagated; the documented recipe calls `scaler.scale(loss).backward()` inline and
    keeps `loss` unscaled.

    ## Example
    ```python
    loss = scaler.scale(loss)
    loss.backward()
    print(loss.item())
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    print(loss.item())
    ```

    ## Fix safety
    Safe: the gradients are the same (the backward still runs on the scaled loss); only what is logged
    or returned becomes the true loss, which is what the author evidently meant. Offered only for
    `x = scaler.scale(x)` on a line of its own, followed in the same block by `x.backward()` and
    uses of `x` that only report it; otherwise reported without a fix.

    ## References
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
      (`scaler.scale(loss).backward()`)
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.scale` ("Multiplies ('scales') a tensor or
      list of tensors by the scale factor"), `init_scale=2.0**16`
    - `../shared/amp-reference/rules.md` AMP033
    """

    code = "AMP033"
    name = "scaled-loss-logged"
    summary = "A scaled loss stored in a variable and then logged or returned (values ~65536x too large)"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bscale\b")

    valid = [
        # Issue 26, principle 4: the report divides the scaled loss by the scale (unscaled by hand), and a
        # string's words are no reads of the name.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = scaler.scale(model(x).sum())
    loss.backward()
    scaler.step(optimizer)
    print(loss.item() / scaler.get_scale(), f"loss at step {step}")
    scaler.update()
""",
        """
import torch
scaler.scale(loss).backward()
print(loss.item())
""",
        # Stored but never reported.
        """
scaled = scaler.scale(loss)
scaled.backward()
""",
        # Rebound before the report.
        """
loss = scaler.scale(loss)
loss.backward()
loss = criterion(out, y)
print(loss.item())
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in data:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    loss = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"loss {loss.item():.4f}")
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in data:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"loss {loss.item():.4f}")
""",
        ),
        Invalid(
            """
def train_step(self, batch):
    loss = self.compute_loss(batch)
    loss = self.scaler.scale(loss)
    loss.backward()
    self.scaler.step(self.optimizer)
    self.scaler.update()
    return loss
""",
            fixed="""
def train_step(self, batch):
    loss = self.compute_loss(batch)
    self.scaler.scale(loss).backward()
    self.scaler.step(self.optimizer)
    self.scaler.update()
    return loss
""",
        ),
        # Also used for something else: reported, not fixed.
        Invalid(
            """
scaled = scaler.scale(loss)
grads = torch.autograd.grad(scaled, params)
losses.append(scaled.item())
"""
        ),
        # Rebound on one path only: on the other the scaled value reaches the report (the text has a
        # rebinding before the print; a path does not).
        Invalid(
            """
scaled = scaler.scale(loss)
grads = torch.autograd.grad(scaled, params)
if debug:
    scaled = loss
losses.append(scaled.item())
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for assignment in model.assignment_sites:
            scaled = _scaled_value(model, assignment)
            if scaled is None:
                continue
            scaler, argument = scaled
            variable = assignment.target
            later = _later_sites(model, assignment)
            reports = [site for site in later if _reports(site, variable) and not _divided_by_the_scale(site, scaler)]
            returned = _returned_in_block(model, assignment, variable)
            if not reports and returned is None:
                continue
            where = short(reports[0].call, 40) if reports else "return"
            yield self.finding(
                assignment.value,
                f"`{variable}` holds `{short(assignment.value, 40)}`, the loss times the scale (65536 at first), and "
                f"`{where}` reports it: call `{scaler}.scale({variable}).backward()` inline and keep the loss unscaled",
                fix=_fix(model, assignment, scaler, argument, later, reports, returned),
                context=assignment.scope.name,
            )


def _scaled_value(model: FileModel, assignment: AssignmentSite) -> Optional[Tuple[str, cst.BaseExpression]]:
    """(scaler key, the scaled expression) for `target = scaler.scale(expr)` with a plain-name target."""
    value = assignment.value
    if "." in assignment.target or not isinstance(value, cst.Call) or len(value.args) != 1:
        return None
    func = value.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "scale" or value.args[0].keyword or value.args[0].star:
        return None
    scaler = dotted_name(func.value)
    if scaler is None or not model.is_scaler(scaler, assignment.scope) or not model.scaler_enabled(scaler, assignment.scope):
        return None
    return scaler, value.args[0].value


def _later_sites(model: FileModel, assignment: AssignmentSite) -> List[CallSite]:
    """Calls of the assignment's function that its value reaches: a path from the assignment to the call with
    no other assignment of the same name between (a reaching definition, not "later in the text")."""
    flow = whole_scope_flow(model, assignment.scope)
    others = [a for a in model.assignments_in(assignment.scope, assignment.target) if a is not assignment]
    return [
        site
        for site in model.call_sites
        if site.scope is assignment.scope and site_path(flow, assignment, site, others) is not None
    ]


def _mentions(node: cst.CSTNode, variable: str) -> bool:
    """The code reads `variable` (a name, not a word of a string: `print(f"loss {avg}")` does not)."""
    return variable in names_in(node)


def _reports(site: CallSite, variable: str) -> bool:
    receiver = site.receiver
    if site.method in _READOUT_METHODS and isinstance(receiver, cst.Name) and receiver.value == variable:
        return True
    name = dotted_name(site.call.func)
    return name is not None and _REPORTER.search(name) is not None and any(_mentions(arg, variable) for arg in site.call.args)


def _divided_by_the_scale(site: CallSite, scaler: str) -> bool:
    """The report divides by the scale it carries (`print(loss.item() / scaler.get_scale())`): it reports the
    loss, unscaled by hand; keeping `loss` unscaled would divide it twice (issue 26, principle 4: values
    followed through the arithmetic the code does on them)."""
    small = site.small_statement if site.small_statement is not None else site.statement
    return re.search(rf"/\s*{re.escape(scaler)}\.get_scale\(\)", code_of(small)) is not None


def _returned_in_block(model: FileModel, assignment: AssignmentSite, variable: str) -> Optional[cst.SimpleStatementLine]:
    block = model.block_of(assignment.statement) if assignment.statement is not None else None
    if not block or not assignment.scope.is_function:
        return None
    after = False
    for statement in block:
        if statement is assignment.statement:
            after = True
            continue
        if not after or not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, (cst.Assign, cst.AugAssign)) and _mentions(small, variable) and not isinstance(small, cst.Return):
                targets = small.targets if isinstance(small, cst.Assign) else [small]
                if any(dotted_name(getattr(t, "target", None)) == variable for t in targets):
                    return None
            if isinstance(small, cst.Return) and small.value is not None and _mentions(small.value, variable):
                return statement
    return None


def _fix(model, assignment, scaler, argument, later, reports, returned) -> Optional[Fix]:
    statement = assignment.statement
    variable = assignment.target
    if not isinstance(argument, cst.Name) or argument.value != variable:
        return None
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    block = model.block_of(statement)
    if not block:
        return None
    backwards = [
        s
        for s in later
        if s.method == "backward" and isinstance(s.receiver, cst.Name) and s.receiver.value == variable and s.statement in block
    ]
    if len(backwards) != 1:
        return None
    # Every other mention of the name after the assignment, in this block, must be a report.
    rest = list(block)[list(block).index(statement) + 1 :]
    allowed = [backwards[0].call] + [r.call for r in reports]
    for node in rest:
        text = code_of(node)
        for call in allowed:
            text = text.replace(code_of(call), "")
        if returned is node:
            text = text.replace(code_of(node), "")
        if re.search(rf"(?<![\w.]){re.escape(variable)}\b", text):
            return None
    builder = FixBuilder(model.module)
    builder.remove(statement)
    scale_call = assignment.value
    builder.replace(
        backwards[0].call,
        lambda updated: updated.with_changes(func=updated.func.with_changes(value=scale_call)),
    )
    return builder.build(f"Backpropagate `{scaler}.scale({variable})` inline and keep `{variable}` unscaled", Applicability.SAFE)
