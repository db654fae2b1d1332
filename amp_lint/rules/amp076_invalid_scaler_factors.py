from __future__ import annotations

from typing import Dict, Iterator

from amp_lint.analysis import names
from amp_lint.diagnostics import Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.rules._helpers import argument, literal_bool, literal_number, short
from amp_lint.rules.base import Finding, Invalid, Rule

# Positions of (growth_factor, backoff_factor, enabled) in each constructor.
_SHARDED = frozenset({"torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler", "torch.distributed.fsdp.ShardedGradScaler"})


def _positions(qualified: str) -> Dict[str, int]:
    if qualified in _SHARDED:  # (device, init_scale, backoff_factor, growth_factor, growth_interval, enabled)
        return {"growth_factor": 3, "backoff_factor": 2, "enabled": 5}
    if qualified in names.IMPLIED_DEVICE:  # (init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        return {"growth_factor": 1, "backoff_factor": 2, "enabled": 4}
    return {"growth_factor": 2, "backoff_factor": 3, "enabled": 5}


class InvalidScalerFactors(Rule):
    """
    ## What it does
    Finds a `GradScaler` built with a literal `growth_factor <= 1` or `backoff_factor >= 1`.

    ## Why is this bad?
    The constructor asserts both: `AssertionError: The growth factor must be > 1.0.` /
    `The backoff factor must be < 1.0.` A growth factor of 1 would never grow the scale, a backoff
    factor of 1 would never shrink it after an overflow, so every later step would be skipped.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda", growth_factor=1.0, backoff_factor=2.0)
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda", growth_factor=2.0, backoff_factor=0.5)
    ```

    ## Fix safety
    No fix: the intended values are unknown.

    ## References
    - `torch/amp/grad_scaler.py`: `GradScaler.__init__`
    """

    code = "AMP076"
    name = "invalid-scaler-factors"
    summary = "GradScaler growth_factor <= 1 or backoff_factor >= 1"
    severity = Severity.ERROR
    needs = (r"Scaler",)

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5)
""",
        # Checked only when enabled.
        """
import torch
scaler = torch.amp.GradScaler("cuda", growth_factor=1.0, enabled=False)
""",
        # ShardedGradScaler's order is (device, init_scale, backoff_factor, growth_factor, ...).
        """
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
scaler = ShardedGradScaler("cuda", 2.0**16, 0.5, 2.0)
""",
        # A user's own class.
        """
class GradScaler:
    def __init__(self, growth_factor): ...
scaler = GradScaler(growth_factor=1.0)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda", growth_factor=1.0)
"""
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler
scaler = GradScaler(2.0**16, 2.0, 1.5)
"""
        ),
        Invalid(
            """
import torch
scaler = torch.GradScaler("cpu", 65536.0, 1, 2)
""",
            count=2,
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for call, qualified, scope, _, _ in model.scaler_call_sites:
            positions = _positions(qualified)
            enabled = argument(call, positions["enabled"], "enabled")
            if enabled is not None and literal_bool(enabled.value) is False:
                continue
            for keyword, bad, message in (
                ("growth_factor", lambda v: v <= 1.0, "must be > 1.0"),
                ("backoff_factor", lambda v: v >= 1.0, "must be < 1.0"),
            ):
                arg = argument(call, positions[keyword], keyword)
                value = literal_number(arg.value) if arg is not None else None
                if value is None or not bad(value):
                    continue
                yield self.finding(
                    arg,
                    f"`{short(call)}`: {keyword} {message} (GradScaler asserts it: AssertionError at construction)",
                    context=scope.name,
                )
