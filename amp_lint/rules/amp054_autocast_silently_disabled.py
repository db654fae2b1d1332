from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder, keyword_arg, with_call_args
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.value_types import Kind
from amp_lint.rules._helpers import argument, definitions, has_star_args, short, value_of
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_NOT_LOW_PRECISION = frozenset(
    {
        "torch.float32",
        "torch.float",
        "torch.float64",
        "torch.double",
        "torch.int8",
        "torch.uint8",
        "torch.int16",
        "torch.int32",
        "torch.int64",
        "torch.long",
        "torch.int",
        "torch.bool",
        "torch.complex64",
        "torch.complex128",
    }
)


class AutocastSilentlyDisabled(Rule):
    """
    ## What it does
    Finds `torch.autocast(...)` / `torch.amp.autocast(...)` calls whose dtype cannot work: a `True` or
    `False` in the second position (that is the `dtype` parameter, not `enabled`), another literal that
    is not a dtype, or, on a device other than CUDA, a dtype other than `torch.float16` /
    `torch.bfloat16`.

    ## Why is this bad?
    `torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)`: the second positional
    parameter is `dtype`. `torch.amp.autocast("cpu", True)`, the old `torch.cuda.amp.autocast(enabled)`
    order carried over, sets `dtype=True`. On every non-CUDA device an unsupported dtype warns "In CPU
    autocast, but the target dtype is not supported. Disabling autocast." and autocast is silently off;
    on CUDA the bad dtype reaches `set_autocast_dtype`. (On CUDA `dtype=torch.float32` is accepted and
    upcasts the autocast op lists, an idiom for forcing float32; it is not reported.)

    ## Example
    ```python
    with torch.autocast("cpu", True):
        out = model(x)
    ```

    ## Use instead
    ```python
    with torch.autocast("cpu", enabled=True):
        out = model(x)
    ```

    ## Fix safety
    Safe for a bool in the second position: it becomes `enabled=<bool>`, which is what the author wrote
    it for. A flag-like name there (`use_amp`, `args.fp16`) is reported at medium confidence with an
    unsafe fix. Other dtypes are reported without a fix.

    ## References
    - `torch/amp/autocast_mode.py`: `autocast.__init__` (the supported dtypes per device)
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast)
    """

    code = "AMP054"
    name = "autocast-silently-disabled"
    summary = "autocast dtype is a bool/float32/non-dtype: autocast is disabled or a no-op"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bautocast\b",)
    # An autocast call with a second positional argument (the dtype slot) or a dtype= keyword.
    ast_needs = (r"autocast_dtype_arg",)

    valid = [
        # A vendor backend's device (torch_npu registers "npu" as PrivateUse1): its own
        # `get_amp_supported_dtype()` decides, and torch_npu's lists float32.
        """
import torch
with torch.autocast(device_type="npu", dtype=torch.float32):
    out = torch.mm(a, a)
""",
        """
import torch
with torch.autocast("cpu", torch.bfloat16):
    out = model(x)
with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
    out = model(x)
""",
        # The deprecated class's first parameter is `enabled`.
        """
import torch
with torch.cuda.amp.autocast(True):
    out = model(x)
""",
        # Disabled on purpose: the dtype does not matter.
        """
import torch
with torch.autocast("cuda", dtype=torch.float32, enabled=False):
    out = model(x)
""",
        # On CUDA a float32 autocast forces float32 inside an outer region (diffusers does this).
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = model(x)
    with torch.autocast(h.device.type, torch.float32):
        freqs = torch.outer(pos, inv_freq)
""",
        # float32 on CUDA through an attribute: the float32-forcing idiom, not reported.
        """
import torch
class Encoder:
    def __init__(self):
        self.device = "cuda"
        self.rope_dtype = torch.float32

    def forward(self, x):
        with torch.autocast(self.device, dtype=self.rope_dtype):
            return self.rope(x)
""",
        # A dtype chosen at run time.
        """
import torch
dtype = torch.bfloat16 if args.bf16 else torch.float32
with torch.autocast("cuda", dtype=dtype):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.amp.autocast("cpu", True):
    out = model(x)
""",
            fixed="""
import torch
with torch.amp.autocast("cpu", enabled=True):
    out = model(x)
""",
        ),
        Invalid(
            """
from torch import autocast
with autocast("cuda", False, cache_enabled=False):
    out = model(x)
""",
            fixed="""
from torch import autocast
with autocast("cuda", enabled=False, cache_enabled=False):
    out = model(x)
""",
        ),
        # A flag in the dtype position: medium confidence, unsafe fix.
        Invalid(
            """
import torch
def forward(model, x, args):
    with torch.autocast("cuda", args.use_amp):
        return model(x)
""",
            fixed="""
import torch
def forward(model, x, args):
    with torch.autocast("cuda", enabled=args.use_amp):
        return model(x)
""",
        ),
        Invalid(
            """
import torch
with torch.autocast(device_type="cpu", dtype=torch.float32):
    out = model(x)
"""
        ),
        Invalid(
            """
import torch
AMP_DTYPE = torch.float64
with torch.autocast("cpu", dtype=AMP_DTYPE):
    out = model(x)
"""
        ),
        # The device and the dtype set in __init__ (through values).
        Invalid(
            """
import torch
class Trainer:
    def __init__(self):
        self.device_type = "cpu"
        self.amp_dtype = torch.float32

    def step(self, x):
        with torch.autocast(self.device_type, dtype=self.amp_dtype):
            return self.model(x)
"""
        ),
        Invalid(
            """
import torch
with torch.autocast("cuda", "float16"):
    out = model(x)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for call, qualified, scope in model.autocast_calls:
            if has_star_args(call):
                continue
            deprecated = qualified in names.IMPLIED_DEVICE
            enabled = argument(call, 0 if deprecated else 2, "enabled")
            if enabled is not None and value_of(model, enabled.value, scope).literals == (False,):
                continue
            dtype = argument(call, 1, "dtype")
            if dtype is None:
                continue
            value = value_of(model, dtype.value, scope)
            positional_bool = dtype.keyword is None and not deprecated and value.kind is Kind.BOOL and value.certain
            bool_named = dtype.keyword is None and not deprecated and _looks_boolean(dtype.value)
            if positional_bool or bool_named:
                yield self.finding(
                    dtype,
                    f"`{short(call)}` passes `{short(dtype.value, 30)}` as the dtype (the second parameter of "
                    "torch.autocast is `dtype`, not `enabled`): autocast is disabled or fails",
                    fix=_keywordize_fix(model, call, dtype, Applicability.SAFE if positional_bool else Applicability.UNSAFE),
                    confidence=Confidence.HIGH if positional_bool else Confidence.MEDIUM,
                    context=scope.name,
                    related=definitions(value, "set") if dtype.value is not None and not _is_literal(dtype.value) else (),
                )
            elif value.known and value.kind in (Kind.STRING, Kind.NUMBER, Kind.BOOL):
                yield self.finding(
                    dtype,
                    f"`{short(call)}`: dtype `{short(dtype.value, 30)}` is not a torch dtype; "
                    "use torch.float16 or torch.bfloat16",
                    context=scope.name,
                    related=definitions(value, "set") if not _is_literal(dtype.value) else (),
                )
            elif value.kind is Kind.DTYPE and value.literals and all(d in _NOT_LOW_PRECISION for d in value.literals):
                # On CUDA a float32 autocast still upcasts the low-precision op lists (a way to force
                # float32 inside an outer region); only a known non-CUDA device disables it for sure.
                device = names.IMPLIED_DEVICE.get(qualified) or _device_type(model, call, scope)
                if device is None or device == "cuda" or device not in _TORCH_LISTED_DEVICES:
                    continue  # a vendor backend (torch_npu's "npu") lists its own dtypes, float32 among them
                yield self.finding(
                    dtype,
                    f"`{short(call)}`: {device} autocast does not support `{value.literals[0]}`: it warns "
                    "and disables autocast; use torch.float16 or torch.bfloat16, or enabled=False",
                    context=scope.name,
                    related=definitions(value, "set") if not _is_literal(dtype.value) else (),
                )


# The device types whose autocast dtypes torch itself lists (`autocast.__init__`: bfloat16 and float16). Any
# other is a renamed PrivateUse1 backend, whose `get_amp_supported_dtype()` decides.
_TORCH_LISTED_DEVICES = frozenset({"cpu", "xpu", "hpu", "mps", "xla", "mtia", "maia", "ipu"})


def _is_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.SimpleString, cst.Integer, cst.Float, cst.ConcatenatedString)) or (
        isinstance(node, cst.Name) and node.value in ("True", "False")
    ) or dotted_name(node) in _NOT_LOW_PRECISION


