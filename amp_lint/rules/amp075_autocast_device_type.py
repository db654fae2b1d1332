from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.analysis.model import FileModel, Scope, code_of, dotted_name
from amp_lint.rules._helpers import argument, file_devices, has_star_args, is_torch_device, literal_string, resolve_constant, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class AutocastDeviceType(Rule):
    """
    ## What it does
    Finds `torch.autocast` / `torch.amp.autocast` whose `device_type` is missing, is not a string (a
    `torch.device`), or carries a device index (`"cuda:0"`, `str(device)`, `f"cuda:{rank}"`).

    ## Why is this bad?
    - `torch.autocast()` without a device raises `TypeError: autocast.__init__() missing 1 required
      positional argument: 'device_type'`; a bare `@torch.autocast` decorator raises `ValueError`.
    - `torch.autocast(torch.device("cuda"))` raises ``ValueError: Expected `device_type` of type `str`,
      got: `<class 'torch.device'>` ``.
    - `torch.autocast("cuda:0")` is accepted but skips the `device == "cuda"` branch that checks CUDA
      availability and bfloat16 support: on a machine without CUDA it stays "enabled" silently. The
      parameter is a device *type*, "the same as the `type` attribute of a torch.device".

    ## Example
    ```python
    device = torch.device("cuda:0")
    with torch.autocast(str(device), dtype=torch.float16):
        out = model(x)
    ```

    ## Use instead
    ```python
    device = torch.device("cuda:0")
    with torch.autocast(device.type, dtype=torch.float16):
        out = model(x)
    ```

    ## Fix safety
    Safe for an index in a literal (`"cuda:0"` becomes `"cuda"`) and for a value that is provably a
    `torch.device` (`dev` becomes `dev.type`, `str(dev)` becomes `dev.type`). Unsafe when the
    device_type is missing and the file's other autocast regions name a single device, which is then
    inserted, or when `str(x)` is rewritten without proof that `x` is a `torch.device`. Otherwise
    reported only.

    ## References
    - `torch/amp/autocast_mode.py`: `autocast.__init__`, `autocast.__call__`
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) (`device_type`)
    """

    code = "AMP075"
    name = "autocast-device-type"
    summary = "autocast device_type missing, not a string, or with a device index"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bautocast\b",)
    # No device, an indexed string, a call (`str(device)`, `torch.device(...)`), a torch.device object, or a
    # bare `@autocast` decorator: what the `ast` pass of the prefilter notes about each autocast call.
    ast_needs = (r"autocast_device_(missing|indexed|call|object)|autocast_bare_decorator",)

    valid = [
        """
import torch
device = torch.device("cuda:0")
with torch.autocast(device.type, dtype=torch.float16):
    out = model(x)
with torch.autocast(device_type="cuda"):
    out = model(x)
""",
        # A string variable: fine.
        """
import torch
def run(model, x, device_type: str):
    with torch.autocast(device_type):
        return model(x)
""",
        # The deprecated classes take no device.
        """
import torch
with torch.cuda.amp.autocast():
    out = model(x)
""",
        # Arguments forwarded: unknown.
        """
import torch
def ctx(*args, **kwargs):
    return torch.autocast(*args, **kwargs)
""",
        # self.device may well be a string.
        """
import torch
class Runner:
    def run(self, x):
        with torch.autocast(self.device):
            return self.model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.autocast("cuda:0", dtype=torch.float16):
    out = model(x)
""",
            fixed="""
import torch
with torch.autocast("cuda", dtype=torch.float16):
    out = model(x)
""",
        ),
        Invalid(
            """
import torch
device = torch.device("cuda:0")
with torch.autocast(str(device)):
    out = model(x)
with torch.amp.autocast(device):
    out = model(x)
""",
            fixed="""
import torch
device = torch.device("cuda:0")
with torch.autocast(device.type):
    out = model(x)
with torch.amp.autocast(device.type):
    out = model(x)
""",
            count=2,
        ),
        Invalid(
            """
import torch
with torch.autocast(torch.device("cuda")):
    out = model(x)
""",
            fixed="""
import torch
with torch.autocast("cuda"):
    out = model(x)
""",
        ),
        Invalid(
            """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    a = model(x)
with torch.autocast(dtype=torch.bfloat16):
    b = model(x)
""",
            fixed="""
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    a = model(x)
with torch.autocast("cpu", dtype=torch.bfloat16):
    b = model(x)
""",
        ),
        Invalid(
            """
import torch
@torch.autocast
def forward(x):
    return x
"""
        ),
        Invalid(
            """
import torch
def step(model, x, rank):
    with torch.autocast(f"cuda:{rank}"):
        return model(x)
""",
            fixed="""
import torch
def step(model, x, rank):
    with torch.autocast("cuda"):
        return model(x)
""",
        ),
        # The device of a tensor is a torch.device.
        Invalid(
            """
import torch
def step(model, x):
    with torch.autocast(x.device):
        return model(x)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        devices = file_devices(model)
        for call, qualified, scope in model.autocast_calls:
            if qualified in names.IMPLIED_DEVICE or has_star_args(call):
                continue
            device = argument(call, 0, "device_type")
            if device is None:
                yield self.finding(
                    call,
                    f"`{short(call)}` has no device_type (a required argument): TypeError",
                    fix=_insert_device_fix(model, call, devices),
                    context=scope.name,
                )
                continue
            yield from self._check_device(model, call, device.value, scope)
        for region in model.regions:
            if region.is_decorator and region.spec.call is None and region.spec.qualified_name not in names.IMPLIED_DEVICE:
                bare = [d for d in region.node.decorators if not isinstance(d.decorator, cst.Call) and "autocast" in code_of(d)]
                yield self.finding(
                    bare[0] if bare else region.node,
                    "a bare `@autocast` decorator passes the function as device_type: ValueError; "
                    "write `@torch.autocast(\"cuda\")` (the device type)",
                    context=region.scope.name if region.scope else "",
                )

    def _check_device(self, model: FileModel, call: cst.Call, value: cst.BaseExpression, scope: Scope) -> Iterator[Finding]:
        literal = literal_string(value)
        if literal is not None:
            if ":" in literal:
                yield self.finding(
                    value,
                    f"device_type `{literal}` carries a device index; autocast wants the device type "
                    f"`{literal.split(':')[0]}` (with an index it skips CUDA's availability checks)",
                    fix=_replace_fix(model, value, model_string(model, literal.split(":")[0]), Applicability.SAFE),
                    context=scope.name,
                )
            return
        if isinstance(value, cst.FormattedString):
            head = value.parts[0] if value.parts else None
            if isinstance(head, cst.FormattedStringText) and ":" in head.value:
                device = head.value.split(":")[0]
                yield self.finding(
                    value,
                    f"device_type `{code_of(value)}` carries a device index; use the device type `{device}`",
                    fix=_replace_fix(model, value, model_string(model, device), Applicability.SAFE),
                    context=scope.name,
                )
            return
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "str" and len(value.args) == 1:
            inner = value.args[0].value
            key = dotted_name(inner)
            if key is None:
                return
            proven = is_torch_device(inner, scope)
            yield self.finding(
                value,
                f"device_type `{code_of(value)}` is 'cuda:0' for an indexed device; use `{key}.type`",
                fix=_replace_fix(
                    model, value, f"{key}.type", Applicability.SAFE if proven else Applicability.UNSAFE
                ),
                confidence=Confidence.HIGH if proven else Confidence.MEDIUM,
                context=scope.name,
            )
            return
        if isinstance(value, cst.Call) and scope.names.qualify(value.func) == "torch.device":
            inner = literal_string(value.args[0].value) if value.args else None
            yield self.finding(
                value,
                f"device_type `{short(value)}` is a torch.device, not a string: ValueError",
                fix=_replace_fix(model, value, model_string(model, inner.split(":")[0]), Applicability.SAFE)
                if inner is not None and len(value.args) == 1
                else None,
                context=scope.name,
            )
            return
        if isinstance(value, cst.Name) and is_torch_device(value, scope):
            yield self.finding(
                value,
                f"device_type `{value.value}` is a torch.device, not a string: ValueError; use `{value.value}.type`",
                fix=_replace_fix(model, value, f"{value.value}.type", Applicability.SAFE),
                context=scope.name,
            )
            return
        resolved = resolve_constant(value, scope)
        text = literal_string(resolved) if resolved is not value else None
        if text is not None and ":" in text:
            yield self.finding(
                value,
                f"device_type `{code_of(value)}` is `{text}`, with a device index; autocast wants the device type "
                f"`{text.split(':')[0]}`",
                context=scope.name,
            )
            return
        if isinstance(value, cst.Attribute) and value.attr.value == "device" and not _self_like(value.value):
            yield self.finding(
                value,
                f"device_type `{code_of(value)}` looks like a tensor's torch.device, not a string: "
                f"ValueError; use `{code_of(value)}.type`",
                confidence=Confidence.MEDIUM,
                context=scope.name,
            )


def _self_like(node: cst.BaseExpression) -> bool:
    """`self.device`, `args.device`, `cfg.device`: attributes of objects that often hold a string."""
    key = dotted_name(node)
    if key is None:
        return False  # next(model.parameters()).device: a tensor's device
    head = key.split(".")[0]
    return head in ("self", "cls") or any(
        word in key.lower() for word in ("arg", "cfg", "conf", "opt", "param", "setting", "hparam", "trainer", "accelerator", "state")
    )


def model_string(model: FileModel, value: str) -> str:
    return FixBuilder(model.module).string(value)


def _replace_fix(model: FileModel, node: cst.BaseExpression, code: str, applicability: Applicability) -> Fix:
    builder = FixBuilder(model.module)
    new = builder.expression(code)
    builder.replace(node, lambda updated: new)
    return builder.build(f"Use `{code}`", applicability)


def _insert_device_fix(model: FileModel, call: cst.Call, devices) -> Optional[Fix]:
    if len(devices) != 1:
        return None
    device = next(iter(devices))
    builder = FixBuilder(model.module)
    literal = builder.string(device)
    builder.replace(
        call, lambda updated: with_call_args(updated, [cst.Arg(value=cst.SimpleString(literal)), *updated.args])
    )
    return builder.build(f"Pass device_type {literal} (the device of the file's other autocast regions)", Applicability.UNSAFE)
