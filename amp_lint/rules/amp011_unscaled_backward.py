from __future__ import annotations

from typing import Iterator, Optional, Tuple

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, removal_target
from amp_lint.analysis.events import SCALER_KINDS, Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.gradient_effects import class_builds_scaler
from amp_lint.analysis.paths import PROVED, Proof
from amp_lint.analysis.scaled_arguments import called_with_a_scaled_value, parameter_behind
from amp_lint.analysis.scaler_flow import assumption_text, flow_of
from amp_lint.analysis.flow_queries import site_path
from amp_lint.analysis.function_summary import argument_names
from amp_lint.analysis.steps import handed_on
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._accelerate import unscaled_backwards
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class UnscaledBackward(Rule):
    """
    ## What it does
    Finds a backward pass on the unscaled loss in an iteration where a `GradScaler` steps or unscales the
    optimizer: `loss.backward()` next to `scaler.step(optimizer)`, including a `scaler.scale(loss)` whose
    result is thrown away. A `backward()` method run once per batch counts too when its class builds the
    GradScaler and steps it in a sibling method under the same condition (`if self.activated:`). So does
    `loss.backward()` before the step of an optimizer prepared by an `Accelerator` that may run fp16 (unsafe
    fix: `accelerator.backward(loss)`, which also divides by the accumulation steps).

    ## Why is this bad?
    `scaler.step(optimizer)` always divides the gradients by the current scale. If backward ran on the
    unscaled loss, either `scale()` was never called (`AssertionError: Attempted step but _scale is
    None`) or its result was discarded, and every update is divided by 65536: no learning, and no
    error.

    ## Example
    ```python
    scaler.scale(loss)  # result discarded
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe. `loss.backward(args)` becomes `scaler.scale(loss).backward(args)` (arguments such as
    `retain_graph` are kept; `torch.autograd.backward(loss, ...)` gets `scaler.scale(loss)`), and a
    discarded `scaler.scale(loss)` statement is removed. A backward reached through a helper is fixed in the
    helper only when the helper is handed the scaler and backpropagates on its branch for it (`if scaler
    is not None:`); otherwise the finding has no fix (an edit of a helper on one caller's behalf).

    ## References
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    - `torch/amp/grad_scaler.py`: `GradScaler.step`, `_check_scale_growth_tracker`
    """

    code = "AMP011"
    name = "unscaled-backward"
    summary = "GradScaler in use, but backward runs on the unscaled loss"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"[Ss]caler|\bAccelerator\b", r"\bbackward\b")

    valid = [
        # The loss scaled by a method of the class that returns `self.scaler.scale(loss)` (ColossalAI's
        # TorchAMPOptimizer.backward / scale_loss).
        """
import torch
class AmpOptimizer:
    def __init__(self, optim):
        self.optim = optim
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        scaled_loss = self.scale_loss(loss)
        scaled_loss.backward()

    def step(self):
        self.scaler.step(self.optim)
        self.scaler.update()

    def scale_loss(self, loss):
        return self.scaler.scale(loss)
""",
        # The fp32 backward in the else of `if self._scaler is not None`, the unscale_ in a helper under the
        # same test (allennlp's gradient_descent_trainer).
        """
class Trainer:
    def rescale_gradients(self):
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
    def train(self, loader):
        for batch in loader:
            loss = self.model(batch)
            if self._scaler is not None:
                MixedPrecisionBackwardCallback().on_backward(self, loss)
            else:
                loss.backward()
            self.rescale_gradients()
            if self._scaler is not None:
                self._scaler.step(self.optimizer)
                self._scaler.update()
            else:
                self.optimizer.step()
""",
        # The scaled loss passed to a helper that backpropagates it (flair's `self._backward`).
        """
import torch
class Trainer:
    def _backward(self, loss):
        loss.backward()
    def train(self, loader, scaler):
        for batch in loader:
            for step in batch:
                loss = self.model(step)
                self._backward(scaler.scale(loss))
            scaler.unscale_(self.optimizer)
            scaler.step(self.optimizer)
            scaler.update()
""",
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The fp32 branch of a switchable loop.
        """
for x, y in loader:
    loss = loss_fn(model(x), y)
    if use_amp:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
""",
        # Two separate `if`s on the same switch.
        """
for x, y in loader:
    loss = loss_fn(model(x), y)
    if self.use_amp:
        self.scaler.scale(loss).backward()
    else:
        loss.backward()
    if self.use_amp:
        self.scaler.step(self.optimizer)
        self.scaler.update()
    else:
        self.optimizer.step()
""",
        # Scaled through a name.
        """
for x, y in loader:
    loss = loss_fn(model(x), y)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The fp32 case of a `match` on the precision, with the scaler off in that case: the two backwards
        # are on different paths (the lexical model knew only `if`/`else` and took the cases for one pass
        # through the code).
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
for x, y in loader:
    loss = loss_fn(model(x), y)
    match precision:
        case "fp16":
            scaler.scale(loss).backward()
        case _:
            loss.backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A scaler handed in, and a backward under no test of it: the caller may hand a disabled or custom
        # scaler, or none; silent (issue 26, principle 3).
        """
class Strategy:
    def __init__(self, optimizer, scaler=None):
        self.optimizer, self.scaler = optimizer, scaler
    def backward(self):
        self.loss.backward()
    def optimizer_step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
        # `if scaler is not None:` guards.
        """
def train_step(loss, optimizer, scaler=None):
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
""",
        # The scaled loss under its old name, reduced before the backward (alf's trainer).
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x)
    loss = scaler.scale(loss)
    loss.mean().backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A typing cast around the scaled loss (ignite's supervised_training_step_amp).
        """
from typing import cast
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x).sum()
    cast(torch.Tensor, scaler.scale(loss)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A disabled scaler is a no-op, so an unscaled backward is correct.
        """
import torch
scaler = torch.amp.GradScaler(enabled=False)
for x in loader:
    loss = model(x).sum()
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
""",
    ]
    invalid = [
        # The step is in a call the scaler is handed to, on an object this file does not show (nerfstudio's
        # `Optimizers.optimizer_scaler_step_some`); update() after it proves that call stepped the scaler.
        Invalid(
            """
import torch
class Trainer:
    def train_iteration(self, step):
        with torch.autocast("cuda"):
            loss = self.pipeline.get_train_loss(step)
        loss.backward()
        self.optimizers.scaler_step_all(self.grad_scaler)
        self.grad_scaler.update()
""",
            fixed="""
import torch
class Trainer:
    def train_iteration(self, step):
        with torch.autocast("cuda"):
            loss = self.pipeline.get_train_loss(step)
        self.grad_scaler.scale(loss).backward()
        self.optimizers.scaler_step_all(self.grad_scaler)
        self.grad_scaler.update()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
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
""",
        ),
        Invalid(
            """
class Trainer:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def step(self, loss):
        loss.backward(retain_graph=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            fixed="""
class Trainer:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def step(self, loss):
        self.scaler.scale(loss).backward(retain_graph=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
        ),
        # Several methods make one step: the analysis follows `self.backward()` and `self.optimizer_step()`.
        Invalid(
            """
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        loss.backward()

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def train(self, loader):
        for batch in loader:
            loss = self.model(batch).sum()
            self.backward(loss)
            self.optimizer_step()
"""
        ),
        # Issue 26, principle 2: a scaler handed in (`scaler=None`), the backward under `if self.scaler is not
        # None:`: in use there, whoever built it; its sibling's step divides unscaled gradients (avalanche).
        Invalid(
            """
class Strategy:
    def __init__(self, optimizer, scaler=None):
        self.optimizer = optimizer
        self.scaler = scaler

    def backward(self):
        if self.scaler is not None:
            self.loss.backward()

    def optimizer_step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
""",
            fixed="""
class Strategy:
    def __init__(self, optimizer, scaler=None):
        self.optimizer = optimizer
        self.scaler = scaler

    def backward(self):
        if self.scaler is not None:
            self.scaler.scale(self.loss).backward()

    def optimizer_step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
""",
        ),
        Invalid(
            """
import torch
for x in loader:
    loss = model(x).sum()
    torch.autograd.backward(loss)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
for x in loader:
    loss = model(x).sum()
    torch.autograd.backward(scaler.scale(loss))
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        reported = set()
        for step in model.steps:
            for backward in step.of(EventKind.BACKWARD):
                if backward.scaled_by is not None or _handed_a_scaled_loss(model, backward):
                    continue
                scaler_event, proof = _consuming_scaler_event(model, step, backward)
                if scaler_event is None:
                    continue
                scaler = scaler_event.receiver
                flow = flow_of(model, step)
                dangling = [
                    e
                    for e in step.scaler_events(scaler, EventKind.SCALER_SCALE)
                    if e.small_statement is not None
                    and isinstance(e.small_statement, cst.Expr)
                    and site_path(flow, e, backward) is not None
                ]
                note = " (the result of `scaler.scale(...)` is discarded)" if dangling else ""
                reported.add(id(backward.call))
                yield self.finding(
                    backward.call,
                    f"`{code_of(backward.call)}` runs on the unscaled loss while {_consumer(scaler, scaler_event)} "
                    f"the gradients{note}; use `{scaler}.scale({backward.target or 'loss'}).backward()`",
                    fix=_helper_scale_fix(model, backward, scaler) if backward.in_helper else _scale_fix(model, backward, scaler, dangling),
                    context=step.scope.name,
                    related=self.through_helpers(backward) + self.through_helpers(scaler_event),
                    assumption=assumption_text(proof),
                )
        for backward, stepped in _per_call_backwards(model):
            if id(backward.call) in reported:
                continue
            reported.add(id(backward.call))
            scaler = stepped.receiver
            yield self.finding(
                backward.call,
                f"`{code_of(backward.call)}` runs on the unscaled loss while `{scaler}`, "
                f"{'which this class builds' if class_builds_scaler(model, scaler, stepped.scope) else 'tested present here'}, "
                f"{'unscales the gradients' if stepped.kind is EventKind.SCALER_UNSCALE else 'steps the optimizer'} in `{stepped.scope.name}`; use `{scaler}.scale({backward.target or 'loss'}).backward()`",
                fix=_scale_fix(model, backward, scaler, []),
                context=backward.scope.name,
                related=(("the scaler's unscale_" if stepped.kind is EventKind.SCALER_UNSCALE else "the scaler's step", stepped.call),),
            )
        for backward, stepped, message, fix in unscaled_backwards(model):  # the scaler an Accelerator owns (issue 46)
            if id(backward.call) not in reported:
                yield self.finding(backward.call, message, fix=fix, context=backward.scope.name, related=(("the prepared optimizer's step", stepped.call),))


def _per_call_backwards(model: FileModel):
    """(unscaled backward, scaler step) for a method called once per batch (no loop of its own, no scaler
    call) whose class builds a GradScaler (`self.scaler = GradScaler(...)`; one handed in only where the
    backward runs under a test that it is there, `if self.scaler is not None:`) and steps it
    in a sibling method (colbert's and mmengine's `backward()` / `step()` pairs; issue 26, principle 2: the
    protocol applies per call). The scaler's step consumes the backward's gradients when their branch
    conditions agree (`if self.activated:` on both) and no plain `optimizer.step()` of the class could be
    the backward's own path. Silent when a call of the method in this file passes a scaled loss."""
    for scope in model.scopes:
        # issue 46: a closure defined in a method (L-BFGS's) is no method called once per batch
        if not scope.is_function or scope.class_name is None or (scope.parent is not None and scope.parent.is_function):
            continue
        backwards = [e for e in scope.events if e.kind is EventKind.BACKWARD and e.scaled_by is None and not e.loops]
        if not backwards or any(e.kind in SCALER_KINDS or e.scaled_by is not None for e in scope.events):
            continue
        siblings = [s for s in model.scopes if s.is_function and s.class_name == scope.class_name and s is not scope]
        steps = [
            (e, class_builds_scaler(model, e.receiver, s))
            for s in siblings
            for e in s.events
            # the scaler's step divides the gradients by the scale, and so does its unscale_ (accelerate's
            # `unscale_gradients()`): either consumes the backward's gradients as scaled ones
            if e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE)
        ]
        plain = [e for s in siblings + [scope] for e in s.events if e.kind is EventKind.OPTIMIZER_STEP]
        if not steps or called_with_a_scaled_value(model, scope):
            continue
        for backward in backwards:
            if backward.loss is None:
                continue
            if any(backward.compatible(e) for e in plain):
                continue
            # on a path where the scaler is None or off (`else:` of `if self.scaler is not None:`), nothing of
            # its consumes the backward's gradients
            off = backward.failing_tests
            consumer = next(
                (e for e, built in steps if backward.compatible(e) and e.receiver not in off and (built or _tested_present(backward, e.receiver))),
                None,
            )
            if consumer is not None:
                yield backward, consumer


def _tested_present(backward: Event, scaler: str) -> bool:
    """The backward runs only where a test asserted the scaler is there (the body of `if self.scaler is not
    None:`): a scaler handed in (avalanche's strategies take `scaler=None`) is then in use on this path,
    whoever built it."""
    return any(holds and key == scaler for key, holds in (b.condition for b in backward.branches))


def _handed_a_scaled_loss(model: FileModel, backward: Event) -> bool:
    """The loss is a parameter of the function the backward is written in, and a call of that function may
    hand it a scaled one (fairchem's `_backward(loss)`, issue 46 principle 1): not known unscaled."""
    param = parameter_behind(backward.loss, backward.scope)
    return param is not None and called_with_a_scaled_value(model, backward.scope, param)


def _consumer(scaler: str, event: Event) -> str:
    if event.kind is EventKind.SCALER_UPDATE:  # `_update_after_a_hidden_step`
        return f"a call handed `{scaler}` steps it before `{scaler}.update()` (which raises otherwise), unscaling"
    return f"`{scaler}.{'step(...)' if event.kind is EventKind.SCALER_STEP else 'unscale_(...)'}` unscales"


def _consuming_scaler_event(model: FileModel, step: TrainingStep, backward: Event) -> Tuple[Optional[Event], Optional[Proof]]:
    """The enabled scaler's step/unscale_ that will consume this backward's gradients, if any, and how sure
    the path from the backward to it is."""
    flow = flow_of(model, step)
    for scaled in step.of(EventKind.BACKWARD):
        if scaled.scaled_by is None:
            continue
        if site_path(flow, scaled, backward) is None and site_path(flow, backward, scaled) is None:
            return None, None  # the unscaled backward is the fp32 alternative of a scaled one: no path has both
    # Its gradients go to an optimizer the scaler never steps, stepped directly (an fp32 reference model's).
    through_scaler = {e.target for e in step.of(EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE)}
    if any(o.target not in through_scaler and flow.path(backward, o) is PROVED for o in step.of(EventKind.OPTIMIZER_STEP)):
        return None, None
    found, best = None, None
    for event in step.of(EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
        # The scaler consumes these gradients on some path (not on the other side of an if/else).
        if not model.scaler_enabled(event.receiver, step.scope):
            continue
        proof = flow.path(backward, event)
        if proof is not None and (found is None or (proof is PROVED and best is not PROVED)):
            found, best = event, proof
    if found is None:
        found, best = _update_after_a_hidden_step(model, step, backward)
    return found, best


def _update_after_a_hidden_step(model: FileModel, step: TrainingStep, backward: Event) -> Tuple[Optional[Event], Optional[Proof]]:
    """`loss.backward()`, then `helper.step_all(scaler)`, then `scaler.update()` (nerfstudio's trainer): the
    iteration shows no step or unscale_ of the scaler, yet update() raises without the inf checks they
    record, so the call the scaler was handed to steps it, with these gradients. The update stands for
    that hidden step."""
    if any(e.receiver is not None for e in step.of(EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE)):
        return None, None
    flow = flow_of(model, step)
    for update in step.of(EventKind.SCALER_UPDATE):
        scaler = update.receiver
        if scaler is None or update.call.args or not model.scaler_enabled(scaler, step.scope):
            continue
        hidden = [
            site
            for site in model.call_sites
            if site.scope is backward.scope and backward.index <= site.index < update.index and scaler in handed_on(model, site)
        ]
        proof = flow.path(backward, update) if hidden else None
        if proof is not None:
            return update, proof
    return None, None


def _helper_scale_fix(model: FileModel, backward: Event, scaler: str) -> Optional[Fix]:
    """An unscaled backward in a helper of this file that is handed the scaler (open_clip's
    `backward(total_loss, scaler)`: `if scaler is not None: scaler.scale(loss).backward() else:
    loss.backward()`). Fixes never edit a helper on one caller's behalf; but a helper that takes the scaler
    and backpropagates on the branch where it holds one (`if scaler is not None:` / `if scaler:`) means the
    scaler protocol for every caller: the backward there scales with its own parameter. Not when a call in
    this file hands the helper an already scaled loss, or through more than one call."""
    trail = backward.trail()
    helper = backward.scope
    if len(trail) != 1 or helper is None or helper.node is None or backward.loss is None:
        return None
    if called_with_a_scaled_value(model, helper):
        return None
    names = argument_names(helper, trail[0].call)
    params = [p for p, arg in names.items() if arg == scaler]
    if len(params) != 1:
        return None
    param = params[0]
    own = backward.branches[len(trail[0].branches) :]  # the helper's own `if`s around the backward
    present = {(f"{param} is not None", True), (param, True), (f"{param} is None", False), (f"not {param}", False)}
    if not any((code_of(b.node.test), b.taken) in present for b in own):
        return None
    return _scale_fix(model, backward, param, [])


def _scale_fix(model: FileModel, backward: Event, scaler: str, dangling) -> Optional[Fix]:
    """Backpropagate `scaler.scale(loss)` instead of `loss`, in either spelling of the backward call."""
    if backward.loss is None:
        return None
    builder = FixBuilder(model.module)

    def scale(updated: cst.CSTNode) -> cst.CSTNode:
        scaled = builder.expression(f"{scaler}.scale(__loss__)")
        inner = updated.with_changes(lpar=(), rpar=()) if hasattr(updated, "lpar") else updated
        return scaled.with_changes(args=(cst.Arg(value=inner),))

    builder.replace(backward.loss, scale)
    for event in dangling:
        builder.remove(removal_target(event.statement, event.small_statement))
    return builder.build(f"Backpropagate `{scaler}.scale(...)`", Applicability.SAFE)