def _device_type(model: FileModel, call: cst.Call, scope) -> Optional[str]:
    """The one device type of the autocast call's device_type argument, through values."""
    device = argument(call, 0, "device_type")
    if device is None:
        return None
    return value_of(model, device.value, scope).device_type


_BOOLEAN_NAME = re.compile(r"^(use|enable|is|do|with)_|(^|_)(amp|enabled?|fp16|mixed_precision|autocast)$", re.IGNORECASE)


def _looks_boolean(expr: cst.BaseExpression) -> bool:
    """`use_amp`, `args.fp16`, `enabled`: a flag, not a dtype."""
    key = dotted_name(expr)
    if key is None:
        return False
    last = key.split(".")[-1]
    return bool(_BOOLEAN_NAME.search(last)) and not re.search(r"dtype|type|precision|half|bf16|bfloat", last, re.I)


def _keywordize_fix(model: FileModel, call: cst.Call, dtype: cst.Arg, applicability: Applicability) -> Optional[Fix]:
    positional = [a for a in call.args if a.keyword is None]
    if positional[-1] is not dtype or any(a.keyword is not None and a.keyword.value == "enabled" for a in call.args):
        return None
    builder = FixBuilder(model.module)
    index = list(call.args).index(dtype)

    def keywordize(updated: cst.CSTNode) -> cst.CSTNode:
        args = list(updated.args)
        args[index] = keyword_arg("enabled", args[index].value).with_changes(comma=args[index].comma)
        return with_call_args(updated, args)

    builder.replace(call, keywordize)
    return builder.build("Pass the bool as `enabled=`", applicability)
