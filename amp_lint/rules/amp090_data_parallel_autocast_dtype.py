from __future__ import annotations

from typing import Iterator

import libcst as cst

from amp_lint.analysis.autocast import DType
from amp_lint.analysis.file_model import FileModel
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import same_binding, short
from amp_lint.rules.base import Finding, Invalid, Rule

_DATA_PARALLEL = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
)
# The dtype a fresh thread's autocast uses on each device (torch.get_autocast_dtype's default).
_DEVICE_DEFAULT = {"cuda": DType.FP16}


class DataParallelAutocastDtype(Rule):
    """
    ## What it does
    Finds an `nn.DataParallel` model called inside a CUDA autocast region with an explicit dtype other
    than CUDA's default float16 (`torch.autocast("cuda", dtype=torch.bfloat16)`).

    ## Why is this bad?
    DataParallel runs each replica in its own thread. `parallel_apply` reads `torch.is_autocast_enabled()`
    in the caller and re-enters `torch.amp.autocast(device_type, enabled=autocast_enabled)` in each
    worker without a dtype; the autocast dtype is thread-local, so the replicas run in the device
    default, float16, not the bfloat16 the caller asked for: overflow risk, and float16 without a scaler.

    ## Example
    ```python
    model = torch.nn.DataParallel(net)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    ```

    ## Use instead
    ```python
    class Net(nn.Module):
        @torch.autocast("cuda", dtype=torch.bfloat16)  # runs in every replica thread
        def forward(self, x): ...

    model = torch.nn.DataParallel(Net())
    out = model(x)
    ```
    (or move to DistributedDataParallel).

    ## Fix safety
    No fix. Off by default: inferred from torch's source, not run on several GPUs
    (`../shared/amp-reference/rules.md` marks it "[CUDA multi-GPU, not run]").

    ## References
    - `torch/nn/parallel/parallel_apply.py` (torch 2.13): `torch.amp.autocast(device_type,
      enabled=autocast_enabled)` in each worker, no dtype
    - [AMP examples: DataParallel in a single process](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#dataparallel-in-a-single-process)
    - `../shared/amp-reference/rules.md` AMP090 (E4-q, E5-q')
    """

    code = "AMP090"
    name = "data-parallel-autocast-dtype"
    summary = "nn.DataParallel under autocast with a non-default dtype (replicas run in the device default)"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"\bDataParallel\b", r"\bautocast\b", r"\bdtype\b")

    valid = [
        """
import torch
model = torch.nn.DataParallel(net)
with torch.autocast("cuda"):
    out = model(x)
""",
        """
import torch
model = torch.nn.parallel.DistributedDataParallel(net)
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
model = torch.nn.DataParallel(net).cuda()
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        wrapped = []
        for assignment in model.assignment_sites:
            value = assignment.value
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("cuda", "to"):
                value = value.func.value  # `DataParallel(net).cuda()`
            if isinstance(value, cst.Call) and assignment.scope.names.qualify(value.func) in _DATA_PARALLEL:
                wrapped.append(assignment)
        if not wrapped:
            return
        for site in model.call_sites:
            region = site.in_enabled_autocast()
            if region is None or region.spec.dtype_node is None:
                continue
            default = _DEVICE_DEFAULT.get(region.spec.device or "")
            if default is None or region.spec.dtype in (default, DType.UNKNOWN, DType.OTHER):
                continue
            for assignment in wrapped:
                if site.func != assignment.target or not same_binding(model, assignment.target, assignment.scope, site.scope):
                    continue
                yield self.finding(
                    site.call,
                    f"`{short(site.call, 40)}` runs a DataParallel model under {region.spec.dtype.value} autocast, but each "
                    f"replica thread re-enters autocast without a dtype: the replicas run in {default.value}; put the "
                    "autocast on the module's forward, or use DistributedDataParallel",
                    context=site.scope.name,
                )
                break
