from __future__ import annotations

from typing import Dict, Iterator, Optional, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.analysis.model import CallSite, FileModel, dotted_name
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
    variants; and the private `torch.cuda.amp` names code still uses:
    `torch.cuda.amp.autocast_mode._cast(value, dtype)` and `from torch.cuda.amp.grad_scaler import OptState`.

    ## Why is this bad?
    Each emits a `DeprecationWarning` such as `torch.get_autocast_gpu_dtype() is deprecated. Please use
    torch.get_autocast_dtype('cuda') instead.` and will be removed. The device-generic functions take
    the device type as their first argument. `torch.cuda.amp.autocast_mode._cast` warns
    ``FutureWarning: `torch.cuda.amp.autocast_mode._cast(value, dtype)` is deprecated. Please use
    `torch.amp.autocast_mode._cast(value, 'cuda', dtype)` instead.``; `torch.cuda.amp.grad_scaler` keeps
    `OptState` only as "unused import for BC reasons" (torch 2.13's source): it is
    `torch.amp.grad_scaler.OptState`, the same object.

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
    `torch.` spelling and `import torch` is added when needed. `_cast` gains `"cuda"` as its second
    argument; the `OptState` import is pointed at `torch.amp.grad_scaler` (the same class).

    ## Torch versions
    The device-generic state functions and the device-taking `torch.amp.autocast_mode._cast` are new in
    torch 2.4 (pytorch/pytorch#124359, #126531); `torch.amp.grad_scaler.OptState` in 2.3. Below the
    project's `target-torch` nothing is reported. A fallback that only old torch runs is left alone
    (timm's `layers/fast_norm.py`: `try: return torch.get_autocast_dtype(device)` /
    `except (AttributeError, TypeError): return torch.get_autocast_gpu_dtype()`).

    ## References
    - `torch/csrc/autograd/init.cpp` (the deprecation warnings); `ATen/autocast_mode.h`
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "AMP074"
    name = "deprecated-autocast-state-function"
    summary = "Deprecated autocast-state function (torch.get_autocast_gpu_dtype, ...) or private torch.cuda.amp name"
    severity = Severity.INFO
    fix_applicability = Applicability.SAFE
    needs = (r"_autocast_(cpu|gpu|ipu|xla)_|\b_cast\b|\bOptState\b",)

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
        """
from torch.amp.grad_scaler import OptState
from torch.amp.autocast_mode import _cast
args = _cast(args, "cuda", torch.float16)
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
        Invalid(
            """
import torch
def forward(ctx, *args):
    args = torch.cuda.amp.autocast_mode._cast(args, torch.float16)
""",
            fixed="""
import torch
def forward(ctx, *args):
    args = torch.amp.autocast_mode._cast(args, "cuda", torch.float16)
""",
        ),
        Invalid(
            """
from torch.cuda.amp.grad_scaler import OptState
if state["stage"] is OptState.READY:
    pass
""",
            fixed="""
from torch.amp.grad_scaler import OptState
if state["stage"] is OptState.READY:
    pass
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        target = self.options.get("target_torch")
        yield from _legacy_private_names(self, model, target)
        if not supports(target, names.REPLACEMENT_SINCE["autocast_state"]):
            return
        for site in model.call_sites:
            if site.qualified_name is None or in_old_torch_branch(model, site.call):
                continue
            module, _, function = site.qualified_name.rpartition(".")
            if module not in _MODULES or function not in DEPRECATED_STATE_FUNCTIONS:
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


def _legacy_private_names(self: Rule, model: FileModel, target) -> Iterator[Finding]:
    """`torch.cuda.amp.autocast_mode._cast(...)` calls and `from torch.cuda.amp.grad_scaler import OptState`."""
    cast_name = "torch.cuda.amp.autocast_mode._cast"
    if supports(target, names.REPLACEMENT_SINCE["_cast"]):
        for site in model.call_sites:
            if site.qualified_name != cast_name or in_old_torch_branch(model, site.call):
                continue
            yield self.finding(
                site.call,
                f"`{short(site.call)}` is deprecated; use `torch.amp.autocast_mode._cast(value, 'cuda', dtype)`",
                fix=_cast_fix(model, site),
                context=site.scope.name,
            )
    if not supports(target, names.REPLACEMENT_SINCE["OptState"]):
        return
    for statement, scope in model.imports:
        if not isinstance(statement, cst.ImportFrom) or statement.relative or statement.module is None:
            continue
        if dotted_name(statement.module) != "torch.cuda.amp.grad_scaler" or isinstance(statement.names, cst.ImportStar):
            continue
        imported = [dotted_name(alias.name) for alias in statement.names]
        if "OptState" not in imported or in_old_torch_branch(model, statement):
            continue
        fix = None
        if all(name in ("OptState", "GradScaler") for name in imported) and "GradScaler" not in imported:
            builder = FixBuilder(model.module)
            new_module = builder.expression("torch.amp.grad_scaler")
            builder.replace(statement, lambda updated: updated.with_changes(module=new_module))
            fix = builder.build("Import `OptState` from `torch.amp.grad_scaler`", Applicability.SAFE)
        yield self.finding(
            statement,
            "`torch.cuda.amp.grad_scaler.OptState` is kept only for backward compatibility; "
            "import it from `torch.amp.grad_scaler`",
            fix=fix,
            context=scope.name,
        )


def _cast_fix(model: FileModel, site: CallSite) -> Optional[Fix]:
    """`torch.cuda.amp.autocast_mode._cast(v, dtype)` -> `torch.amp.autocast_mode._cast(v, "cuda", dtype)`."""
    call = site.call
    if has_star_args(call) or len(call.args) != 2 or any(arg.keyword is not None for arg in call.args):
        return None
    func = call.func
    if not (isinstance(func, cst.Attribute) and dotted_name(func) and dotted_name(func).endswith("cuda.amp.autocast_mode._cast")):
        return None  # imported by name: the import would need rewriting too
    builder = FixBuilder(model.module)
    head = dotted_name(func).split(".")[0]
    new_func = builder.expression(f"{head}.amp.autocast_mode._cast")
    device = cst.Arg(value=cst.SimpleString(builder.string("cuda")))

    def rewrite(updated: cst.Call) -> cst.Call:
        value, dtype = updated.args
        return with_call_args(updated.with_changes(func=new_func), [value, device, dtype])

    builder.replace(call, rewrite)
    return builder.build("Use `torch.amp.autocast_mode._cast` with the device", Applicability.SAFE)
