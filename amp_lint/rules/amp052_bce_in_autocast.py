from __future__ import annotations

from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.file_model import AssignmentSite, CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.rules._bce_calls import called_under, callees
from amp_lint.rules._helpers import region_device_types, short
from amp_lint.rules.base import Finding, Invalid, Rule

_BCE_FUNCTIONS = frozenset({"torch.nn.functional.binary_cross_entropy"})
_BCE_MODULES = frozenset({"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss", "torch.nn.modules.BCELoss"})
_SIGMOID = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid"})


class BceInAutocast(Rule):
    """
    ## What it does
    Finds `torch.nn.functional.binary_cross_entropy(...)` and calls of a `torch.nn.BCELoss()` instance
    inside an enabled autocast region whose device is not the CPU, also when the call inside the region
    is a loss helper of the same file that runs one (a function, a method through `self.`, an instance of
    a loss class: its `__call__` or `forward`) in the caller's autocast state.

    ## Why is this bad?
    On CUDA (and the out-of-tree backends that register the same ban) these ops are banned under
    autocast: `RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe
    to autocast. ... combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits
    or torch.nn.BCEWithLogitsLoss.` CPU autocast simply runs them in float32, so CPU-only tests do not
    catch it.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = F.binary_cross_entropy(torch.sigmoid(logits), y)
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        loss = F.binary_cross_entropy_with_logits(logits, y)
    ```

    ## Fix safety
    No automatic fix: `binary_cross_entropy_with_logits` takes the logits, not the probabilities, so
    the code before the loss changes too (and its numerics, for the better).

    ## References
    - [AMP: Prefer binary_cross_entropy_with_logits over binary_cross_entropy](https://docs.pytorch.org/docs/stable/amp.html#prefer-binary-cross-entropy-with-logits-over-binary-cross-entropy)
    - `aten/src/ATen/autocast_mode.cpp`: `binary_cross_entropy_banned`
    """

    code = "AMP052"
    name = "bce-inside-cuda-autocast"
    summary = "binary_cross_entropy / BCELoss inside CUDA autocast (banned)"
    severity = Severity.ERROR
    needs = (r"\bautocast\b", r"binary_cross_entropy|BCELoss")

    valid = [
        # The helper turns autocast off around its BCE (in float32): allowed.
        """
import torch
import torch.nn.functional as F
def bce_term(p, y):
    with torch.autocast("cuda", enabled=False):
        return F.binary_cross_entropy(p.float(), y.float())
def step(model, x, y):
    with torch.autocast("cuda"):
        return bce_term(torch.sigmoid(model(x)), y)
""",
        """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    logits = model(x)
    loss = F.binary_cross_entropy_with_logits(logits, y)
""",
        # CPU autocast runs binary_cross_entropy in float32.
        """
import torch
import torch.nn.functional as F
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
""",
        # The documented way out: a nested disabled region.
        """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    probs = torch.sigmoid(model(x))
    with torch.autocast("cuda", enabled=False):
        loss = F.binary_cross_entropy(probs.float(), y)
""",
        # A CPU device set in __init__ (through values).
        """
import torch
import torch.nn.functional as F
class Scorer:
    def __init__(self):
        self.device_type = "cpu"

    def score(self, x, y):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return F.binary_cross_entropy(torch.sigmoid(self.model(x)), y)
""",
        # Outside the region.
        """
import torch
from torch import nn
criterion = nn.BCELoss()
with torch.autocast("cuda"):
    probs = torch.sigmoid(model(x))
loss = criterion(probs.float(), y)
""",
    ]
    invalid = [
        # Issue 46, principle 5 (reached through calls): the BCE runs in a loss helper the step calls.
        Invalid(
            """
import torch
import torch.nn.functional as F
def bce_term(logits, y):
    return F.binary_cross_entropy(torch.sigmoid(logits), y)
class Criterion:
    def __init__(self):
        self.bce = torch.nn.BCELoss()
    def __call__(self, logits, y):
        return self.bce(torch.sigmoid(logits), y)
def step(model, x, y):
    crit = Criterion()
    with torch.autocast("cuda"):
        out = model(x)
        return bce_term(out, y) + crit(out, y)
""",
            count=2,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
"""
        ),
        # CUDA wherever CUDA is available: it raises there.
        Invalid(
            """
import torch
import torch.nn.functional as F
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
with torch.autocast(device.type):
    loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
"""
        ),
        Invalid(
            """
import torch
from torch import nn
class Trainer:
    def __init__(self):
        self.criterion = nn.BCELoss()

    def step(self, x, y):
        with torch.cuda.amp.autocast():
            loss = self.criterion(self.model(x), y)
        return loss
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        instances = [
            a
            for a in model.assignment_sites + model.unpacked_sites
            if isinstance(a.value, cst.Call) and a.scope.names.qualify(a.value.func) in _BCE_MODULES
        ]
        outside = []  # BCE calls in the autocast state of their function's caller
        for site in model.call_sites:
            what = _bce_kind(site, instances)
            if what is None:
                continue
            if not site.regions:
                outside.append((site, what))
                continue
            region = _cuda_region(model, site, site.in_enabled_autocast())
            if region is not None:
                yield self._finding(site, what, region, f"inside `{_region_text(region[0])}`")
        if not outside:
            return
        # Issue 46, principle 5: a loss helper, a loss module's forward, a method of the trainer that the
        # file calls inside a CUDA autocast runs its BCE under it; the finding is at the BCE, where it raises.
        entries = {}
        for site in model.call_sites:
            region = _cuda_region(model, site, site.in_enabled_autocast()) if site.regions else None
            if region is not None:
                for callee in callees(model, site):
                    entries.setdefault(id(callee), (site, region))
        reached = called_under(model, entries)
        for site, what in outside:
            found = reached.get(id(site.scope))
            if found is not None:
                call, region = found
                yield self._finding(
                    site, what, region,
                    f"in `{site.scope.name}()`, which `{short(call.call)}` runs inside `{_region_text(region[0])}`",
                    related=(("called under autocast", call.call),),
                )

    def _finding(self, site: CallSite, what: str, region, where: str, related=()) -> Finding:
        advice = "use binary_cross_entropy_with_logits on the logits"
        arg = site.call.args[0].value if site.call.args else None
        if arg is not None and _is_sigmoid(site, arg):
            advice = "drop the sigmoid and use binary_cross_entropy_with_logits / BCEWithLogitsLoss"
        return self.finding(
            site.call,
            f"`{short(site.call)}` ({what}) {where} raises RuntimeError on CUDA: it is unsafe to autocast; {advice}",
            confidence=Confidence.HIGH if region[1] else Confidence.MEDIUM,
            context=site.scope.name,
            related=related,
        )


def _cuda_region(model: FileModel, site: CallSite, region: Optional[AutocastRegion]):
    """(region, proved) for an enabled autocast around `site` that is not the CPU's; None otherwise. On a host
    with CUDA, `"cuda" if torch.cuda.is_available() else "cpu"` is CUDA there. Not proved: an unknown device,
    or a flag that is off unless a caller the file does not show asks for it."""
    if region is None:
        return None
    devices = region_device_types(model, region, with_cuda=True)
    if devices is not None and devices <= {"cpu"}:
        return None
    return region, devices is not None and not _off_unless_a_caller_asks(model, site, region)


def _off_unless_a_caller_asks(model: FileModel, site: CallSite, region: AutocastRegion) -> bool:
    """Issue 46: `autocast(enabled=flag)` where `flag` is a parameter of the function defaulting to False,
    and no call in the file passes it: the block switches autocast *off* (it keeps the loss out of an outer
    autocast) unless a caller the file does not show asks for it. Then the finding is an assumption."""
    flag = region.spec.enabled_node
    function = site.scope.node
    if region.spec.enabled is not None or not isinstance(flag, cst.Name) or not isinstance(function, cst.FunctionDef):
        return False
    params = [*function.params.params, *function.params.kwonly_params]
    param = next((p for p in params if p.name.value == flag.value), None)
    if param is None or not (isinstance(param.default, cst.Name) and param.default.value in ("False", "None")):
        return False
    position = function.params.params.index(param) if param in function.params.params else None
    name = function.name.value
    for other in model.call_sites:
        if any(arg.keyword is not None and arg.keyword.value == flag.value or arg.star for arg in other.call.args):
            return False
        positional = [arg for arg in other.call.args if arg.keyword is None]
        called = (other.func or "").rpartition(".")[2]
        if position is not None and called == name and len(positional) >= position:
            return False  # a call of this function that may pass the flag by position
    return True


def _bce_kind(site: CallSite, instances: List[AssignmentSite]) -> Optional[str]:
    if site.qualified_name in _BCE_FUNCTIONS:
        return "binary_cross_entropy"
    func = site.call.func
    if isinstance(func, cst.Call) and site.scope.names.qualify(func.func) in _BCE_MODULES:
        return "BCELoss"
    key = dotted_name(func)
    if key is None:
        return None
    for assignment in instances:
        if assignment.target != key:
            continue
        if key.startswith("self."):
            if assignment.scope.class_name != site.scope.class_name:
                continue
        elif assignment.scope not in list(site.scope.chain()):
            continue
        return "a BCELoss instance"
    return None


def _is_sigmoid(site: CallSite, arg: cst.BaseExpression) -> bool:
    if not isinstance(arg, cst.Call):
        return False
    if site.scope.names.qualify(arg.func) in _SIGMOID:
        return True
    return isinstance(arg.func, cst.Attribute) and arg.func.attr.value == "sigmoid" and not arg.args


def _region_text(region: AutocastRegion) -> str:
    node = region.item.item if region.item is not None else region.spec.call
    return short(node, 40) if node is not None else "autocast"
