from __future__ import annotations

import weakref
from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.names import GRAD_SCALER, dotted_name
from amp_lint.analysis.steps import callee_scope
from amp_lint.analysis.syntax import code_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class MissingScalerUpdate(Rule):
    """
    ## What it does
    Finds an iteration that calls `scaler.step(optimizer)` but never `scaler.update()`. A step helper
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
    when there are several.

    ## References
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    - `torch/amp/grad_scaler.py`: `GradScaler.step` (the `STEPPED` check) and `GradScaler.update`
    """

    code = "AMP021"
    name = "missing-scaler-update"
    summary = "scaler.step() without scaler.update() in the iteration"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler", r"\bstep\b")

    valid = [
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
    ]
    invalid = [
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

    def check(self, model: FileModel) -> Iterator[Finding]:
        for step in model.steps:
            for scaler in _scalers_stepped(step):
                if not model.scaler_enabled(scaler, step.scope):
                    continue
                steps = step.scaler_events(scaler, EventKind.SCALER_STEP)
                if step.scaler_events(scaler, EventKind.SCALER_UPDATE):
                    continue
                if _helper_may_update(model, step, scaler) and not _nothing_in_project_updates(model, step, scaler):
                    continue  # a call gets the scaler (or its holder), unless nothing in the project updates it
                if step.loop is None and not _runs_scaled_backward(step, scaler):
                    # Open world (issue 26, principle 3): a function that steps through the scaler but does
                    # not backpropagate is one part of its caller's iteration, and `update()` is the
                    # caller's to supply (several optimizers, one update). A caller in this file gets the
                    # helper's events inlined and is judged there; a public method's callers are not seen.
                    # Unless nothing can: the class builds the scaler and runs its scaled backward in a
                    # sibling method, and no file of the project updates it or hands it on.
                    if _never_updated_in_project(model, step, scaler):
                        last = steps[-1]
                        yield self.finding(
                            last.call,
                            f"`{code_of(last.call)}` is never followed by `{scaler}.update()`, and nothing in "
                            f"the project updates `{scaler}`: the next `{scaler}.step()` raises RuntimeError",
                            fix=None if last.in_helper else _insert_update_fix(model, step, [last], scaler),
                            context=step.scope.name,
                            related=_created_at(model, step, scaler) + self.through_helpers(last),
                        )
                    continue
                updated_elsewhere = _updates_elsewhere(model, step, scaler)
                if step.loop is None and updated_elsewhere:
                    continue  # the function is one part of a step whose update lives elsewhere
                last = steps[-1]
                where = "in this loop" if step.loop is not None else "anywhere in this file"
                yield self.finding(
                    last.call,
                    f"`{code_of(last.call)}` is never followed by `{scaler}.update()` {where}; "
                    f"the next `{scaler}.step()` raises RuntimeError",
                    fix=None if any(e.in_helper for e in steps) else _insert_update_fix(model, step, steps, scaler),
                    context=step.scope.name,
                    related=_created_at(model, step, scaler) + self.through_helpers(last),
                )


def _nothing_in_project_updates(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    """Issue 26, principle 3: `self.<scaler>` built by this class, and no file of the project updates the
    attribute, hands it on (an argument, an alias, a return value) or names it in a string: a callback
    given `self` cannot update it either."""
    parts = scaler.split(".")
    if len(parts) != 2 or parts[0] != "self" or step.scope.class_name is None:
        return False
    built = [b for b in model.scaler_bindings(scaler, step.scope) if b.call is not None]
    # Built by a `GradScaler(...)` call: what the result cache's key follows (`callers.scaler_attributes`).
    # (or through a local alias of the class, `scaler_type = GradScaler; scaler_type()`: its qualified name)
    if not built or not all(
        code_of(b.call.func).split(".")[-1].endswith("GradScaler") or b.qualified_name in GRAD_SCALER for b in built
    ):
        return False
    if _updates_elsewhere(model, step, scaler):
        return False
    from amp_lint.analysis.summaries import attribute_kept_in_project

    return attribute_kept_in_project(model, parts[1]) is True


def _never_updated_in_project(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    """A protocol object (issue 26, principles 2 and 3): its scaled backward in a sibling method, its step
    here, and nothing in the project that updates its scaler (`_nothing_in_project_updates`)."""
    class_name = step.scope.class_name
    if not any(
        e.kind is EventKind.BACKWARD and e.scaled_by == scaler and e.scope.class_name == class_name and e.scope is not step.scope
        for e in model.events
    ):
        return False
    return _nothing_in_project_updates(model, step, scaler)


def _runs_scaled_backward(step: TrainingStep, scaler: str) -> bool:
    return any(e.scaled_by == scaler for e in step.of(EventKind.BACKWARD))


def _created_at(model: FileModel, step: TrainingStep, scaler: str):
    built = [b for b in model.scaler_bindings(scaler, step.scope) if b.call is not None]
    return (("scaler created", built[0].call),) if built else ()


def _scalers_stepped(step: TrainingStep) -> List[str]:
    seen: List[str] = []
    for event in step.of(EventKind.SCALER_STEP):
        if event.receiver not in seen:
            seen.append(event.receiver)
    return seen


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
        for arg in event.call.args:
            name = dotted_name(arg.value)
            if name is not None and (name == scaler or scaler.startswith(name + ".")):
                return True
        callee = (event.target or "").split(".")[-1]
        for function in model.functions_named(callee):
            scope = model.scope_of(function)
            if scope is not None and any(
                e.kind is EventKind.SCALER_UPDATE for e in scope.events
            ):
                return True
    return False


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
