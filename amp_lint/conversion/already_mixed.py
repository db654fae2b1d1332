"""Code that does not train in plain fp32, on which AMP100 stays silent.

"Runs in full fp32" is a claim; these files make it false, or unknowable from the file alone:

- mixed precision by another library: apex (`amp.scale_loss`), DeepSpeed, ColossalAI, Megatron, TransformerEngine
  (`fp8_autocast`), their fp16/bf16 optimizer wrappers (`FP16_Optimizer`, `Float16OptimizerWithFloat16Params`);
- low-precision models: `model.half()`, `model.to(torch.float16)`, `.to(dtype=torch.bfloat16)`, `.bfloat16()`,
  `.type(torch.HalfTensor)`, FSDP `MixedPrecision` /
  `MixedPrecisionPolicy(param_dtype=...)`, `torch_dtype=torch.bfloat16`, int8/4-bit models (`load_in_8bit`,
  bitsandbytes, `quantize_dynamic`);
- autocast entered somewhere AMP100 cannot follow: a helper or wrapper (`with self.autocast_ctx():`,
  `with maybe_autocast(...)`, `ctx = torch.autocast(...)` entered later), or a GradScaler anywhere in the file;
- unit tests that take an optimizer step to test something else (`def test_...`, `class Test...`).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Set

import libcst as cst

from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.walk import visit_read_only

#: Importing one of these means the file trains with that library's precision machinery.
MIXED_PRECISION_PACKAGES = frozenset(
    {"apex", "deepspeed", "colossalai", "megatron", "transformer_engine", "bitsandbytes", "torchao"}
)

#: Names (attributes, functions, classes, keywords) that set up mixed or low precision.
MIXED_PRECISION_NAMES = frozenset(
    {
        "scale_loss",
        "fp8_autocast",
        "FP16_Optimizer",
        "FP16Optimizer",
        "BF16_Optimizer",
        "Float16OptimizerWithFloat16Params",
        "MixedPrecisionOptimizer",
        "MixedPrecision",
        "MixedPrecisionPolicy",
        "mp_policy",
        "mixed_precision",
        "load_in_8bit",
        "load_in_4bit",
        "BitsAndBytesConfig",
        "prepare_model_for_kbit_training",
        "quantize_dynamic",
        "GradScaler",
        "ShardedGradScaler",
        "bfloat16",
        "bf16",
        "fp16",
        "int8",
        "qint8",
    }
)


#: Dtypes that make a model (or its inputs) low precision when a tensor or module is cast to them.
LOW_PRECISION_DTYPES = frozenset(
    {"torch.float16", "torch.half", "torch.bfloat16", "torch.HalfTensor", "torch.cuda.HalfTensor",
     "torch.BFloat16Tensor", "torch.cuda.BFloat16Tensor"}
)  # fmt: skip
#: Methods that cast a module's weights (or a tensor) to a low-precision dtype.
LOW_PRECISION_METHODS = frozenset({"half", "bfloat16"})


def already_mixed_precision(
    model: FileModel, after_training: Optional[Callable[[cst.CSTNode], bool]] = None
) -> Optional[str]:
    """Why the file does not train in plain fp32 (the first sign found), or None.

    `after_training(cast)` says a cast runs only once training is over (`model.half(); torch.save(...)` after the
    loop, to export a smaller file): it does not make the training half precision."""
    cast = low_precision_cast(model, after_training)
    if cast is not None:
        return f"`{cast}` casts to a low-precision dtype: the file does not train in fp32"
    names: Set[str] = set()
    modules: Set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

        def visit_Import(self, node: cst.Import) -> None:
            for alias in node.names:
                modules.add(_code(alias.name).split(".")[0])

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if node.module is not None and not node.relative:
                modules.add(_code(node.module).split(".")[0])

    visit_read_only(model.module, Collect())
    package = sorted(modules & MIXED_PRECISION_PACKAGES)
    if package:
        return f"imports {package[0]}, which sets up its own mixed precision"
    found = sorted(names & MIXED_PRECISION_NAMES)
    if found:
        return f"uses `{found[0]}`: the file already trains in mixed or low precision"
    autocast = sorted(name for name in names if "autocast" in name.lower())
    if autocast:
        return f"enters autocast through `{autocast[0]}`"
    return None


def low_precision_cast(model: FileModel, after_training: Optional[Callable[[cst.CSTNode], bool]] = None) -> Optional[str]:
    """The first `x.half()`, `x.bfloat16()`, `x.to(torch.float16)`, `x.to(dtype=torch.bfloat16)` or
    `x.type(torch.HalfTensor)` of the file (a module or tensor made half precision), as code, or None.

    `torch.half` / `torch.float16` are resolved through the file's imports (`import torch as T`, `from torch import
    float16`); `.half()` counts on any receiver but `torch` itself, and only without arguments (a `half(...)` of the
    user's own, with arguments, is something else).
    """
    found: List[str] = []
    scopes: List[Scope] = [model.scopes[0]]

    class Casts(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            scopes.append(model.scope_of(node) or scopes[-1])

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            scopes.pop()

        def visit_Call(self, node: cst.Call) -> None:
            if found or not isinstance(node.func, cst.Attribute):
                return
            names = scopes[-1].names
            method = node.func.attr.value
            if names.qualify(node.func) is not None:
                return  # `torch.half(...)`, `np.float16(...)`: not a cast of the user's tensor or module
            cast = method in LOW_PRECISION_METHODS and not node.args
            if method in ("to", "type"):
                cast = any(names.qualify(arg.value) in LOW_PRECISION_DTYPES for arg in node.args)
            if cast and not (after_training is not None and after_training(node)):
                found.append(code_of(node))

    visit_read_only(model.module, Casts())
    if not found:
        return None
    text = found[0]
    return text if len(text) <= 60 else text[:57] + "..."


def is_unit_test(scope: Scope) -> bool:
    """A `test_...` function or a method of a `Test...` class (pytest and unittest naming)."""
    for current in scope.chain():
        last = current.name.split(".")[-1] if current.name else ""
        if last.startswith("test") or (current.class_name or "").startswith("Test"):
            return True
    return False


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)
