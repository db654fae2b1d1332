"""Gradient uses that keep the loss scale: what a gradient sync does to scaled gradients (issue 46, 7c).

DDP itself all-reduces the scaled gradients and divides them by the world size before anyone unscales them,
and a hand-written sync does the same: it collects `p.grad` (views of it) into a list, concatenates it,
all-reduces the buffer, divides it and copies the slices back into `p.grad`. Every one of these operations is
linear, so the gradients stay scaled by exactly the scale `unscale_` later divides out. Only reads that need
the true magnitudes are wrong before `unscale_`: norms, clipping, thresholds, logs.

`linear_grad_uses(function)` answers, for one function, which `X.grad` expressions are used only that way:
their value (and every name it is bound to, appended to or concatenated into) ends in a collective, in a
copy back into a gradient, in an in-place linear rescale, or in a shape-only use (`view_as(p.grad)`). Any
other use of any value derived from a gradient (a method call, a comparison, a call to anything else) keeps
the expression a read. Names are followed within the function, by their spelling.
"""

from __future__ import annotations

from typing import Dict, List, Set

import libcst as cst

from amp_lint.analysis.names import dotted_name

# Methods whose result is the same values (a view, a copy, a flattened buffer) of their receiver.
_PASS_THROUGH_METHODS = frozenset({"view", "reshape", "flatten", "contiguous", "detach", "clone", "view_as", "reshape_as"})
# Methods that only use their argument's shape, dtype or device.
_SHAPE_ONLY_METHODS = frozenset({"view_as", "expand_as", "reshape_as", "type_as", "new_zeros", "new_empty"})
# In-place methods that rescale linearly or overwrite their receiver.
_LINEAR_IN_PLACE = frozenset({"copy_", "div_", "mul_", "zero_", "fill_"})
# Functions that put tensors together or take them apart without changing their values.
_JOINING_FUNCTIONS = frozenset({"cat", "stack", "_flatten_dense_tensors", "_unflatten_dense_tensors", "flatten"})
# Collectives: each leaves the buffer scaled exactly as its inputs (a sum, an average or a copy of them).
_COLLECTIVES = frozenset(
    {"all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
     "all_gather", "all_gather_into_tensor", "allreduce", "allreduce_async", "broadcast_coalesced"}
)


def linear_grad_uses(function: cst.FunctionDef) -> Set[int]:
    """Ids of the `X.grad` nodes of `function` whose every use keeps the scale (see the module docstring)."""
    return _LinearUses(function).linear()


def keeps_the_scale(grad: cst.Attribute, function: cst.CSTNode, memo: dict) -> bool:
    """Is this `X.grad` of `function` used only in ways that keep the scale? (`memo`: per function, by id.)"""
    if not isinstance(function, cst.FunctionDef):
        return False
    if id(function) not in memo:
        memo[id(function)] = linear_grad_uses(function)
    return id(grad) in memo[id(function)]


