from __future__ import annotations

from typing import List, Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import Event
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis import typestate
from amp_lint.analysis.order import Breach
from amp_lint.analysis.protocol import RESETS_SCALER
from amp_lint.analysis.order_updates import MISSING_UPDATE, NEVER_UPDATED_IN_PROJECT, UPDATE_SKIPPED, missing_updates
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Fix, Invalid


class MissingScalerUpdate(OrderRule):
    """
    ## What it does
    Finds an iteration that calls `scaler.step(optimizer)` but never `scaler.update()`, or whose
    `scaler.step` reaches the next iteration on a path that skips every update (an overflow branch that
    steps but forgets the update the other branch runs). A step helper
    that leaves `update()` to its caller is correct (several optimizers, one update) and is judged where
    it is called; when the class builds the scaler, runs its scaled backward in a sibling method and no
    file of the project updates that attribute or hands it on, nothing can supply the update: reported.

    ## Why is this bad?
    `update()` adapts the scale and resets the scaler's per-optimizer state. Without it, the second
    `scaler.step(optimizer)` raises `RuntimeError: step() has already been called since the last
    update().`, so the loop crashes on its second iteration; a script that steps once never adapts the
    scale after an overflow.

    ## Example
    ```python
    for x, y in loader:
        ...
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        ...
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Fix safety
    Safe. `scaler.update()` is inserted right after the last `scaler.step(...)` of the iteration, at
    the same block level: inside the accumulation boundary when there is one, after all optimizers
    when there are several. On a path that skips the update, it goes right after that step, only when
    no update follows the step on any path.

    ## References
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    - `torch/amp/grad_scaler.py`: `GradScaler.step` (the `STEPPED` check) and `GradScaler.update`
    """

    code = "AMP021"
    query = missing_updates
    messages = {
        MISSING_UPDATE: "`{last}` is never followed by `{scaler}.update()` {detail}; "
        "the next `{scaler}.step()` raises RuntimeError",
        NEVER_UPDATED_IN_PROJECT: "`{last}` is never followed by `{scaler}.update()`, and nothing in the project "
        "updates `{scaler}`: the next `{scaler}.step()` raises RuntimeError",
        UPDATE_SKIPPED: "`{last}` can reach the next iteration with no `{scaler}.update()` (a path skips the update): "
        "the next `{scaler}.step()` raises RuntimeError 'step() has already been called since the last update()'",
    }
    name = "missing-scaler-update"
    summary = "scaler.step() without scaler.update() in the iteration"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bstep\b")

    valid = [
        # Issue 26, principle 1 ("step() twice" is per optimizer): each pass of the inner loop steps another
        # optimizer, and the update follows the loop, once per iteration.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    for model, opt in zip(models, opts):
        scaler.scale(model(x).sum()).backward()
        scaler.step(opt)
    scaler.update()
""",
        """
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # Accumulation: step and update at the boundary.
        """
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # One scaler, several optimizers, one update.
        """
for x in loader:
    scaler.scale(loss0).backward(retain_graph=True)
    scaler.scale(loss1).backward()
    for opt in (opt0, opt1):
        scaler.step(opt)
    scaler.update()
""",
        # update(new_scale) is still an update.
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update(2.0 ** 10)
""",
        # The step lives in one method, the update in another.
        """
class Trainer:
    def optimizer_step(self):
        self.scaler.step(self.optimizer)

    def after_step(self):
        self.scaler.update()
""",
        # A helper called from the loop updates, under its own parameter name.
        """
def finish_step(s, opt):
    s.step(opt)
    s.update()

for x in loader:
    scaler.scale(model(x).sum()).backward()
    finish_step(scaler, optimizer)
""",
        # A helper called from the loop updates.
        """
def finish_step(scaler):
    scaler.update()

for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    finish_step(scaler)
""",
        # Open world (issue 26, principle 3): a library's public step that steps through the scaler and
        # leaves `update()` to its users (who may step several optimizers first). No finding, no fix.
        """
import torch
class Engine:
    def __init__(self, optimizer):
        self.scaler = torch.amp.GradScaler("cuda")
        self.optimizer = optimizer

    def step(self):
        self.scaler.step(self.optimizer)
""",
        # Passes that alternate (issue 26, principle 1: a test of the loop's counter need not go the same
        # way on the next pass): the discriminator's step on odd passes, the generator's and the update on
        # even ones. Shown only with --show-assumed.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    if i % 2:
        scaler.step(opt_d)
    else:
        scaler.step(opt_g)
        scaler.update()
""",
    ]
    invalid = [
        # Issue 26, principle 1: the protocol's end state on one path is STEPPED (the overflow branch
        # steps and skips the update), so the next iteration's step raises. The update goes right after
        # that step, when no update follows it on any path.
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        scaler.step(optimizer)
    else:
        scaler.step(optimizer)
        scaler.update()
    optimizer.zero_grad()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        scaler.step(optimizer)
        scaler.update()
    else:
        scaler.step(optimizer)
        scaler.update()
    optimizer.zero_grad()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    optimizer.zero_grad()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
        ),
        Invalid(
            """
for i, (x, y) in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        optimizer.zero_grad()
""",
            fixed="""
for i, (x, y) in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        ),
        Invalid(
            """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for opt in optimizers:
        scaler.step(opt)
""",
            fixed="""
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
""",
        ),
        # A scaler passed to a helper under another name is still the scaler.
        Invalid(
            """
def optimizer_step(s, opt):
    s.step(opt)

def train(loader, model, optimizer, scaler):
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        optimizer_step(scaler, optimizer)
""",
        ),
        # Created here, stepped in a helper, updated nowhere.
        Invalid(
            """
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def train_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
""",
            fixed="""
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def train_step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
        ),
    ]

    def fix(self, model: FileModel, breach: Breach, memo: dict) -> Optional[Fix]:
        if breach.kind == UPDATE_SKIPPED:
            # No update follows this step on any path (else one path would update twice): the update goes
            # right after it, at the iteration's level (after a loop over optimizers that holds it).
            if breach.last.in_helper or typestate.follows(breach.flow, breach.last, RESETS_SCALER, breach.scaler)[0]:
                return None
            return _insert_update_fix(model, breach.step, [breach.last], breach.scaler)
        steps = [breach.last] if breach.kind == NEVER_UPDATED_IN_PROJECT else list(breach.related)
        return None if any(e.in_helper for e in steps) else _insert_update_fix(model, breach.step, steps, breach.scaler)

    def related(self, model: FileModel, breach: Breach):
        built = [b for b in model.scaler_bindings(breach.scaler, breach.step.scope) if b.call is not None]
        return ((("scaler created", built[0].call),) if built else ()) + self.through_helpers(breach.last)


def _insert_update_fix(model: FileModel, step: TrainingStep, steps: List[Event], scaler: str) -> Optional[Fix]:
    """`update()` after the statement that holds every step of the scaler: after the step itself, or after the
    `if` whose branches each step (open_clip: `if horovod: ... step() else: ... step()`), so that the update
    follows whichever step ran."""
    anchor = _after_every_step(model, step, steps)
    own = any(anchor is step.anchor_statement(e) for e in steps)
    if own and not isinstance(anchor, (cst.SimpleStatementLine, cst.For, cst.While)):
        return None  # `if boundary: scaler.step(opt)` on one line: an update after it would run without a step
    if not own and not (isinstance(anchor, (cst.With, cst.Try)) or (isinstance(anchor, cst.If) and _every_branch_steps(anchor, steps))):
        return None
    builder = FixBuilder(model.module)
    builder.insert_after(anchor, builder.statement(f"{scaler}.update()\n"))
    return builder.build(f"Insert `{scaler}.update()` after the last `{scaler}.step(...)`", Applicability.SAFE)


def _every_branch_steps(node: cst.If, steps: List[Event]) -> bool:
    """Every way through the `if` (its body, each `elif`, the `else`) holds a step: none skips them all."""
    calls = {id(e.call) for e in steps}

    def steps_in(part: cst.CSTNode) -> bool:
        found = []

        class Find(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                if id(call) in calls:
                    found.append(call)

        part.visit(Find())
        return bool(found)

    branch: Optional[cst.CSTNode] = node
    while isinstance(branch, cst.If):
        if not steps_in(branch.body):
            return False
        branch = branch.orelse
    return isinstance(branch, cst.Else) and steps_in(branch.body)


def _statements_around(model: FileModel, step: TrainingStep, event: Event) -> List[cst.CSTNode]:
    """The statements from the event's anchor outwards, up to (not including) the iteration's loop."""
    chain: List[cst.CSTNode] = []
    node: Optional[cst.CSTNode] = step.anchor_statement(event)
    while node is not None and node is not step.loop and not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(node, cst.BaseStatement):
            chain.append(node)
        node = model.parents.get(id(node))
    return chain


def _after_every_step(model: FileModel, step: TrainingStep, steps: List[Event]) -> Optional[cst.CSTNode]:
    """The innermost statement that holds or follows every step, in one block: the last of them there."""
    chains = [_statements_around(model, step, e) for e in steps]
    if not chains or not chains[-1]:
        return None
    for candidate in chains[-1]:
        block = model.block_of(candidate)
        if block is None:
            return None
        members = [next((s for s in chain if any(s is b for b in block)), None) for chain in chains]
        if all(m is not None for m in members):
            return max(members, key=lambda m: next(i for i, b in enumerate(block) if b is m))
    return None
