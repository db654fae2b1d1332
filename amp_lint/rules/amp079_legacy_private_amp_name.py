from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.rules._helpers import has_star_args, short
from amp_lint.rules._version_shims import in_old_torch_branch
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class LegacyPrivateAmpName(Rule):
    """
    ## What it does
    Finds the private `torch.cuda.amp` names code still uses: `torch.cuda.amp.autocast_mode._cast(value,
    dtype)` and `from torch.cuda.amp.grad_scaler import OptState`.

    ## Why is this bad?
    `torch.cuda.amp.autocast_mode._cast` warns ``FutureWarning: `torch.cuda.amp.autocast_mode._cast(value,
    dtype)` is deprecated. Please use `torch.amp.autocast_mode._cast(value, 'cuda', dtype)` instead.``, and
    `torch.cuda.amp.grad_scaler` keeps `OptState` only as an "unused import for BC reasons" (torch 2.13's
    source): it is `torch.amp.grad_scaler.OptState`, the same class. Both go when `torch.cuda.amp` goes.

    ## Example
    ```python
    from torch.cuda.amp.grad_scaler import OptState
    args = torch.cuda.amp.autocast_mode._cast(args, torch.float16)
    ```

    ## Use instead
    ```python
    from torch.amp.grad_scaler import OptState
    args = torch.amp.autocast_mode._cast(args, "cuda", torch.float16)
    ```

    ## Fix safety
    Safe: `_cast` gains `"cuda"`, the device the old function passes, as its second argument; the
    `OptState` import is pointed at `torch.amp.grad_scaler` (the same class). No fix for `_cast` imported
    by name, or an import that brings other names too.

    ## Torch versions
    The device-taking `torch.amp.autocast_mode._cast` is new in torch 2.4 (pytorch/pytorch#126531, which
    made custom_fwd device-generic); `torch.amp.grad_scaler.OptState` in 2.3 (GradScaler's move to
    `torch/amp`). Below the project's `target-torch` nothing is reported; fallbacks for old torch are
    left alone.

    ## References
    - `torch/cuda/amp/autocast_mode.py` and `torch/cuda/amp/grad_scaler.py` (torch 2.13)
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "AMP079"
    name = "legacy-private-amp-name"
    summary = "Private torch.cuda.amp name (autocast_mode._cast, grad_scaler.OptState) kept only for compatibility"
    severity = Severity.INFO
    fix_applicability = Applicability.SAFE
    # `amp` first: AMP070 scans it already. `cuda`: `torch.amp.autocast_mode._cast` is the modern name.
    needs = (r"\bamp\b", r"\b_cast\b|\bOptState\b", r"\bcuda\b")

    valid = [
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
        return _legacy_private_names(self, model, self.options.get("target_torch"))


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