class _LinearUses:
    def __init__(self, function: cst.FunctionDef) -> None:
        self.parents: Dict[int, cst.CSTNode] = {}
        self.grads: List[cst.Attribute] = []
        self.loads: Dict[str, List[cst.Name]] = {}
        self.bound: Set[int] = set()
        self._index(function)
        self.names_ok: Dict[str, bool] = {}

    def _index(self, function: cst.FunctionDef) -> None:
        stack: List[cst.CSTNode] = [function.body]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Attribute) and node.attr.value == "grad" and isinstance(node.value, cst.Name):
                self.grads.append(node)
            elif isinstance(node, cst.Name):
                self.loads.setdefault(node.value, []).append(node)
            elif isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.For, cst.CompFor, cst.AnnAssign)):
                target = node.target
                if isinstance(target, cst.Name):
                    self.bound.add(id(target))
            elif isinstance(node, cst.Param):
                self.bound.add(id(node.name))
            for child in node.children:
                self.parents[id(child)] = node
                stack.append(child)

    def linear(self) -> Set[int]:
        return {id(grad) for grad in self.grads if self._value_linear(grad)}

    def _name_linear(self, name: str) -> bool:
        """Is every read of `name` in the function a linear one?"""
        if name in self.names_ok:
            return self.names_ok[name]
        self.names_ok[name] = True  # a cycle (`x = x / n`) is decided by its other uses
        ok = all(self._value_linear(use) for use in self.loads.get(name, ()) if id(use) not in self.bound)
        self.names_ok[name] = ok
        return ok

    def _value_linear(self, node: cst.CSTNode) -> bool:
        """Does the value of `node` end only in linear uses, followed up through the expressions around it?"""
        for _ in range(32):
            parent = self.parents.get(id(node))
            if parent is None:
                return False
            if isinstance(parent, cst.Attribute) and parent.value is node:
                name = parent.attr.value
                if name == "data":
                    node = parent
                    continue
                if name in ("shape", "dtype", "device", "ndim", "is_cuda"):
                    return True
                call = self.parents.get(id(parent))
                if not (isinstance(call, cst.Call) and call.func is parent):
                    return False
                if name in _LINEAR_IN_PLACE or name in ("size", "numel", "dim", "element_size"):
                    return True  # the receiver is overwritten, rescaled in place, or only measured
                if name in ("append", "extend") and isinstance(parent.value, cst.Name):
                    return True  # a list being filled: its values are followed where the list is read
                if name in _PASS_THROUGH_METHODS:
                    node = call
                    continue
                return False
            if isinstance(parent, cst.Arg):
                call = self.parents.get(id(parent))
                if not isinstance(call, cst.Call):
                    return False
                func = call.func
                method = func.attr.value if isinstance(func, cst.Attribute) else None
                final = (dotted_name(func) or "").rsplit(".", 1)[-1]
                if method in _SHAPE_ONLY_METHODS:
                    return True
                if method == "copy_":
                    return self._writes_a_gradient(func.value)
                if method in ("append", "extend") and isinstance(func.value, cst.Name):
                    return self._name_linear(func.value.value)
                if final in _COLLECTIVES and call.args and call.args[0] is parent:
                    return True
                if final in _JOINING_FUNCTIONS and call.args and call.args[0] is parent:
                    node = call
                    continue
                return False
            if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Divide, cst.Multiply)):
                node = parent
                continue
            if isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index, cst.Slice)):
                if isinstance(parent, cst.Subscript) and parent.value is node:
                    node = parent
                    continue
                return False  # used as an index
            if isinstance(parent, (cst.Element, cst.List, cst.Tuple)):
                node = parent
                continue
            if isinstance(parent, (cst.ListComp, cst.GeneratorExp)) and parent.elt is node:
                node = parent
                continue
            if isinstance(parent, cst.Assign) and parent.value is node:
                targets = [t.target for t in parent.targets]
                return all(isinstance(t, cst.Name) and self._name_linear(t.value) for t in targets)
            if isinstance(parent, (cst.CompFor, cst.For)) and parent.iter is node:
                target = parent.target
                return isinstance(target, cst.Name) and self._name_linear(target.value)
            if isinstance(parent, cst.Comparison):
                return all(
                    isinstance(c.comparator, cst.Name) and c.comparator.value == "None" for c in parent.comparisons
                )
            if isinstance(parent, cst.AugAssign) and parent.target is node:
                return isinstance(parent.operator, (cst.DivideAssign, cst.MultiplyAssign))
            return False
        return False

    def _writes_a_gradient(self, receiver: cst.BaseExpression) -> bool:
        """`p.grad.copy_(...)` / `p.grad.data.copy_(...)`: the copy lands back in a gradient."""
        if isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
            receiver = receiver.value
        return isinstance(receiver, cst.Attribute) and receiver.attr.value == "grad"
