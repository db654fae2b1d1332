"""Is a name a tensor? The evidence the code itself gives (issue 26, principle 4): `.device` of a tensor is a
torch.device, indexed on CUDA, so `str()` of it is never a device type. Asked by the device rules (AMP075)."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import declared_type
from amp_lint.analysis.syntax import code_of

# What only a tensor does (a config object, `args`, never does): its shape, dtype, size, a cast or a move.
_TENSOR_USE = r"\.(?:shape|dtype|ndim|is_cuda|size\(|dim\(|numel\(|float\(|half\(|bfloat16\(|to\(|cuda\(|detach\(|view\(|reshape\(|contiguous\()"

# torch functions whose first argument need not be a tensor (a path, a device string, a numpy array whose
# `.device` is the string "cpu", anything): being passed to them proves nothing.
_NOT_TENSOR_TAKING = frozenset(
    {"device", "dtype", "save", "load", "tensor", "as_tensor", "asarray", "from_numpy", "compile", "is_tensor",
     "is_storage", "autocast", "Generator", "Size", "stack", "cat", "concat", "concatenate", "set_default_device",
     "get_device_module", "manual_seed", "typename"}
)


def is_tensor_in(model: Optional[FileModel], name: str, scope: Scope, depth: int) -> bool:
    """Does the function `scope` show that its local or parameter `name` is a tensor (issue 26, principle 4:
    `.device` of a tensor is a torch.device, indexed on CUDA)? The evidence, in the code itself:
    - a tensor-only use of it (`x.shape`, `x.dtype`, `x.size()`, `x.to(...)`, ...);
    - passed as the first argument of a torch operator (`torch.baddbmm(W, ...)`, `F.group_norm(x, ...)`),
      not of one that takes anything (`torch.device(s)`, `torch.save(obj, path)`, `torch.tensor(a)`);
    - passed to a function of this file whose parameter in that place is shown a tensor the same way.
    - a parameter declared a tensor (`x: torch.Tensor`, `Optional[Tensor]`, `Tensor | None`).
    A config object (`cfg.device`, `args.device`: often a string) shows none of these."""
    if _declared_tensor(scope, scope.params.get(name)):
        return True
    code = code_of(scope.node)
    if re.search(rf"(?<![\w.]){re.escape(name)}{_TENSOR_USE}", code) is not None:
        return True
    if name not in code or depth > 2:
        return False
    finder = _PassedAs(name)
    scope.node.visit(finder)
    for call, position in finder.calls:
        if position == 0:
            qualified = scope.names.qualify(call.func) or ""
            head, _, op = qualified.rpartition(".")
            if head in ("torch", "torch.nn.functional") and op not in _NOT_TENSOR_TAKING:
                return True
        if model is not None and isinstance(call.func, cst.Name):
            for function in model.functions_named(call.func.value):
                callee = model.scope_of(function)
                params = list(function.params.posonly_params) + list(function.params.params)
                if callee is not None and position < len(params) and is_tensor_in(model, params[position].name.value, callee, depth + 1):
                    return True
    return False


def _declared_tensor(scope: Scope, annotation: Optional[cst.BaseExpression]) -> bool:
    """An annotation that names torch's Tensor, alone or as the one type beside None."""
    declared = declared_type(annotation, scope.names)
    return declared is not None and scope.names.qualify(declared) == "torch.Tensor"


class _PassedAs(cst.CSTVisitor):
    """Calls that get the name `name` as a positional argument, with its position."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list = []

    def visit_Call(self, node: cst.Call) -> None:
        for position, arg in enumerate(node.args):
            if arg.keyword is not None or arg.star:
                break
            if isinstance(arg.value, cst.Name) and arg.value.value == self.name:
                self.calls.append((node, position))
