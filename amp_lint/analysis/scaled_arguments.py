"""Scaled values handed through parameters (issue 46, principle 1).

A function's parameter is what its callers hand it. `def _backward(self, loss): loss.backward()` backpropagates
an unscaled loss only if its callers pass one: fairchem's trainer writes
`loss = self.scaler.scale(loss) if self.scaler else loss` and then `self._backward(loss)`, so the backward in
`_backward` runs on the scaled loss. This module answers, for a parameter, whether a call of its function in
this file may hand it a value that a GradScaler scaled: `scaler.scale(x)` written as the argument, or a name
the caller's scope binds (on any branch) to one.
"""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.function_summary import call_params
from amp_lint.analysis.syntax import alternatives, argument, code_of, tensor_source


def scale_call_in(value: cst.BaseExpression, scope: Scope) -> Optional[Tuple[str, cst.Call]]:
    """(scaler, `scaler.scale(...)` call) when `value` may be a scaled tensor: the call itself (through
    `x.mean()`-like methods, an element `x[0]`, parentheses and `a if c else b`), or a name or attribute
    that `scope` binds to one on some branch. None otherwise."""
    found = _direct_scale_call(value)
    if found is not None:
        return found
    key = dotted_name(tensor_source(value))
    if key is None:
        return None
    for bound, _ in scope.assignments.get(key, ()):
        found = _direct_scale_call(bound)
        if found is not None:
            return found
    return None


def called_with_a_scaled_value(model: FileModel, callee: Scope, param: Optional[str] = None) -> bool:
    """Some call of `callee` in this file may hand `param` (any parameter when None) a scaled tensor. Calls
    are matched by the function's name as the last part of the callee written (`self._backward(...)`,
    `trainer._backward(...)`), and an argument counts when a `.scale(` call is anywhere in it: both
    over-match on purpose, as this question only ever silences."""
    if not callee.is_function:
        return False
    name = callee.node.name.value
    params = call_params(callee)
    for site in model.call_sites:
        if site.func is None or site.func.rpartition(".")[2] != name:
            continue
        if param is None:
            arguments = [arg.value for arg in site.call.args]
        else:
            bound = argument(site.call, params.index(param) if param in params else None, param)
            arguments = [bound.value] if bound is not None else []
        for value in arguments:
            if ".scale(" in code_of(value) or scale_call_in(value, site.scope) is not None:
                return True
    return False


def parameter_behind(expr: Optional[cst.BaseExpression], scope: Scope) -> Optional[str]:
    """The parameter of `scope` that `expr` passes on unchanged in magnitude (`loss` for `loss.mean()`)."""
    if expr is None:
        return None
    source = tensor_source(expr)
    return source.value if isinstance(source, cst.Name) and source.value in scope.params else None


def _direct_scale_call(value: cst.BaseExpression) -> Optional[Tuple[str, cst.Call]]:
    for candidate in alternatives(value):
        candidate = tensor_source(candidate)
        if isinstance(candidate, cst.Call) and isinstance(candidate.func, cst.Attribute):
            if candidate.func.attr.value == "scale" and candidate.args:
                scaler = dotted_name(candidate.func.value)
                if scaler is not None:
                    return scaler, candidate
    return None
