"""The assignment hooks of the model's tree walk: scalers, optimizers, autocast contexts, constants.

`AssignmentRecorder` is mixed into `builder.ModelBuilder` and reads its stacks (scope, statement, loops,
branches, autocast regions). Every `target = value` is kept in its scope (`Scope.assignments`) and as an
`AssignmentSite`; a value that builds a GradScaler (or comes from a project function that returns one)
makes a `ScalerBinding`, a `torch.optim` class an optimizer key, an autocast call or factory an
`AutocastBinding` (`with ctx:` then enters it). `p.grad /= n` is a gradient rescale, not a read.
"""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.autocast import AutocastBinding
from amp_lint.analysis.calls import is_grad
from amp_lint.analysis.file_model import AssignmentSite, ScalerBinding
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.project_hooks import project
from amp_lint.analysis.syntax import alternatives, argument, code_of, guarded_alternatives, literal_bool


class AssignmentRecorder:
    """The assignment hooks of `ModelBuilder` (its state is set up in `ModelBuilder.__init__`)."""

    def visit_Assign(self, node: cst.Assign) -> None:
        self.small_statement = node
        self._note_factory_positions(node.value)
        for target in node.targets:
            self._record_assignment(target.target, node.value)
            # `a, b = scaler.scale(x), scaler.scale(y)`: each name bound to its own element (issue 26, principle 4).
            paired = _paired_elements(target.target, node.value)
            for name, value in paired:
                self._record_assignment(name, value)
            if not paired and isinstance(target.target, (cst.Tuple, cst.List)):  # `model, opt = ipex.optimize(...)`
                keys = (dotted_name(element.value) for element in target.target.elements)
                self.unpacked_sites.extend(self._site(key, node.value) for key in keys if key is not None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.small_statement = node
        if node.value is not None:
            self._record_assignment(node.target, node.value)
        key = dotted_name(node.target)
        if key is not None and "Scaler" in code_of(node.annotation.annotation):
            self._add_scaler(key, ScalerBinding(key=key, enabled=None), from_annotation=True)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.small_statement = node
        # `p.grad /= n` rescales linearly: whatever the scale, it does not read the values (issue 14, fairseq).
        if isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign)) and is_grad(node.target):
            self.skip_reference.add(node.target)
            self.grad_rescales.append(self._site(dotted_name(node.target) or "", node.value))


    def _binding_key(self, key: str) -> Tuple[int, str]:
        if key.startswith("self.") and self.scope.class_name:
            return (0, f"{self.scope.class_name}.{key}")
        return (id(self.scope), key)

    def _site(self, key: str, value: cst.BaseExpression) -> AssignmentSite:
        """`key` set from `value` here: where it sits (statement, scope, loops, branches, autocast regions)."""
        return AssignmentSite(
            key,
            value,
            self.statement_stack[-1] if self.statement_stack else None,
            self.scope,
            tuple(self.loop_stack[-1]),
            tuple(self.branch_stack[-1]),
            tuple(self.region_stack[-1]),
            self.counter,
            len(self.call_sites) + len(self.assignment_sites),
        )

    def _record_assignment(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        key = dotted_name(target)
        if key is None:
            return
        statement = self.statement_stack[-1] if self.statement_stack else None
        self.scope.assignments.setdefault(key, []).append((value, statement))
        self.assignment_sites.append(self._site(key, value))
        if "." not in key:
            self.scope.names.bind_local(key)
        for candidate, chosen_when in guarded_alternatives(value):
            if isinstance(candidate, cst.Call):
                qualified = self.qualify(candidate.func) or self._class_alias(candidate.func)
                if qualified in names.GRAD_SCALER:
                    enabled_arg = argument(candidate, 4 if qualified in names.IMPLIED_DEVICE else 5, "enabled")
                    enabled = True if enabled_arg is None else literal_bool(enabled_arg.value)
                    self._add_scaler(
                        key,
                        ScalerBinding(
                            key=key,
                            call=candidate,
                            qualified_name=qualified,
                            enabled=enabled,
                            maybe_none=candidate is not value,
                            chosen_when=chosen_when,
                            statement=statement,
                            scope=self.scope,
                            loops=tuple(self.loop_stack[-1]),
                            branches=tuple(self.branch_stack[-1]),
                        ),
                    )
                elif isinstance(candidate.func, cst.Name) and qualified is not None and self._scaler_factory(candidate.func.value):
                    # a project function of another module returning a GradScaler on every path (issue 26)
                    self._add_scaler(key, ScalerBinding(key=key, enabled=None, statement=statement, scope=self.scope, factory=candidate))
                elif qualified is not None and names.is_optimizer_class(qualified):
                    self.optimizer_keys.add(key)
                elif qualified in names.AUTOCAST:
                    self.autocast_bindings[self._binding_key(key)] = AutocastBinding(qualified, candidate, False)
                elif qualified in ("functools.partial",) and candidate.args:
                    inner = self.qualify(candidate.args[0].value)
                    if inner in names.AUTOCAST:
                        self.autocast_bindings[self._binding_key(key)] = AutocastBinding(
                            inner, candidate, True, tuple(candidate.args[1:])
                        )
            else:
                qualified = self.qualify(candidate)
                if qualified in names.AUTOCAST:
                    self.autocast_bindings[self._binding_key(key)] = AutocastBinding(qualified, None, True)

    @staticmethod
    def _scaler_factory(name: str) -> bool:
        return project().scaler_factory(name) is not None  # a function of another module of the project

    def _class_alias(self, func: cst.BaseExpression) -> Optional[str]:
        """`scaler_type = GradScaler` (or `ShardedGradScaler` on another branch) earlier in this function, then
        `scaler_type()`: the scaler class every assignment names (issue 26, principle 4: values followed)."""
        if not isinstance(func, cst.Name):
            return None
        found = set()
        for value, _ in self.scope.assignments.get(func.value, []):
            qualified = self.scope.names.qualify(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
            if qualified not in names.GRAD_SCALER:
                return None
            found.add(qualified)
        return sorted(found)[0] if found else None

    def _note_factory_positions(self, value: cst.BaseExpression) -> None:
        """`amp_cm = torch.cuda.amp.autocast if amp else nullcontext`: a reference that will be called."""
        for candidate in alternatives(value):
            if isinstance(candidate, (cst.Name, cst.Attribute)):
                self.factory_positions.add(candidate)

    def _add_scaler(self, key: str, binding: ScalerBinding, from_annotation: bool = False) -> None:
        binding.scope = binding.scope or self.scope
        stored = f"{self.scope.class_name}.{key}" if key.startswith("self.") and self.scope.class_name else key
        self.scalers.setdefault(stored, []).append(binding)



def _paired_elements(target: cst.BaseExpression, value: cst.BaseExpression):
    """(element target, element value) of a tuple or list assigned from one of the same length, no starred."""
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(value, (cst.Tuple, cst.List)):
        return []
    if len(target.elements) != len(value.elements):
        return []
    if any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        return []
    return [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
