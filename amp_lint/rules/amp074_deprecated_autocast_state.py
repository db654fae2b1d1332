from __future__ import annotations

from typing import Dict, Iterator, Optional, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.rules._helpers import has_star_args, short
from amp_lint.rules._version_shims import in_old_torch_branch
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


def _table() -> Dict[str, Tuple[str, str]]:
    """Deprecated function -> (replacement, device), as torch 2.13's DeprecationWarnings name them."""
    table: Dict[str, Tuple[str, str]] = {}
    for device, spelled in (("cpu", "cpu"), ("cuda", "gpu"), ("ipu", "ipu"), ("xla", "xla")):
        table[f"get_autocast_{spelled}_dtype"] = ("get_autocast_dtype", device)
        table[f"set_autocast_{spelled}_dtype"] = ("set_autocast_dtype", device)
        if spelled != "gpu":
            table[f"is_autocast_{spelled}_enabled"] = ("is_autocast_enabled", device)
            table[f"set_autocast_{spelled}_enabled"] = ("set_autocast_enabled", device)
    return table


# Data, not code: `torch.<old>(args)` -> `torch.<new>("<device>", args)`.
DEPRECATED_STATE_FUNCTIONS = _table()
_MODULES = ("torch", "torch._C")


class DeprecatedAutocastState(Rule):
    """
    ## What it does
    Finds the deprecated device-specific autocast-state functions: `torch.get_autocast_gpu_dtype()`,
    `torch.get_autocast_cpu_dtype()`, `torch.set_autocast_gpu_dtype(d)`,
    `torch.is_autocast_cpu_enabled()`, `torch.set_autocast_cpu_enabled(e)` and their `ipu`/`xla`
    variants (the private `torch.cuda.amp` names are AMP079's).

    ## Why is this bad?
    Each emits a `DeprecationWarning` such as `torch.get_autocast_gpu_dtype() is deprecated. Please use
    torch.get_autocast_dtype('cuda') instead.` and will be removed. The device-generic functions take
    the device type as their first argument.

    ## Example
    ```python
    dtype = torch.get_autocast_gpu_dtype()
    if torch.is_autocast_cpu_enabled():
        ...
    ```

    ## Use instead
    ```python
    dtype = torch.get_autocast_dtype("cuda")
    if torch.is_autocast_enabled("cpu"):
        ...
    ```

    ## Fix safety
    Safe: the replacement is the one the warning names, with the device type as first argument. (The
    device-generic functions exist from torch 2.4.) A function imported by name is rewritten to the
    `torch.` spelling and `import torch` is added when needed.

    ## Torch versions
    The device-generic state functions are new in torch 2.4 (pytorch/pytorch#124359). Below the
    project's `target-torch` nothing is reported. A fallback that only old torch runs is left alone
    (timm's `layers/fast_norm.py`: `try: return torch.get_autocast_dtype(device)` /
    `except (AttributeError, TypeError): return torch.get_autocast_gpu_dtype()`).

    ## References
    - `torch/csrc/autograd/init.cpp` (the deprecation warnings); `ATen/autocast_mode.h`
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "AMP074"
    name = "deprecated-autocast-state-function"
    summary = "Deprecated autocast-state function (torch.get_autocast_gpu_dtype, ...)"
    severity = Severity.INFO
    fix_applicability = Applicability.SAFE
    needs = (r"_autocast_(cpu|gpu|ipu|xla)_",)

    valid = [
        """
import torch
dtype = torch.get_autocast_dtype("cuda")
on = torch.is_autocast_enabled("cpu")
""",
        # A user's own function of the same name.
        """
def get_autocast_gpu_dtype():
    return None
dtype = get_autocast_gpu_dtype()
""",
        # timm's layers/fast_norm.py: the fallback for torch < 2.4.
        """
import torch
def get_autocast_dtype(device="cuda"):
    try:
        return torch.get_autocast_dtype(device)
    except (AttributeError, TypeError):
        if device == "cpu":
            return torch.get_autocast_cpu_dtype()
        return torch.get_autocast_gpu_dtype()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
dtype = torch.get_autocast_gpu_dtype()
if torch.is_autocast_cpu_enabled():
    torch.set_autocast_gpu_dtype(torch.bfloat16)
""",
            fixed="""
import torch
dtype = torch.get_autocast_dtype("cuda")
if torch.is_autocast_enabled("cpu"):
    torch.set_autocast_dtype("cuda", torch.bfloat16)
""",
            count=3,
        ),
        Invalid(
            """
import torch as T
T.set_autocast_cpu_enabled(False)
""",
            fixed="""
import torch as T
T.set_autocast_enabled("cpu", False)
""",
        ),
        Invalid(
            """
from torch import get_autocast_cpu_dtype
dtype = get_autocast_cpu_dtype()
""",
            fixed="""
from torch import get_autocast_cpu_dtype
import torch
dtype = torch.get_autocast_dtype("cpu")
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        target = self.options.get("target_torch")
        if not supports(target, names.REPLACEMENT_SINCE["autocast_state"]):
            return
        for site in model.call_sites:
            if site.qualified_name is None:
                continue
            module, _, function = site.qualified_name.rpartition(".")
            if module not in _MODULES or function not in DEPRECATED_STATE_FUNCTIONS:
                continue
            if in_old_torch_branch(model, site.call):  # after the name test: it climbs to the module
                continue
            new, device = DEPRECATED_STATE_FUNCTIONS[function]
            yield self.finding(
                site.call,
                f"`{short(site.call)}` is deprecated; use `{module}.{new}({device!r}{', ...' if new.startswith('set_') else ''})`",
                fix=_fix(model, site, module, new, device),
                context=site.scope.name,
            )


def _fix(model: FileModel, site: CallSite, module: str, new: str, device: str) -> Optional[Fix]:
    if has_star_args(site.call):
        return None
    builder = FixBuilder(model.module)
    func = site.call.func
    if isinstance(func, cst.Attribute):
        new_func: cst.BaseExpression = func.with_changes(attr=cst.Name(new))
    else:
        new_func = builder.expression(f"{module}.{new}")
        builder.need_import("torch")
    device_arg = cst.Arg(value=cst.SimpleString(builder.string(device)))
    builder.replace(
        site.call, lambda updated: with_call_args(updated.with_changes(func=new_func), [device_arg, *updated.args])
    )
    return builder.build(f"Use `{module}.{new}`", Applicability.SAFE)

