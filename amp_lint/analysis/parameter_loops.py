"""The names a loop or a comprehension binds to a model's parameters (issue 46, principle 3).

A gradient read (`p.grad.norm()`) is a read of `.grad` on a name bound to a parameter. Parameters are reached
as `model.parameters()` / `model.named_parameters()`, or through an optimizer's groups: `for group in
opt.param_groups: for p in group["params"]:`. Gradient-norm logs are often comprehensions:
`sum(p.grad.norm() ** 2 for g in opt.param_groups for p in g["params"])`, and the names their `for` clauses
bind count as a loop's do. `ParameterLoops` is mixed into the model builder and keeps, per enclosing loop or
comprehension, the parameter names and the parameter-group names in force.
"""

from __future__ import annotations

from typing import FrozenSet, List, Tuple, Union

import libcst as cst

from amp_lint.analysis.syntax import literal_string

_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
_EMPTY: FrozenSet[str] = frozenset()

Comprehension = Union[cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp]


def bound_by(
    iterator: cst.BaseExpression, target: cst.BaseExpression, groups: FrozenSet[str]
) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """(parameter names, parameter-group names) that `for target in iterator` binds, `groups` being the
    group names in force around it."""
    name = _last_name(target)
    if name is None:
        return _EMPTY, _EMPTY
    if isinstance(iterator, cst.Call) and isinstance(iterator.func, cst.Attribute):
        if iterator.func.attr.value in _PARAMETER_METHODS:
            return frozenset({name}), _EMPTY
    if isinstance(iterator, cst.Attribute) and iterator.attr.value == "param_groups" and isinstance(target, cst.Name):
        return _EMPTY, frozenset({name})
    if (
        isinstance(iterator, cst.Subscript)
        and isinstance(iterator.value, cst.Name)
        and iterator.value.value in groups
        and len(iterator.slice) == 1
        and isinstance(iterator.slice[0].slice, cst.Index)
        and literal_string(iterator.slice[0].slice.value) == "params"
    ):
        return frozenset({name}), _EMPTY
    return _EMPTY, _EMPTY


def _last_name(target: cst.BaseExpression):
    """`p` of `for p in ...` and of `for name, p in ...`."""
    if isinstance(target, cst.Tuple) and target.elements:
        target = target.elements[-1].value
    return target.value if isinstance(target, cst.Name) else None


class ParameterLoops:
    """Mixed into the model builder: `parameter_names` holds, per enclosing `for` loop or comprehension, the
    names bound to parameters there (`CallRecorder.visit_Attribute` reads it for `p.grad`)."""

    parameter_names: List[FrozenSet[str]]
    group_names: List[FrozenSet[str]]

    def _groups_in_force(self) -> FrozenSet[str]:
        return frozenset().union(*self.group_names) if self.group_names else _EMPTY

    def enter_parameter_loop(self, loop: cst.For) -> None:
        params, groups = bound_by(loop.iter, loop.target, self._groups_in_force())
        self.parameter_names.append(params)
        self.group_names.append(groups)

    def leave_parameter_loop(self) -> None:
        self.parameter_names.pop()
        self.group_names.pop()

    def _enter_comprehension(self, node: Comprehension) -> None:
        params, groups = set(), set(self._groups_in_force())
        clause = node.for_in
        while clause is not None:
            bound, grouped = bound_by(clause.iter, clause.target, frozenset(groups))
            params |= bound
            groups |= grouped
            clause = clause.inner_for_in
        self.parameter_names.append(frozenset(params))
        self.group_names.append(frozenset(groups))

    def _leave_comprehension(self, node: Comprehension) -> None:
        self.leave_parameter_loop()

    visit_GeneratorExp = visit_ListComp = visit_SetComp = visit_DictComp = _enter_comprehension
    leave_GeneratorExp = leave_ListComp = leave_SetComp = leave_DictComp = _leave_comprehension
