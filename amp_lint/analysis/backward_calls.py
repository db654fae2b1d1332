"""The backward hooks of the model's tree walk: which loss each backward runs on, and which scaler scaled it.

`BackwardRecorder` is part of `calls.CallRecorder` (mixed into `builder.ModelBuilder`, whose stacks it
reads). `loss.backward()` and `torch.autograd.backward/grad(...)` become BACKWARD / AUTOGRAD_GRAD events
with the scaler that scaled the loss (`scaler.scale(loss).backward()`; a name bound to
`scaler.scale(...)` earlier in the scope; a container of scaled tensors; a helper of this file that
returns `self.scaler.scale(loss)`), through methods that keep the scale (`.mean()`, `cast(T, x)`, `x[0]`).
`accelerator.backward(loss)` and other frameworks' wrappers are kept apart (`wrapper_backwards`).
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import alternatives, code_of, own_returns, tensor_source

# Receivers whose `.backward(loss)` is a framework's own wrapper (Accelerate, Fabric, DeepSpeed, apex),
# not `Tensor.backward`: they scale, unscale and step on the user's behalf.
_WRAPPER_RECEIVER = re.compile(r"accelerator|fabric|engine|deepspeed|trainer|strategy|booster|^amp$|^self$")




class BackwardRecorder:
    """The backward hooks of `ModelBuilder` (its state is set up in `ModelBuilder.__init__`)."""

    def _maybe_backward(self, call: cst.Call, receiver: cst.BaseExpression) -> None:
        """`loss.backward()` is a backward site; `accelerator.backward(loss)` is a framework's wrapper."""
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
            if receiver.func.attr.value == "scale" and receiver.args:
                scaler = dotted_name(receiver.func.value)
                if scaler is not None:
                    self.consumed_scale_calls.add(receiver)
                    self._add_backward(EventKind.BACKWARD, call, receiver.args[0].value, scaler, receiver)
                    return
        key = dotted_name(receiver)
        positional = [a for a in call.args if a.keyword is None]
        if key is not None:
            last = key.split(".")[-1]
            if _WRAPPER_RECEIVER.search(last) and "loss" not in last.lower():
                if positional and last != "self":
                    self._add_wrapper_backward(call, positional[0].value)
                return
            if positional and "loss" not in last.lower():
                # Tensor.backward's first parameter is `gradient`; `x.backward(loss)` is someone's wrapper.
                return
        elif positional:
            return
        self._add_backward(EventKind.BACKWARD, call, receiver)

    def _add_wrapper_backward(self, call: cst.Call, loss: cst.BaseExpression) -> None:
        """`accelerator.backward(loss)`: the framework scales and steps, but it is still a backward pass."""
        statement, small, scope, loops, branches, regions = self._context()
        self.counter += 1
        self.wrapper_backwards.append(
            Event(
                kind=EventKind.BACKWARD,
                call=call,
                statement=statement,
                small_statement=small,
                scope=scope,
                loops=loops,
                branches=branches,
                regions=regions,
                index=self.counter,
                loss=loss,
                target=code_of(loss),
                flow_statement=self.flow_stack[-1] if self.flow_stack else None,
            )
        )

    def _add_backward(
        self,
        kind: EventKind,
        call: cst.Call,
        loss: Optional[cst.BaseExpression],
        scaler: Optional[str] = None,
        scale_call: Optional[cst.Call] = None,
    ) -> None:
        # `loss.mean().backward()` and `cast(Tensor, scaler.scale(loss)).backward()` backpropagate the
        # same (scaled or not) tensor as `loss` / `scaler.scale(loss)` (issue 14: alf, ignite).
        core = self._tensor_source(loss) if loss is not None else None
        if scaler is None and isinstance(core, cst.Call) and isinstance(core.func, cst.Attribute):
            if core.func.attr.value == "scale" and core.args:
                scaler = dotted_name(core.func.value)
                scale_call = core
                self.consumed_scale_calls.add(core)
        target = code_of(loss) if loss is not None else None
        if scaler is None and core is not None:
            scaler, scale_call = self._scaled_within(core)
        if scaler is None and isinstance(core, cst.Call):
            scaler = self._scaled_by_helper(core)  # `self.scale_loss(loss).backward()`
        if scaler is None and scale_call is None and core is not None:
            key = dotted_name(core.value if isinstance(core, cst.Subscript) else core)
            if key is not None:
                # `scaled = scaler.scale(loss)` earlier in the scope: the backward runs on the scaled loss.
                for value, _ in self.scope.assignments.get(key, []):
                    for candidate in alternatives(value):
                        candidate = self._tensor_source(candidate)  # `scaled = scaler.scale(x)[0]`
                        if (
                            isinstance(candidate, cst.Call)
                            and isinstance(candidate.func, cst.Attribute)
                            and candidate.func.attr.value == "scale"
                        ):
                            scaler = dotted_name(candidate.func.value)
                            scale_call = candidate
                            self.consumed_scale_calls.add(candidate)
                        elif scaler is None:
                            # `scaled = [scaler.scale(o) for o in outs]`, `scaled = (scaler.scale(a), b)`,
                            # a dict of them, bound on one branch only: the backward runs on scaled
                            # tensors (issue 26, principle 4).
                            scaler, scale_call = self._scaled_within(candidate)
                            if scaler is None and isinstance(candidate, cst.Call):
                                scaler = self._scaled_by_helper(candidate)  # `scaled = self.scale_loss(loss)`
        self._add_event(kind, call, target=target, scaled_by=scaler, scale_call=scale_call, loss=loss)

    def _scaled_by_helper(self, call: cst.Call) -> Optional[str]:
        """The scaler whose `.scale(...)` a helper of this file returns, as the caller sees it (issue 26,
        principle 4): `self.scale_loss(loss)` with `def scale_loss(self, loss): return self.scaler.scale(loss)`
        in this class (ColossalAI's TorchAMPOptimizer), or `scale(loss)` with a module function returning
        a module-level scaler's `.scale(...)`. A scaler the helper is handed is not followed."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            owner = next((c for c in self.module.body if isinstance(c, cst.ClassDef) and c.name.value == self.scope.class_name), None)
            name, body, own = func.attr.value, (owner.body.body if owner is not None else ()), "self."
        elif isinstance(func, cst.Name):
            name, body, own = func.value, self.module.body, ""
        else:
            return None
        for function in body:
            if not isinstance(function, cst.FunctionDef) or function.name.value != name:
                continue
            params = {p.name.value for p in function.params.params}
            for returned in own_returns(function):
                source = self._tensor_source(returned)
                if isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute) and source.func.attr.value == "scale" and source.args:
                    key = dotted_name(source.func.value)
                    if key and key.startswith(own) and key.split(".")[0] not in params - {"self"}:
                        return key
        return None

    def _scaled_within(self, expr: cst.BaseExpression):
        """(scaler, call) when `expr` holds tensors scaled by a scaler through a container or a
        higher-order call: `[scaler.scale(o) for o in outs]`, `list(map(scaler.scale, outs))`, a tuple,
        list or dict of `scaler.scale(...)` calls. (None, None) otherwise."""
        pending, seen = [expr], 0
        while pending and seen < 16:
            node = pending.pop()
            seen += 1
            if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
                pending.append(node.elt)
            elif isinstance(node, (cst.List, cst.Tuple, cst.Set)):
                pending.extend(e.value for e in node.elements)
            elif isinstance(node, cst.Dict):
                pending.extend(e.value for e in node.elements if isinstance(e, cst.DictElement))
            elif isinstance(node, cst.Call):
                func = node.func
                if isinstance(func, cst.Attribute) and func.attr.value == "scale" and node.args and node is not expr:
                    self.consumed_scale_calls.add(node)
                    return dotted_name(func.value), node
                name = dotted_name(func)
                if name in ("list", "tuple", "sum", "torch.stack", "torch.cat"):
                    pending.extend(a.value for a in node.args)
                elif name == "map" and node.args:
                    first = node.args[0].value
                    if isinstance(first, cst.Attribute) and first.attr.value == "scale":
                        return dotted_name(first.value), node
        return None, None

    def _tensor_source(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        """The tensor an expression passes on unchanged in scale (`syntax.tensor_source`), `typing.cast`
        resolved through this file's imports."""
        return tensor_source(
            expr, lambda func: self.qualify(func) == "typing.cast" or (isinstance(func, cst.Name) and func.value == "cast")
        )
