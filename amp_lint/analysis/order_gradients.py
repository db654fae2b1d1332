"""The protocol's questions about the gradients and the scaler's own state: `zero_grad()` between a scaled
backward and the step that reads its gradients (AMP043), a closure handed to `GradScaler.step` (AMP025),
the scaler saved mid-iteration (AMP081). Each query yields `order.Breach`es; see `order`.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.iteration_limit import analysed_steps
from amp_lint.analysis.flow_queries import reaching, site_path, whole_scope_flow
from amp_lint.analysis.gradient_effects import optimizer_holds_parameters_of
from amp_lint.analysis.leaving_branches import ends_with
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.order import Breach
from amp_lint.analysis.paths import PROVED, Proof, weakest
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis.syntax import alternatives

# --- zero_grad() before the step (AMP043) ------------------------------------------------------------
ZERO_GRAD_SAME_OPTIMIZER = "zero-grad-same-optimizer"  # the stepped optimizer's own zero_grad: proved
ZERO_GRAD_MODULE = "zero-grad-module"  # a module's zero_grad, the optimizer built from its parameters
ZERO_GRAD_MODULE_ASSUMED = "zero-grad-module-assumed"  # a module's zero_grad, the optimizer not known


def zero_grads_before_step(model: FileModel) -> Iterator[Breach]:
    """A `zero_grad()` that turns the gradients of a scaled backward ZEROED before the scaler's step or
    unscale_ of them (`other`: that consumer, `cause`: the backward whose gradients it clears): the
    backward's gradients reach the zero_grad (no step of this optimizer between), and the zero_grad
    reaches the consumer with no backward between to refill them (a GAN: the generator's zero_grad, then
    its own backward). A zero_grad that leaves the loop (`optimizer.zero_grad(); break`, an OOM retry) has
    no path on. An `except RuntimeError` out-of-memory handler that drops the batch is not the normal
    path (fairseq's ddp_trainer): a breach there assumes the exception happens. Each call once."""
    reported: Set[int] = set()
    for step in analysed_steps(model):
        flow = flow_of(model, step)
        for consumer in step.of(EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
            scaler = consumer.receiver
            if consumer.target is None or not model.scaler_enabled(scaler, step.scope):
                continue
            backwards = [e for e in step.of(EventKind.BACKWARD) if e.scaled_by == scaler and flow.path(e, consumer) is not None]
            if not backwards:
                continue
            stepped = {e.target for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler}
            # A step of this optimizer consumes the gradients: a zero_grad after it clears nothing it needs.
            own_steps = [
                e for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler and e.target == consumer.target and e is not consumer
            ]
            refills = [e for e in step.of(EventKind.BACKWARD) if flow.path(e, consumer) is not None]
            unscales = [
                e for e in step.of(EventKind.SCALER_UNSCALE) if e.receiver == scaler and e.target == consumer.target
            ]
            for zero in step.of(EventKind.ZERO_GRAD):
                if id(zero.call) in reported:
                    continue
                if consumer.kind is EventKind.SCALER_STEP and _skipped_step(flow, backwards, zero, unscales):
                    continue
                proof = weakest(_reached_by(flow, backwards, zero, own_steps), flow.path(zero, consumer, refills))
                if proof is None:
                    continue
                if zero.target == consumer.target:
                    kind = ZERO_GRAD_SAME_OPTIMIZER
                elif zero.target is not None and not model.is_optimizer(zero.target) and len(stepped) == 1:
                    # A module's zero_grad: proved when the stepped optimizer is built here from that
                    # module's parameters (issue 26, principle 4), else assumed.
                    holds = optimizer_holds_parameters_of(model, consumer.target, zero.target, step.scope)
                    kind = ZERO_GRAD_MODULE if holds else ZERO_GRAD_MODULE_ASSUMED
                else:
                    continue
                reported.add(id(zero.call))
                yield Breach(
                    kind, zero, step, scaler, flow,
                    cause=_last_backward(flow, backwards, zero), other=consumer, proof=proof,
                    assumed="assumes the exception handler runs" if flow.in_handler(zero) else None,
                )


def _skipped_step(flow, backwards: List[Event], zero: Event, unscales: List[Event]) -> bool:
    """Issue 46, skip branches: the gradients are cleared after `unscale_` has recorded the inf checks on every
    path from the scaled backward (so `scaler.step` raises nothing and skips on an overflow), on a branch
    that leaves the iteration or the function (`...; scaler.step(opt); scaler.update(); break`): a
    deliberately skipped step, not a step on cleared gradients by mistake."""
    if not unscales or not zero.branches:
        return False
    branch = zero.branches[-1]
    body = branch.node.body if branch.taken else branch.node.orelse
    if isinstance(body, cst.Else):
        body = body.body
    if not isinstance(body, cst.BaseSuite) or not ends_with(body):
        return False
    return all(flow.path(backward, zero, unscales) is None for backward in backwards)


def _reached_by(flow, backwards: List[Event], zero: Event, own_steps: List[Event]) -> Optional[Proof]:
    """The best proof that some scaled backward reaches `zero` with no step of the optimizer between."""
    best = None
    for backward in backwards:
        proof = flow.path(backward, zero, own_steps)
        if proof is PROVED:
            return proof
        best = best or proof
    return best


def _last_backward(flow, backwards: List[Event], zero: Event) -> Event:
    """A backward that reaches `zero` with no other backward between (the one whose gradients it clears)."""
    for backward in backwards:
        if flow.path(backward, zero, [b for b in backwards if b is not backward]) is not None:
            return backward
    return next((b for b in backwards if flow.path(b, zero) is not None), backwards[0])


# --- a closure to GradScaler.step (AMP025) -----------------------------------------------------------
CLOSURE_KEYWORD = "closure-keyword"  # `step(opt, closure=...)`: GradScaler raises
CLOSURE_POSITIONAL = "closure-positional"  # `step(opt, closure)`: forwarded to the optimizer


def closures_to_scaler_step(model: FileModel) -> Iterator[Breach]:
    """A `scaler.step(optimizer, closure)` / `closure=` of torch's GradScaler (`node`: the closure): the
    closure re-runs a backward the scaler never scaled, and a keyword closure raises. Not for a project's
    own scaler class (Composer's ClosureGradScaler), nor a wrapper forwarding its caller's optional
    closure (`def step(self, closure=None): self.scaler.step(self.optimizer, closure)`)."""
    for event in model.events:
        if event.kind is not EventKind.SCALER_STEP or any(arg.star for arg in event.call.args):
            continue
        positional = [a for a in event.call.args if a.keyword is None]
        closure = [a for a in event.call.args if a.keyword is not None and a.keyword.value == "closure"]
        if len(positional) < 2 and not closure:
            continue
        if not model.scaler_enabled(event.receiver, event.scope):
            continue
        if scaler_may_be_custom(model, event.receiver, event.scope):
            continue
        extra = closure[0] if closure else positional[1]
        if _forwarded_optional(model, event, extra.value):
            continue
        yield Breach(CLOSURE_KEYWORD if closure else CLOSURE_POSITIONAL, event, scaler=event.receiver, node=extra.value)


def scaler_may_be_custom(model: FileModel, key: str, scope: Scope) -> bool:
    """Some assignment of the scaler builds it from a class that is not torch's (a project's subclass)."""
    for site in model.assignment_sites:
        if site.target != key:
            continue
        if key.startswith("self."):
            if site.scope.class_name != scope.class_name:
                continue
        elif site.scope not in list(scope.chain()):
            continue
        for candidate in alternatives(site.value):
            if isinstance(candidate, cst.Call):
                qualified = site.scope.names.qualify(candidate.func)
                if qualified not in names.GRAD_SCALER and "Scaler" in (dotted_name(candidate.func) or ""):
                    return True
    return False


def _forwarded_optional(model: FileModel, event, value) -> bool:
    """A parameter of the enclosing function that defaults to None, and still holds the caller's value at
    the step: a wrapper forwarding its caller's optional closure. An assignment of the name that a path
    runs before the step (`if closure is None: closure = self._default_closure`) makes it a closure."""
    scope = event.scope
    function = scope.node
    if not isinstance(value, cst.Name) or not isinstance(function, cst.FunctionDef):
        return False
    params = [*function.params.params, *function.params.kwonly_params, *function.params.posonly_params]
    for param in params:
        if param.name.value == value.value:
            if not (isinstance(param.default, cst.Name) and param.default.value == "None"):
                return False
            sites = model.assignments_in(scope, value.value)
            rebound = [
                site
                for site, _ in reaching(whole_scope_flow(model, scope), event, sites)
                if not (isinstance(site.value, cst.Name) and site.value.value == "None")
            ]
            return not rebound
    return False


# --- the scaler saved mid-iteration (AMP081) ---------------------------------------------------------
PICKLED_MID_ITERATION = "pickled-mid-iteration"  # GradScaler.__getstate__ asserts no inf checks pending
STATE_SAVED_BEFORE_UPDATE = "state-saved-before-update"  # state_dict() records a stale scale

_PICKLERS = frozenset({"torch.save", "pickle.dump", "pickle.dumps", "copy.deepcopy", "copy.copy"})


def scaler_saved_mid_iteration(model: FileModel) -> Iterator[Breach]:
    """A save of the scaler (`event`: the call site) that the iteration's work (`cause`: its unscale_/step
    when it pickles the scaler, its scaled backward for `state_dict()`) reaches with no update() between,
    and that an update() follows (`other`)."""
    for save, scaler, pickled in _saves(model):
        flow = whole_scope_flow(model, save.scope)
        updates = _scaler_calls(model, save, scaler, ("update",))
        starts = _scaler_calls(model, save, scaler, ("unscale_", "step") if pickled else ("backward",))
        reached = [(s, site_path(flow, s, save, updates)) for s in starts]
        start, into = next(((s, proof) for s, proof in reached if proof is not None), (None, None))
        if start is None:
            continue
        followed = [(u, site_path(flow, save, u)) for u in updates]
        update, onward = next(((u, proof) for u, proof in followed if proof is not None), (None, None))
        if update is None:
            continue
        kind = PICKLED_MID_ITERATION if pickled else STATE_SAVED_BEFORE_UPDATE
        yield Breach(kind, save, scaler=scaler, cause=start, other=update, proof=weakest(into, onward))


def _saves(model: FileModel) -> Iterator[Tuple[CallSite, str, bool]]:
    """(the call, the scaler's key, whether it pickles the scaler itself)."""
    for site in model.call_sites:
        if site.method == "state_dict" and site.receiver is not None and not site.call.args:
            key = dotted_name(site.receiver)
            if key is not None and model.is_scaler(key, site.scope) and model.scaler_enabled(key, site.scope):
                yield site, key, False
        elif site.qualified_name in _PICKLERS and site.call.args:
            key = dotted_name(site.call.args[0].value)
            if key is not None and model.is_scaler(key, site.scope) and model.scaler_enabled(key, site.scope):
                yield site, key, True


def _scaler_calls(model: FileModel, save: CallSite, scaler: str, methods) -> List[CallSite]:
    """Calls `scaler.<method>()` in the save's function and loop body; "backward": `scaler.scale(x).backward()`."""
    found = []
    for site in model.call_sites:
        if site.scope is not save.scope or site.loops != save.loops or site.method not in methods:
            continue
        receiver = site.receiver
        if site.method == "backward":
            if not (isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute)):
                continue
            if receiver.func.attr.value != "scale" or dotted_name(receiver.func.value) != scaler:
                continue
        elif receiver is None or dotted_name(receiver) != scaler:
            continue
        found.append(site)
    return found
