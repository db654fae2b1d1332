"""Which dtypes an autocast may run in, and which switches turn a GradScaler and an autocast on (issue 46,
principle 6: configuration semantics).

A scaler is needed only for float16. Code that offers bfloat16 must build the scaler off for it:
`GradScaler(enabled=amp_dtype == torch.float16)`, or `enabled=args.fp16` beside
`dtype=torch.bfloat16 if args.bf16 else torch.float16`. A scaler switched on by nothing more than what turns
autocast on (`enabled=self.use_amp` on both) stays on when the dtype is bfloat16 (traiNNer-redux, alf).

`possible_dtypes` follows the dtype argument through names, `self.` attributes of the class, parameter
defaults and conditional values, and answers the set of dtypes the file shows it may take. `switch_of_scaler`
and `switch_of_region` give the tests (as `conditions.Atom`s) that must hold for each to be on.
"""

from __future__ import annotations

from typing import FrozenSet, Optional, Set

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.autocast import DType
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.conditions import Atom, atom_of, implied_atoms
from amp_lint.analysis.file_model import FileModel, ScalerBinding, Scope
from amp_lint.analysis.syntax import alternatives, argument

_DEPTH = 6  # names followed through names


def possible_dtypes(model: FileModel, region: AutocastRegion) -> Set[DType]:
    """The dtypes the region's autocast may run in, as far as the file shows (UNKNOWN among them when some
    definition is out of sight)."""
    node, scope = region.spec.dtype_node, region.scope
    if node is None or scope is None:
        return {region.spec.dtype}
    found: Set[DType] = set()
    _dtypes_of(model, node, scope, found, _DEPTH)
    return found


def _dtypes_of(model: FileModel, node: cst.BaseExpression, scope: Scope, found: Set[DType], depth: int) -> None:
    for value in alternatives(node):
        qualified = scope.names.qualify(value)
        if qualified in names.FLOAT16:
            found.add(DType.FP16)
        elif qualified in names.BFLOAT16:
            found.add(DType.BF16)
        elif qualified in names.OTHER_FLOAT:
            found.add(DType.OTHER)
        elif depth > 0 and isinstance(value, cst.Name):
            _name_dtypes(model, value.value, scope, found, depth - 1)
        elif depth > 0 and _self_attribute(value) and scope.class_name is not None:
            sites = [
                a for a in model.assignment_sites if a.target == f"self.{value.attr.value}" and a.scope.class_name == scope.class_name
            ]
            for site in sites:
                _dtypes_of(model, site.value, site.scope, found, depth - 1)
            if not sites:
                found.add(DType.UNKNOWN)
        else:
            found.add(DType.UNKNOWN)


def _name_dtypes(model: FileModel, name: str, scope: Scope, found: Set[DType], depth: int) -> None:
    for outer in scope.chain():
        values = outer.assignments.get(name)
        if values:
            for value, _ in values:
                _dtypes_of(model, value, outer, found, depth)
            return
        if outer.is_function and name in outer.params:
            default = _default_of(outer.node, name)
            found.add(DType.UNKNOWN)  # what callers pass
            if default is not None:
                _dtypes_of(model, default, outer.parent or outer, found, depth)
            return
    found.add(DType.UNKNOWN)


def _default_of(function: cst.FunctionDef, name: str) -> Optional[cst.BaseExpression]:
    for param in (*function.params.params, *function.params.kwonly_params):
        if param.name.value == name:
            return param.default
    return None


def _self_attribute(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"


def switch_of_scaler(binding: ScalerBinding) -> Optional[FrozenSet[Atom]]:
    """The tests that must hold for the scaler to be built and on: its `enabled=` expression, the test of
    `GradScaler() if amp else None`, the `if`s around its construction. None when it is never on."""
    call = binding.call
    if call is None or binding.enabled is False:
        return None
    atoms: Set[Atom] = set()
    if binding.enabled is None:  # an expression: what it implies when true
        enabled = argument(call, 4 if binding.qualified_name in names.IMPLIED_DEVICE else 5, "enabled")
        if enabled is not None:
            atoms.update(implied_atoms(enabled.value, True))
    for test, outcome in binding.chosen_when:
        atoms.update(implied_atoms(test, outcome))
    atoms.update(Atom(*branch.condition) for branch in binding.branches)
    return frozenset(atoms)


def switch_of_region(region: AutocastRegion) -> FrozenSet[Atom]:
    """The tests that must hold for the autocast to be on: its `enabled=` expression."""
    flag = region.spec.enabled_node
    if flag is None or region.spec.enabled is not None:
        return frozenset()
    return frozenset(implied_atoms(flag, True))


def canonical(model: FileModel, atoms: FrozenSet[Atom], class_name: Optional[str]) -> FrozenSet[Atom]:
    """The atoms with each `self.x` test read as the test it copies, where the class assigns `self.x` once:
    `self.do_grad_scaling = self.use_cuda_amp`, `self._enable_amp = enable_amp` (a parameter of `__init__`),
    `self.use_amp = args.fp16 or args.bf16`."""
    if class_name is None:
        return atoms
    out = set()
    for atom in atoms:
        for _ in range(4):
            key = atom.key
            if not key.startswith("self.") or not key[len("self.") :].isidentifier():
                break
            sites = [a for a in model.assignment_sites if a.target == key and a.scope.class_name == class_name]
            if len(sites) != 1:
                break
            atom = atom_of(sites[0].value, atom.holds)
        out.add(atom)
    return frozenset(out)
