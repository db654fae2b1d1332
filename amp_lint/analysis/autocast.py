"""Autocast: what an autocast expression asks for, and the code that runs under it.

The tree walk (`builder`) makes an `AutocastRegion` for each `with` item and decorator that enters
autocast, with the `AutocastSpec` read from its call (`autocast_spec`); an `AutocastBinding` remembers a
name bound to an autocast instance or factory (`ctx = torch.autocast(...)`, `partial(autocast, ...)`).
Once the walk has seen every assignment, `autocast_regions.resolve_spec` turns a spec's device, dtype and
`enabled` arguments into literals where the file's constants say what they are. Events and call sites carry the
regions around them; `enabled_region` says which one is in force.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.syntax import argument, literal_bool, literal_string, own_nodes

CUDA_LIKE_DEVICES = frozenset({"cuda", "xpu", "mps", "mtia"})
BF16_DEFAULT_DEVICES = frozenset({"cpu", "hpu", "xla", "maia"})


class DType(enum.Enum):
    FP16 = "float16"
    BF16 = "bfloat16"
    OTHER = "other"  # float32 / float64: autocast does nothing useful (AMP054)
    UNKNOWN = "unknown"


@dataclass(eq=False)
class AutocastSpec:
    """What an autocast expression asks for: its device, dtype and whether it is switched on."""

    qualified_name: str
    call: Optional[cst.Call]  # None for a bare `@torch.autocast` decorator
    device_node: Optional[cst.BaseExpression] = None
    dtype_node: Optional[cst.BaseExpression] = None
    enabled_node: Optional[cst.BaseExpression] = None
    device: Optional[str] = None  # literal device type ("cuda"), set by autocast_regions.resolve_spec after the walk
    dtype: DType = DType.UNKNOWN
    enabled: Optional[bool] = True  # False: literal enabled=False; None: decided at run time

    @property
    def is_enabled(self) -> bool:
        """Enabled unless switched off by a literal False (an expression counts as enabled)."""
        return self.enabled is not False

    @property
    def is_deprecated_spelling(self) -> bool:
        return self.qualified_name in names.DEPRECATED_AMP


def autocast_spec(qualified_name: str, call: Optional[cst.Call], extra_args: Sequence[cst.Arg] = ()) -> AutocastSpec:
    """Read device/dtype/enabled from an autocast call (`extra_args`: arguments bound by functools.partial)."""
    spec = AutocastSpec(qualified_name=qualified_name, call=call)
    if call is None:
        return spec
    # functools.partial's order: its positionals, the call's, then the keywords (the call's win). Keyword
    # before positional would be an invalid node (`partial(torch.autocast, dtype=...)` then `ac("cuda")`).
    both = tuple(extra_args) + tuple(call.args)
    positional = tuple(a for a in both if a.keyword is None and a.star != "**")
    merged = cst.Call(func=call.func, args=positional + tuple(a for a in both if a not in positional))
    implied = names.IMPLIED_DEVICE.get(qualified_name)
    if implied is None:  # torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)
        device = argument(merged, 0, "device_type")
        dtype = argument(merged, 1, "dtype")
        enabled = argument(merged, 2, "enabled")
        spec.device_node = device.value if device else None
    else:  # torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)
        dtype = argument(merged, 1, "dtype")
        enabled = argument(merged, 0, "enabled")
    spec.dtype_node = dtype.value if dtype else None
    spec.enabled_node = enabled.value if enabled else None
    if enabled is not None:
        spec.enabled = literal_bool(enabled.value)
    return spec


@dataclass(eq=False)
class AutocastBinding:
    """`ctx = torch.autocast(...)` (an instance) or `amp_cm = autocast` / `partial(autocast, ...)` (a factory)."""

    qualified_name: str
    call: Optional[cst.Call]  # the autocast call for an instance; the partial(...) call for a partial
    is_factory: bool
    partial_args: Tuple[cst.Arg, ...] = ()


# --- a project's own autocast factory ------------------------------------------------------------------


def wrapper_spec(function: cst.FunctionDef, qualify) -> Optional[AutocastSpec]:
    """The autocast a function of the project returns (issue 26, principle 4): `def autocast(enabled):
    return torch.amp.autocast("cuda", enabled=enabled)`, every `return` an autocast call (a version check
    may pick `torch.cuda.amp.autocast` on one branch). Entering its result is entering autocast.

    The spec keeps what the returned calls say as literals (a literal `enabled=False` everywhere: off); an
    argument that comes from the wrapper's parameters is decided at run time. `call` is None: the wrapper's
    call is not an autocast call whose arguments rules may read or fix."""
    returns = [node for node in own_nodes(function.body) if isinstance(node, cst.Return)]
    if not returns or any(_own_yield(function.body)):
        return None
    calls = []
    for node in returns:
        value = node.value
        if not isinstance(value, cst.Call):
            return None
        qualified = qualify(value.func) or names.dotted_name(value.func) or ""
        if qualified not in names.AUTOCAST and not qualified.endswith(".amp.autocast"):
            return None  # a vendor's `torch_npu.npu.amp.autocast` is one; a nullcontext is not
        calls.append((qualified, autocast_spec(qualified, value)))
    calls.sort(key=lambda pair: pair[0] not in names.AUTOCAST)
    qualified = calls[0][0]
    spec = AutocastSpec(qualified_name=qualified, call=None)
    devices = {literal_string(s.device_node) if s.device_node is not None else names.IMPLIED_DEVICE.get(q) for q, s in calls}
    if len(devices) == 1 and None not in devices:
        spec.device = devices.pop().split(":")[0]
    enabled = {s.enabled for _, s in calls}
    spec.enabled = enabled.pop() if len(enabled) == 1 else None
    return spec


def _own_yield(body: cst.CSTNode):
    return (node for node in own_nodes(body) if isinstance(node, (cst.Yield,)))


# `with accelerator.autocast():`, `with fabric.autocast():`: a framework's own autocast context (it enters
# `torch.autocast` when the run is configured for mixed precision). Not one of `regions`: its device, dtype
# and switch are the framework's configuration, which the rules about those cannot read.
FRAMEWORK_AUTOCAST = "<framework>.autocast"


def not_a_library_function(qualified: Optional[str]) -> bool:
    """An object's `autocast()` (accelerator, fabric) or a vendor's `torch.npu.amp.autocast`, not an imported
    library's own function of that name (Transformer Engine's `te.autocast`: an FP8 recipe context that never
    enters torch's autocast)."""
    return qualified is None or qualified.startswith("torch") or qualified.endswith(".amp.autocast")


def is_framework_autocast(expr: cst.BaseExpression) -> bool:
    """`x.autocast(...)` on an object (not a module path `torch.autocast`, recognised already), not switched
    off by a literal `enabled=False`."""
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute) or expr.func.attr.value != "autocast":
        return False
    return not any(
        a.keyword is not None and a.keyword.value == "enabled" and isinstance(a.value, cst.Name) and a.value.value == "False"
        for a in expr.args
    )
