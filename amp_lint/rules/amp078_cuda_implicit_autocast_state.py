from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.rules._helpers import has_star_args, short
from amp_lint.rules._version_shims import in_old_torch_branch
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

# Function -> how many arguments the CUDA-implicit overload takes.
_IMPLICIT = {"is_autocast_enabled": 0, "set_autocast_enabled": 1}
_MODULES = ("torch", "torch._C")


class CudaImplicitAutocastState(Rule):
    """
    ## What it does
    Finds `torch.is_autocast_enabled()` without a device type, and `torch.set_autocast_enabled(flag)`
    with only the flag.

    ## Why is this bad?
    These overloads mean CUDA. Under `torch.autocast("cpu")` (or `"xpu"`, `"mps"`),
    `torch.is_autocast_enabled()` is `False` (checked on torch 2.13: `False` there, while
    `torch.is_autocast_enabled("cpu")` is `True`), so code that casts its inputs to the autocast dtype
    when "autocast is on" silently runs in float32 on every other device (pytorch/ao #4601,
    pytorch/pytorch #110966).

    ## Example
    ```python
    if torch.is_autocast_enabled():
        x = x.to(torch.get_autocast_dtype("cuda"))
    ```

    ## Use instead
    ```python
    if torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))
    ```

    ## Fix safety
    Safe: the fix writes the device the call already means, `"cuda"`, which keeps behaviour and makes
    the assumption visible; choosing the tensor's device is left to the author. Off by default (info):
    CUDA-only code is correct as it is.

    ## Torch versions
    The device-taking overloads are new in torch 2.4 (pytorch/pytorch#124359); below the project's
    `target-torch` nothing is reported, and a fallback that only old torch runs is left alone.

    ## References
    - `torch/_C/__init__.pyi` (torch 2.13): the `is_autocast_enabled()` / `is_autocast_enabled(device_type)`
      and `set_autocast_enabled(enabled)` / `set_autocast_enabled(device_type, enabled)` overloads
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "AMP078"
    name = "cuda-implicit-autocast-state"
    summary = "torch.is_autocast_enabled() / set_autocast_enabled(flag) without a device type means CUDA"
    severity = Severity.INFO
    default_enabled = False
    fix_applicability = Applicability.SAFE
    needs = (r"_autocast_enabled\b",)  # literal-first: the prefilter searches it fast

    valid = [
        """
import torch
on = torch.is_autocast_enabled(x.device.type)
torch.set_autocast_enabled("cpu", False)
""",
        """
def is_autocast_enabled():
    return False
on = is_autocast_enabled()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
if torch.is_autocast_enabled():
    x = x.half()
""",
            fixed="""
import torch
if torch.is_autocast_enabled("cuda"):
    x = x.half()
""",
        ),
        Invalid(
            """
from torch import set_autocast_enabled
set_autocast_enabled(False)
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        if not supports(self.options.get("target_torch"), names.REPLACEMENT_SINCE["autocast_state"]):
            return
        for site in model.call_sites:
            if site.qualified_name is None:
                continue
            module, _, function = site.qualified_name.rpartition(".")
            if module not in _MODULES or function not in _IMPLICIT:
                continue
            if has_star_args(site.call) or len(site.call.args) != _IMPLICIT[function]:
                continue
            if any(arg.keyword is not None for arg in site.call.args) or in_old_torch_branch(model, site.call):
                continue
            yield self.finding(
                site.call,
                f"`{short(site.call)}` asks about CUDA autocast only; pass the device type "
                f"(`torch.{function}(x.device.type{', ...' if function.startswith('set_') else ''})`)",
                fix=_fix(model, site),
                context=site.scope.name,
            )


def _fix(model: FileModel, site: CallSite) -> Optional[Fix]:
    if not isinstance(site.call.func, cst.Attribute):
        return None  # imported by name: rewriting the import is not worth it for an info rule
    builder = FixBuilder(model.module)
    device = cst.Arg(value=cst.SimpleString(builder.string("cuda")))
    builder.replace(site.call, lambda updated: with_call_args(updated, [device, *updated.args]))
    return builder.build('Pass `"cuda"`, the device the call already means', Applicability.SAFE)
