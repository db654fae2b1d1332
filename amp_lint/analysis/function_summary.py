"""What a function does to the GradScaler protocol, applied where it is called: its `Summary`.

A helper's events are its summary: at a call they run where the call runs, with the callee's parameters
renamed to the caller's arguments (`Summary.applied_at`; `argument_names` and `call_params` say which
parameter each argument fills). `steps` makes the summaries of a file's own helpers; the project layer
(`summaries`) makes those of other modules' functions, through `project_hooks.SUMMARIES`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.analysis.events import Event, Scope
from amp_lint.analysis.names import dotted_name


@dataclass(frozen=True)
class Summary:
    """What a function does to the scaler protocol: its events, in order, in terms of its parameters."""

    scope: Scope
    events: Tuple[Event, ...]
    params: Tuple[str, ...]  # the callee's parameters, `self`/`cls` left out for methods
    runs_loop: bool = False  # a helper with a loop of its own is a training loop, not a step part

    def applied_at(self, call: Event, depth: int, trail_of: Callable[[Event, Event], Event]) -> List[Event]:
        """The callee's events as they happen at `call`, renamed to the caller's arguments."""
        names = self.argument_names(call)
        scaled = self.scaled_arguments(call)
        step = 10.0 ** (-3 * (depth + 1))
        out = []
        for position, event in enumerate(self.events, start=1):
            if any(_is_none(_renamed(key, names)) for key in (event.receiver, event.scaled_by) if key is not None):
                # `self._grad_clipping(..., scaler=None)` (coqui's trainer on its apex path): the helper's
                # calls on that scaler cannot run at this call (they would raise), so they do not happen here.
                continue
            scaled_by, scale_call = _renamed(event.scaled_by, names), event.scale_call
            if scaled_by is None and event.loss is not None and _head(event.loss) in scaled:
                # `self._backward(scaler.scale(loss))` and `def _backward(self, loss): loss.backward()`
                # (flair): the helper's backward runs on the scaled loss.
                scaled_by, scale_call = scaled[_head(event.loss)]
            out.append(
                dataclasses.replace(
                    event,
                    index=call.index + position * step,
                    loops=call.loops + event.loops,
                    branches=call.branches + event.branches,
                    regions=call.regions + event.regions,
                    receiver=_renamed(event.receiver, names),
                    target=_renamed(event.target, names),
                    scaled_by=scaled_by,
                    scale_call=scale_call,
                    via=call if event.via is None else trail_of(event.via, call),
                )
            )
        return out

    def scaled_arguments(self, call: Event) -> Dict[str, Tuple[str, object]]:
        """Callee parameter -> (scaler, scale call) for arguments written `scaler.scale(x)`."""
        found: Dict[str, Tuple[str, object]] = {}
        position = 0
        for arg in call.call.args:
            if arg.star:
                break
            value = arg.value
            param = arg.keyword.value if arg.keyword is not None else (self.params[position] if position < len(self.params) else None)
            if arg.keyword is None:
                position += 1
            if param is None:
                continue
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "scale":
                scaler = dotted_name(value.func.value)
                if scaler is not None and value.args:
                    found[param] = (scaler, value)
        return found

    def argument_names(self, call: Event) -> Dict[str, str]:
        """Callee parameter -> the caller's dotted argument, for plain names and attributes."""
        return argument_names(self.scope, call.call, self.params)


def _head(expr) -> Optional[str]:
    """The plain name an expression starts from (`loss` for `loss`, `loss.mean()`), else None."""
    for _ in range(8):
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            expr = expr.value
        else:
            return None
    return None


def _is_none(key: Optional[str]) -> bool:
    """A key renamed to the literal `None` a caller passed for the parameter."""
    return key == "None" or (key is not None and key.startswith("None."))


def _renamed(key: Optional[str], names: Dict[str, str]) -> Optional[str]:
    if key is None or not names:
        return key
    head, dot, rest = key.partition(".")
    if head in names:
        return names[head] + dot + rest
    return key


def call_params(callee: Scope, class_name: Optional[str] = None) -> List[str]:
    """The parameters a call's positional arguments fill: `self`/`cls` left out for a method."""
    params = list(callee.params)
    if (class_name or callee.class_name) and params and params[0] in ("self", "cls"):
        params = params[1:]
    return params


def argument_names(callee: Scope, call: cst.Call, params: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """Callee parameter -> the caller's dotted argument, for plain names and attributes. `params`: the
    positional parameters when they are known already (`call_params`)."""
    if params is None:
        params = call_params(callee)
    mapping: Dict[str, str] = {}
    position = 0
    for arg in call.args:
        if arg.star:
            break
        value = dotted_name(arg.value)
        if arg.keyword is not None:
            if value is not None and arg.keyword.value in callee.params:
                mapping[arg.keyword.value] = value
            continue
        if position < len(params) and value is not None:
            mapping[params[position]] = value
        position += 1
    return mapping
