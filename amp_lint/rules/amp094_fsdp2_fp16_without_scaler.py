from __future__ import annotations

from typing import Iterator

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import argument, short
from amp_lint.rules.base import Finding, Invalid, Rule

_FULLY_SHARD = frozenset(
    {
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed.fsdp._fully_shard.fully_shard",
        "torch.distributed.fsdp._fully_shard._fully_shard.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
    }
)
_POLICY = frozenset(
    {
        "torch.distributed.fsdp.MixedPrecisionPolicy",
        "torch.distributed.fsdp._fully_shard.MixedPrecisionPolicy",
        "torch.distributed.fsdp._fully_shard._fsdp_api.MixedPrecisionPolicy",
        "torch.distributed._composable.fsdp.MixedPrecisionPolicy",
    }
)
# Files that hand the backward to a framework, which scales it.
_FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "colossalai")


class Fsdp2Fp16WithoutScaler(Rule):
    """
    ## What it does
    Finds FSDP2 (`fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))`) trained
    with a plain, unscaled `loss.backward()` in a file that has no gradient scaler at all.

    ## Why is this bad?
    With `param_dtype=torch.float16` the forward and the backward run in float16, so the gradients are
    computed in float16: small ones flush to zero and their updates are lost, silently, as in AMP010
    ("gradient values with small magnitudes may not be representable in float16"). FSDP2 does not scale
    the loss for you. A plain `torch.amp.GradScaler` works with `fully_shard` (ShardedGradScaler, AMP091,
    is for FSDP1); or use `param_dtype=torch.bfloat16`, which needs no scaling.

    ## Example
    ```python
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix. Reported only when the policy's `param_dtype` is literally float16 (in the call or in a
    variable assigned once), the file calls `.backward()` on something that is not `scaler.scale(...)`,
    and nothing in the file builds, receives or names a scaler, nor imports a framework that scales
    (Accelerate, Lightning, DeepSpeed).

    ## References
    - `torch/distributed/fsdp/_fully_shard/_fsdp_api.py` (torch 2.13): `MixedPrecisionPolicy.param_dtype`
    - [AMP: gradient scaling](https://docs.pytorch.org/docs/stable/amp.html#gradient-scaling)
    - [FSDP2 `fully_shard`](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    - `../shared/amp-reference/rules.md` AMP010 (E4-b: the underflow reproduction), AMP091
    """

    code = "AMP094"
    name = "fsdp2-fp16-without-scaler"
    summary = "FSDP2 fully_shard with a float16 MixedPrecisionPolicy trained without a GradScaler (gradients underflow)"
    severity = Severity.WARNING
    needs = (r"\bbackward\b", r"\bfully_shard\b", r"\bMixedPrecisionPolicy\b")  # a word other rules need first

    valid = [
        """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
model(x).sum().backward()
""",
        """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
scaler = torch.amp.GradScaler("cuda")
scaler.scale(model(x).sum()).backward()
scaler.step(opt)
scaler.update()
""",
        # The scaler comes in as an argument.
        """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
def train(model, opt, grad_scaler):
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
    loss = model(x).sum()
    grad_scaler.scale(loss).backward()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
mp_policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
for layer in model.layers:
    fully_shard(layer, mp_policy=mp_policy)
fully_shard(model, mp_policy=mp_policy)
for x in loader:
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        shards = [s for s in model.call_sites if s.qualified_name in _FULLY_SHARD]
        if not shards or _scaled_anywhere(model):
            return
        backward = next(
            (
                s
                for s in model.call_sites
                if s.method == "backward" and not (isinstance(s.receiver, cst.Call) and isinstance(s.receiver.func, cst.Attribute) and s.receiver.func.attr.value == "scale")
            ),
            None,
        )
        if backward is None:
            return
        for site in shards:
            arg = argument(site.call, None, "mp_policy")
            if arg is None or not _fp16_policy(model, site.scope, arg.value):
                continue
            yield self.finding(
                site.call,
                f"`{short(site.call, 50)}` trains with float16 parameters and gradients, and `{short(backward.call, 30)}` "
                "is not scaled: small gradients underflow to zero; use a torch.amp.GradScaler (a plain one works with "
                "fully_shard) or param_dtype=torch.bfloat16",
                context=site.scope.name,
                related=(("unscaled backward", backward.call),),
            )
            return  # one finding per file: the remedy is one scaler


def _fp16_policy(model: FileModel, scope: Scope, expr: cst.BaseExpression, depth: int = 0) -> bool:
    if isinstance(expr, cst.Name) and depth < 2:
        for outer in scope.chain():
            assignments = outer.assignments.get(expr.value, [])
            if assignments:
                return len(assignments) == 1 and _fp16_policy(model, outer, assignments[0][0], depth + 1)
        return False
    if not isinstance(expr, cst.Call) or scope.names.qualify(expr.func) not in _POLICY:
        return False
    dtype = argument(expr, 0, "param_dtype")
    return dtype is not None and scope.names.qualify(dtype.value) in names.FLOAT16


def _scaled_anywhere(model: FileModel) -> bool:
    if model.scalers or model.scaler_call_sites:
        return True
    for statement, _ in model.imports:
        module = dotted_name(statement.module) if isinstance(statement, cst.ImportFrom) and statement.module else None
        imported = [module] if module else [dotted_name(a.name) for a in statement.names] if isinstance(statement, cst.Import) else []
        if any(m and m.split(".")[0] in _FRAMEWORKS for m in imported):
            return True
    for scope in model.scopes:
        if any(model.is_scaler(param, scope) for param in scope.params):
            return True
    return any(
        site.method in ("scale", "unscale_") and site.receiver is not None and dotted_name(site.receiver) is not None
        and model.is_scaler(dotted_name(site.receiver), site.scope)
        for site in model.call_sites
    )
