"""The call and reference hooks of the model's tree walk, and the classification of method calls.

`CallRecorder` is mixed into `builder.ModelBuilder` and reads its stacks (scope, statement, loops,
branches, autocast regions). For each call it records a `CallSite`; for the training-step calls it
records an `Event` (clipping, calls of helpers; backward and `autograd.grad` with the scaler that scaled
the loss through its `backward_calls.BackwardRecorder` part); `scaler.step()`, `opt.step()`, `x.update()`
and `zero_grad()` wait as a `RawCall` until the walk has seen every binding, then `classify_raw_calls`
decides which receivers are scalers and optimizers.
The reference hooks record uses of deprecated `torch.cuda.amp` names, and which gradient reads do not
depend on the loss scale (`p.grad.isnan()`, `p.grad /= n`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.backward_calls import BackwardRecorder
from amp_lint.analysis.events import AutocastRegion, Branch, Event, EventKind
from amp_lint.analysis.scaler_scan import drives_a_scaler
from amp_lint.analysis.file_model import CallSite, DeprecatedUse, FileModel, ScalerBinding, Scope, is_optimizer, is_scaler
from amp_lint.analysis.function_summary import argument_names
from amp_lint.analysis.linear_grads import keeps_the_scale
from amp_lint.analysis.names import dotted_name, receiver_name
from amp_lint.analysis.project_hooks import FOLLOWED_CALLS
from amp_lint.analysis.steps import callee_scope
from amp_lint.analysis.syntax import Loop, Statement, alternatives, argument

# Questions about gradients whose answer does not depend on the loss scale, and linear rescales.
_SCALE_INDEPENDENT_METHODS = frozenset({"isnan", "isinf", "isfinite", "isneginf", "isposinf", "div_", "mul_", "zero_"})
# Reads of a gradient that the scale cannot change: its finiteness, or only its shape, dtype and device (`full_like`).
_SCALE_INDEPENDENT_FUNCTIONS = frozenset(
    {"torch.isnan", "torch.isinf", "torch.isfinite", "torch.isneginf", "torch.isposinf", "torch.full_like",
     "torch.zeros_like", "torch.ones_like", "torch.empty_like"}
)


def is_grad(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == "grad"


def _followed(target: str) -> bool:
    """Is a dotted call (`mod.func`, `self.attr.method`) one that a summary provider can follow?"""
    return any(follows(target) for follows in FOLLOWED_CALLS) if FOLLOWED_CALLS else False


def _holder_attribute(receiver: str) -> bool:
    """`self.attr` or a plain name: it may hold an object of a class of this file (checked once the walk is
    done)."""
    return (receiver.count(".") == 1 and receiver.startswith("self.")) or ("." not in receiver and receiver != "self")


def _FOLLOWED_CALLS_HOOKED() -> bool:
    """Is a summary provider in place (a project index)? Without one no dotted call is followed."""
    return bool(FOLLOWED_CALLS)




@dataclass(eq=False)
class RawCall:
    """A method call collected during the walk, classified once every binding in the file is known."""

    call: cst.Call
    receiver: str
    method: str
    statement: Statement
    small_statement: Optional[cst.BaseSmallStatement]
    scope: Scope
    loops: Tuple[Loop, ...]
    branches: Tuple[Branch, ...]
    regions: Tuple[AutocastRegion, ...]
    index: int
    flow_statement: Optional[cst.CSTNode] = None


class CallRecorder(BackwardRecorder):
    """The `visit_Call` / reference hooks of `ModelBuilder` (its state is set up in `ModelBuilder.__init__`)."""

    # --- calls ---
    def _context(self):
        statement = self.statement_stack[-1] if self.statement_stack else self.module
        return (
            statement,
            self.small_statement if self.statement_stack and isinstance(statement, cst.SimpleStatementLine) else None,
            self.scope,
            tuple(self.loop_stack[-1]),
            tuple(self.branch_stack[-1]),
            tuple(self.region_stack[-1]),
        )

    def _add_event(self, kind: EventKind, call: cst.Call, pending: bool = False, **fields) -> Event:
        statement, small, scope, loops, branches, regions = self._context()
        self.counter += 1
        event = Event(
            kind=kind,
            call=call,
            statement=statement,
            small_statement=small,
            scope=scope,
            loops=loops,
            branches=branches,
            regions=regions,
            index=self.counter,
            flow_statement=self.flow_stack[-1] if self.flow_stack else None,
            **fields,
        )
        if not pending:
            scope.events.append(event)
            self.events.append(event)
        return event

    def resolve_followed_calls(self, model: FileModel, before_classification: bool) -> None:
        """Turn the dotted calls held back by the walk into CALL events where a summary provider follows them.

        Asking a provider reads project modules (their facts: an `ast` parse each), so it is asked only
        where the answer can matter: before the scaler calls are classified, for calls of a method or
        function named like one of this file (`runner.fit_epoch()`: AMP013 matches callers by name);
        after, for calls in a function that drives a scaler (the only ones whose summaries the provider
        gives: `scaler_scan.drives_a_scaler`), or everywhere with `follow_every_call`. On torch's 460 kB
        distributed_test.py this spares reading some fifty modules for its thousand test functions.
        """
        kept = []
        for event in self.pending_follows:
            method = (event.target or "").rpartition(".")[2]
            if before_classification:
                wanted = method in self.functions
            else:
                wanted = self.follow_every_call or drives_a_scaler(event.scope)
            if wanted and (_followed(event.target) or self._holds_a_class_of_this_file(event)):
                event.scope.events.append(event)
                self.events.append(event)
            elif before_classification:
                kept.append(event)
        self.pending_follows = kept if before_classification else []

    def _holds_a_class_of_this_file(self, event: Event) -> bool:
        """`self.clipper.clip()` where the class's methods assign `self.clipper = Clipper(...)`, a class of
        this file, and nothing else: the call is followed (`gradient_effects`) without a project index."""
        parts = (event.target or "").split(".")
        class_name = event.scope.class_name
        if not self.classes:
            return False
        by_target = getattr(self, "_sites_by_target", None)
        if by_target is None:
            by_target = self._sites_by_target = {}
            for site in self.assignment_sites:
                by_target.setdefault(site.target, []).append(site)
        if len(parts) == 2 and parts[0] != "self":  # `net = Net(); net.clip_grad_norm_(1.0)`: a local name
            values = [site.value for site in by_target.get(parts[0], ()) if site.scope is event.scope]
        elif len(parts) == 3 and parts[0] == "self" and class_name is not None:
            values = [site.value for site in by_target.get(f"self.{parts[1]}", ()) if site.scope.class_name == class_name]
        else:
            return False
        return bool(values) and all(
            isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value in self.classes for v in values
        )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value in ("isinstance", "issubclass"):
            for arg in node.args[1:]:  # a type check constructs nothing deprecated
                for candidate in alternatives(arg.value):
                    elements = candidate.elements if isinstance(candidate, cst.Tuple) else [candidate]
                    for element in elements:
                        self.skip_reference.add(getattr(element, "value", element))
        qualified = self.qualify(func)
        self._skip_scale_independent_grad_use(node, func, qualified)
        statement, small, scope, loops, branches, regions = self._context()
        self.call_sites.append(
            CallSite(
                node,
                qualified,
                dotted_name(func),
                statement,
                small,
                scope,
                loops,
                branches,
                regions,
                self.counter,
                len(self.call_sites) + len(self.assignment_sites),
            )
        )
        if qualified == "functools.partial" and node.args:
            self.factory_positions.add(node.args[0].value)
        if qualified is not None:
            if qualified in names.DEPRECATED_AMP:
                self._add_deprecated(func, qualified, node)
            if qualified in names.AUTOCAST:
                self.autocast_calls.append((node, qualified, self.scope))
            elif qualified in names.GRAD_SCALER:
                statement, _, scope, loops, _, _ = self._context()
                self.scaler_call_sites.append((node, qualified, scope, loops, statement))
            elif qualified in names.CLIP_GRAD:
                self._add_event(EventKind.CLIP, node, target=qualified)
                return
            elif qualified in names.AUTOGRAD_BACKWARD or qualified in names.AUTOGRAD_GRAD:
                kind = EventKind.BACKWARD if qualified in names.AUTOGRAD_BACKWARD else EventKind.AUTOGRAD_GRAD
                loss = argument(node, 0, "tensors" if kind is EventKind.BACKWARD else "outputs")
                self._add_backward(kind, node, loss.value if loss else None)
                return
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "backward" and not (isinstance(func.value, cst.Name) and func.value.value == "self"):
                self._maybe_backward(node, func.value)
                return
            receiver = receiver_name(func.value)
            if receiver is not None and method in ("step", "update", "unscale_", "scale", "zero_grad"):
                statement, small, scope, loops, branches, regions = self._context()
                self.counter += 1
                self.raw_calls.append(
                    RawCall(
                        node,
                        receiver,
                        method,
                        statement,
                        small,
                        scope,
                        loops,
                        branches,
                        regions,
                        self.counter,
                        self.flow_stack[-1] if self.flow_stack else None,
                    )
                )
                return
            if "unscale" in method:
                self._add_event(EventKind.CALL, node, target=dotted_name(func) or method)
                return
            if receiver == "self":
                self._add_event(EventKind.CALL, node, target=f"self.{method}")
            elif receiver is not None and (_FOLLOWED_CALLS_HOOKED() or _holder_attribute(receiver)):
                # `helpers.clip(model)`, `self.callback.on_after_backward()`: a function of another module
                # that a project index can summarise (only with one: `project_hooks.FOLLOWED_CALLS`). Asked
                # once the walk is done (`resolve_followed_calls`), for the functions where it matters.
                self.pending_follows.append(self._add_event(EventKind.CALL, node, target=f"{receiver}.{method}", pending=True))
            elif receiver is None and isinstance(func.value, cst.Call) and _FOLLOWED_CALLS_HOOKED():
                # `Callback(args).on_backward(self, ...)`: a method of an instance built right here, followed
                # when its class is a project class of another module (`instance_calls`)
                ctor = dotted_name(func.value.func)
                if ctor is not None:
                    self.pending_follows.append(self._add_event(EventKind.CALL, node, target=f"{ctor}().{method}", pending=True))
        elif isinstance(func, cst.Name):
            self._add_event(EventKind.CALL, node, target=func.value)
        elif isinstance(func, cst.Call):
            self._getattr_call(node, func)

    def _getattr_call(self, node: cst.Call, func: cst.Call) -> None:
        """`getattr(self, "clip_gradient")()`: a literal attribute name is the method it names (issue 26,
        principle 3), recorded as `self.clip_gradient()` is; another name or a default is unknown."""
        if not (isinstance(func.func, cst.Name) and func.func.value == "getattr" and len(func.args) == 2):
            return
        holder, attribute = func.args[0].value, func.args[1].value
        if not isinstance(attribute, cst.SimpleString) or any(arg.keyword or arg.star for arg in func.args):
            return
        name = attribute.evaluated_value
        if not isinstance(name, str) or not name.isidentifier():
            return
        receiver = dotted_name(holder)
        if receiver == "self":
            self._add_event(EventKind.CALL, node, target=f"self.{name}")
        elif receiver is not None and _FOLLOWED_CALLS_HOOKED():
            self.pending_follows.append(self._add_event(EventKind.CALL, node, target=f"{receiver}.{name}", pending=True))

    def _skip_scale_independent_grad_use(self, call: cst.Call, func: cst.BaseExpression, qualified: Optional[str]) -> None:
        """`p.grad.isnan()`, `torch.isfinite(p.grad)`, `p.grad.div_(n)`: true whatever the scale (torch's
        own distributed_test.py checks `p.grad.isnan().any()` right after a scaled backward)."""
        if isinstance(func, cst.Attribute) and func.attr.value in _SCALE_INDEPENDENT_METHODS:
            inner = func.value
            if isinstance(inner, cst.Attribute) and inner.attr.value == "data":
                inner = inner.value
            if is_grad(inner):
                self.skip_reference.add(inner)
        if qualified in _SCALE_INDEPENDENT_FUNCTIONS and call.args and is_grad(call.args[0].value):
            self.skip_reference.add(call.args[0].value)

    def _add_deprecated(self, func: cst.BaseExpression, qualified: str, call: Optional[cst.Call]) -> None:
        self.skip_reference.add(func)
        decorator = self.decorator_nodes.get(call) if call is not None else None
        self.deprecated_uses.append(DeprecatedUse(func, qualified, call, decorator, self.scope))

    def visit_Decorator(self, node: cst.Decorator) -> None:
        expr = node.decorator
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = self.qualify(expr)
            if qualified in names.DEPRECATED_AMP:
                self.skip_reference.add(expr)
                self.deprecated_uses.append(DeprecatedUse(expr, qualified, None, node, self.scope))
        elif isinstance(expr, cst.Call):
            self.decorator_nodes[expr] = node

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        if node.attr.value == "grad" and isinstance(node.value, cst.Name) and node not in self.skip_reference:
            if any(node.value.value in names_ for names_ in self.parameter_names) and not keeps_the_scale(node, self.scope.node, self.__dict__.setdefault("_linear", {})):
                self._add_event(EventKind.GRAD_READ, node, target=node.value.value)
        # A deprecated API used without being called (`partial(torch.cuda.amp.autocast, ...)`).
        if node in self.skip_reference:
            return False
        qualified = self.qualify(node)
        if qualified in names.DEPRECATED_AMP:
            # Only what runs the deprecated code: calls (recorded in visit_Call), decorators, and factories.
            # A type used as a dict key, in isinstance or in an annotation warns about nothing.
            if node in self.factory_positions:
                self.deprecated_uses.append(DeprecatedUse(node, qualified, None, None, self.scope))
            return False
        return None

    def visit_Name(self, node: cst.Name) -> None:
        if node in self.skip_reference:
            return
        resolved = self.scope.names.lookup(node.value)
        if resolved is None:
            return
        if resolved in names.DEPRECATED_AMP:
            if node in self.factory_positions:
                self.deprecated_uses.append(DeprecatedUse(node, resolved, None, None, self.scope))
            else:
                # Still a use of the import (a fix rewriting the import must not break it).
                self.deprecated_value_refs.append((node, self.scope))
        elif resolved in names.DEPRECATED_AMP_MODULES:
            self.amp_module_refs.append((node, self.scope))

    def visit_Annotation(self, node: cst.Annotation) -> bool:
        return False  # `-> torch.cuda.amp.GradScaler` names a type; nothing deprecated runs

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False  # names in import statements are bindings, not uses

    def visit_Param(self, node: cst.Param) -> None:
        self.skip_reference.add(node.name)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.skip_reference.add(node.keyword)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self.skip_reference.add(node.target)
        elif is_grad(node.target):
            self.skip_reference.add(node.target)  # `p.grad = None` writes the gradient; it reads no value

    def visit_FunctionDef_name(self, node: cst.FunctionDef) -> None:
        self.skip_reference.add(node.name)

    def visit_ClassDef_name(self, node: cst.ClassDef) -> None:
        self.skip_reference.add(node.name)

    def visit_Attribute_attr(self, node: cst.Attribute) -> None:
        self.skip_reference.add(node.attr)

    # --- after the walk ---
    def propagate_through_calls(self, model: FileModel) -> None:
        """A scaler or optimizer passed to a function of this file is one inside it too, whatever its name."""
        for event in [e for e in self.events if e.kind is EventKind.CALL]:
            callee = callee_scope(model, event)
            if callee is None:
                continue
            for param, passed in argument_names(callee, event.call).items():
                if is_scaler(passed, event.scope, model) and not model.scaler_bindings(param, callee):
                    origin = model.scaler_bindings(passed, event.scope)
                    enabled = None if not origin else (True if any(b.is_enabled for b in origin) else False)
                    model.scalers.setdefault(param, []).append(ScalerBinding(key=param, enabled=enabled, scope=callee))
                elif is_optimizer(passed, model):
                    model.optimizer_keys.add(param)

    def classify_raw_calls(self, model: FileModel) -> None:
        optimizer_args = set()
        for raw in self.raw_calls:
            if raw.method in ("step", "unscale_") and is_scaler(raw.receiver, raw.scope, model) and raw.call.args:
                key = dotted_name(raw.call.args[0].value)
                if key:
                    optimizer_args.add(key)
        model.optimizer_keys |= optimizer_args
        for raw in self.raw_calls:
            fields = dict(
                statement=raw.statement,
                small_statement=raw.small_statement,
                scope=raw.scope,
                loops=raw.loops,
                branches=raw.branches,
                regions=raw.regions,
                index=raw.index,
                receiver=raw.receiver,
                flow_statement=raw.flow_statement,
            )
            if is_scaler(raw.receiver, raw.scope, model):
                if raw.method == "step":
                    target = dotted_name(raw.call.args[0].value) if raw.call.args else None
                    event = Event(kind=EventKind.SCALER_STEP, call=raw.call, target=target, **fields)
                elif raw.method == "update":
                    event = Event(kind=EventKind.SCALER_UPDATE, call=raw.call, **fields)
                elif raw.method == "unscale_":
                    target = dotted_name(raw.call.args[0].value) if raw.call.args else None
                    event = Event(kind=EventKind.SCALER_UNSCALE, call=raw.call, target=target, **fields)
                elif raw.method == "scale":
                    if raw.call in self.consumed_scale_calls:
                        continue
                    event = Event(kind=EventKind.SCALER_SCALE, call=raw.call, **fields)
                else:
                    continue
            elif raw.method == "step" and is_optimizer(raw.receiver, model, raw.scope):
                event = Event(kind=EventKind.OPTIMIZER_STEP, call=raw.call, target=raw.receiver, **fields)
            elif raw.method == "zero_grad":
                event = Event(kind=EventKind.ZERO_GRAD, call=raw.call, target=raw.receiver, **fields)
            else:
                continue
            raw.scope.events.append(event)
            model.events.append(event)
