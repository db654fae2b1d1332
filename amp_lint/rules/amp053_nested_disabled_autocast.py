from __future__ import annotations

from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.analysis.flow_queries import reaching, whole_scope_flow

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import LOWER_PRECISION_OPS, region_device, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class NestedDisabledAutocast(Rule):
    """
    ## What it does
    Checks `autocast(enabled=False)` regions nested inside an enabled autocast region:
    (a) the inner region names another device type than the outer one, so it disables nothing;
    (b) inside a correct inner region, a matmul-like torch op receives a tensor computed in the outer
    (low-precision) region without casting it back (`.float()`); reported at medium confidence.

    ## Why is this bad?
    Autocast state is per device type: `with torch.autocast("cpu", enabled=False)` inside
    `torch.autocast("cuda")` leaves every CUDA op autocast, so the code you meant to run in float32
    still runs in float16. And inside a correctly disabled region, "inputs from the surrounding region
    should be cast to `dtype` before use": a float16 activation meeting a float32 weight raises
    `RuntimeError: expected m1 and m2 to have the same dtype`, and two float16 inputs run in float16.

    ## Example
    ```python
    with torch.autocast("cuda"):
        h = encoder(x)
        with torch.autocast("cpu", enabled=False):
            out = torch.mm(h, w)
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        h = encoder(x)
        with torch.autocast("cuda", enabled=False):
            out = torch.mm(h.float(), w)
    ```

    ## Fix safety
    Safe for (a): the inner device type becomes the outer region's device expression, which is what a
    nested `enabled=False` is written for. (b) is reported without a fix.

    ## References
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) docstring (nested
      `enabled=False` subregions)
    - [AMP examples: autocast and custom autograd functions](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions)
    """

    code = "AMP053"
    name = "nested-disabled-autocast"
    summary = "Nested autocast(enabled=False): wrong device type, or inputs not cast"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bautocast\b", r"enabled|False")
    # Two autocast calls (an outer region and a disabled inner one), one switched off.
    ast_needs = (r"autocast_twice", r"\benabled\b|autocast_bool_arg")

    valid = [
        """
import torch
with torch.autocast("cuda"):
    h = encoder(x)
    with torch.autocast("cuda", enabled=False):
        out = torch.mm(h.float(), w)
""",
        # Re-assigned with a cast inside the subregion.
        """
import torch
with torch.autocast(device_type="cuda", dtype=torch.float16):
    h = encoder(x)
    with torch.autocast(device_type="cuda", enabled=False):
        h = h.float()
        out = torch.mm(h, w)
""",
        # Both device types switched off in a subregion that names each.
        """
import torch
with torch.autocast("cuda"):
    with torch.autocast("cpu"):
        with torch.autocast("cuda", enabled=False):
            out = model(x)
""",
        # The same device through a name and an attribute.
        """
import torch
DEVICE = "cuda"
class Block:
    def __init__(self):
        self.device_type = DEVICE

    def forward(self, x):
        with torch.autocast(DEVICE):
            with torch.autocast(self.device_type, enabled=False):
                return self.head(x)
""",
        # A device variable: unknown.
        """
import torch
def f(device_type, x):
    with torch.autocast(device_type):
        with torch.autocast("cuda", enabled=False):
            return model(x)
""",
        # `h` is float32 on one path (`.float()`): the text's last assignment is the other one; every
        # assignment that reaches the use must be a low-precision result for the finding.
        """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    if keep_fp32:
        h = encoder(x).float()
    else:
        h = encoder(x)
    with torch.autocast("cuda", enabled=False):
        out = F.linear(h, weight)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    h = encoder(x)
    with torch.autocast("cpu", enabled=False):
        out = head(h.float())
""",
            fixed="""
import torch
with torch.autocast("cuda", dtype=torch.float16):
    h = encoder(x)
    with torch.autocast("cuda", enabled=False):
        out = head(h.float())
""",
        ),
        Invalid(
            """
import torch
with torch.cuda.amp.autocast():
    h = encoder(x)
    with torch.autocast(device_type="cpu", enabled=False):
        out = head(h.float())
""",
            fixed="""
import torch
with torch.cuda.amp.autocast():
    h = encoder(x)
    with torch.autocast(device_type="cuda", enabled=False):
        out = head(h.float())
""",
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
with torch.autocast("cuda"):
    h = encoder(x)
    with torch.autocast("cuda", enabled=False):
        out = F.linear(h, weight)
"""
        ),
        # The outer device set in __init__, the inner one a literal (through values).
        Invalid(
            """
import torch
class Block:
    def __init__(self):
        self.device_type = "cuda"

    def forward(self, x):
        with torch.autocast(self.device_type, dtype=torch.float16):
            h = self.encoder(x)
            with torch.autocast("cpu", enabled=False):
                return self.head(h.float())
""",
            fixed="""
import torch
class Block:
    def __init__(self):
        self.device_type = "cuda"

    def forward(self, x):
        with torch.autocast(self.device_type, dtype=torch.float16):
            h = self.encoder(x)
            with torch.autocast(self.device_type, enabled=False):
                return self.head(h.float())
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for region in model.regions:
            if region.spec.enabled is not False or region.is_decorator:
                continue
            enabled = _enabled_ancestors(region)
            if not enabled:
                continue
            devices = [region_device(model, a) for a in enabled]
            inner = region_device(model, region)
            if inner is None or any(d is None for d in devices):
                continue
            if inner not in devices:
                outer = enabled[0]
                outer_device = devices[0]
                yield self.finding(
                    region.spec.device_node or region.item or region.node,
                    f"`{short(region.item.item if region.item else region.node)}` switches off "
                    f"{inner!r} autocast inside {outer_device!r} autocast: "
                    f"the {outer_device} ops still autocast; disable device type {outer_device!r}",
                    fix=_device_fix(model, region, outer, outer_device),
                    context=region.scope.name if region.scope else "",
                )
            else:
                yield from self._uncast_inputs(model, region, enabled)

    def _uncast_inputs(self, model: FileModel, region: AutocastRegion, enabled: List[AutocastRegion]) -> Iterator[Finding]:
        outer = enabled[0]
        for site in model.call_sites:
            if not site.regions or site.regions[-1] is not region:
                continue
            if site.qualified_name not in LOWER_PRECISION_OPS:
                continue
            for arg in site.call.args:
                if arg.keyword is not None or not isinstance(arg.value, cst.Name):
                    continue
                name = arg.value.value
                if not _computed_in(model, name, outer, region, site):
                    continue
                yield self.finding(
                    arg.value,
                    f"`{name}` comes from the enclosing autocast region (likely float16/bfloat16) and reaches "
                    f"`{short(site.call, 40)}` in the `enabled=False` subregion uncast; use `{name}.float()`",
                    confidence=Confidence.MEDIUM,
                    context=site.scope.name,
                )
                break


def _enabled_ancestors(region: AutocastRegion) -> List[AutocastRegion]:
    found = []
    parent = region.parent
    while parent is not None:
        if parent.spec.is_enabled:
            found.append(parent)
        parent = parent.parent
    return found


def _computed_in(model: FileModel, name: str, outer: AutocastRegion, inner: AutocastRegion, site) -> bool:
    """Every assignment of `name` that reaches `site` (a path with no other assignment of it between) is
    inside `outer`, not inside `inner`, and from a call that is not a cast."""
    flow = whole_scope_flow(model, site.scope)
    # `h = torch.mm(h, w)`: the call reads the previous `h`, not the one its own statement binds.
    sites = [a for a in model.assignments_in(site.scope, name) if a.statement is not site.statement]
    reached = [assignment for assignment, _ in reaching(flow, site, sites)]
    return bool(reached) and all(_computed_there(assignment, outer, inner) for assignment in reached)


def _computed_there(assignment, outer: AutocastRegion, inner: AutocastRegion) -> bool:
    if inner in assignment.regions or outer not in assignment.regions:
        return False
    return isinstance(assignment.value, cst.Call) and not (
        isinstance(assignment.value.func, cst.Attribute) and assignment.value.func.attr.value in ("float", "to", "double", "type")
    )


def _device_fix(model: FileModel, region: AutocastRegion, outer: AutocastRegion, device: str) -> Optional[Fix]:
    if region.spec.device_node is None:
        return None
    builder = FixBuilder(model.module)
    if outer.spec.device_node is not None and outer.scope is region.scope:
        code = code_of(outer.spec.device_node)
    else:
        code = builder.string(device)
    new = builder.expression(code)
    builder.replace(region.spec.device_node, lambda updated: new)
    return builder.build(f"Disable autocast for device type {code}", Applicability.SAFE)
