from __future__ import annotations

from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder, keyword_arg, with_call_args
from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.rules._helpers import argument, has_star_args, literal_bool, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_FSDP = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
_SHARDED = frozenset({"torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler", "torch.distributed.fsdp.ShardedGradScaler"})
_MODULE = "torch.distributed.fsdp.sharded_grad_scaler"
_AMP_PARAMS = ("device", "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
_DEPRECATED_PARAMS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")


class FsdpPlainGradScaler(Rule):
    """
    ## What it does
    Finds a file that wraps a model in `FullyShardedDataParallel` (FSDP1) and builds a plain
    `GradScaler` rather than `ShardedGradScaler`.

    ## Why is this bad?
    With sharded parameters each rank sees only its own gradient shard. `ShardedGradScaler.unscale_`
    all-reduces `found_inf` across ranks and unscales float16 gradients; the plain `GradScaler` does
    neither. Ranks then disagree on whether to skip a step and on the scale, and FSDP's float16
    gradients hit `ValueError: Attempting to unscale FP16 gradients.`

    ## Example
    ```python
    model = FSDP(model)
    scaler = torch.amp.GradScaler("cuda")
    ```

    ## Use instead
    ```python
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    model = FSDP(model)
    scaler = ShardedGradScaler(device="cuda")
    ```

    ## Fix safety
    Safe. The call becomes `ShardedGradScaler(...)` with every argument passed by keyword:
    ShardedGradScaler's positional order `(device, init_scale, backoff_factor, growth_factor, ...)`
    swaps the two factors compared with GradScaler. FSDP2 (`fully_shard`) is not checked.

    ## References
    - `torch/distributed/fsdp/sharded_grad_scaler.py`: `ShardedGradScaler` (docstring, `unscale_`)
    """

    code = "AMP091"
    name = "fsdp-plain-grad-scaler"
    summary = "FSDP with a plain GradScaler (use ShardedGradScaler)"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"FullyShardedDataParallel", r"GradScaler")

    valid = [
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
model = FSDP(model)
scaler = ShardedGradScaler()
""",
        # The file picks the scaler that fits the wrapper.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
if args.fsdp:
    model = FSDP(model)
scaler = ShardedGradScaler() if args.fsdp else torch.amp.GradScaler("cuda")
""",
        # No FSDP wrap (only an import).
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel
scaler = torch.amp.GradScaler("cuda")
""",
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(model)
scaler = torch.amp.GradScaler("cuda", enabled=False)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(model)
scaler = torch.amp.GradScaler("cuda", 2.0**12, 2.0, 0.25)
""",
            fixed="""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
model = FSDP(model)
scaler = ShardedGradScaler(device="cuda", init_scale=2.0**12, growth_factor=2.0, backoff_factor=0.25)
""",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel
def build(model, args):
    model = FullyShardedDataParallel(model)
    scaler = torch.GradScaler(enabled=args.fp16)
    return model, scaler
""",
            fixed="""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
def build(model, args):
    model = FullyShardedDataParallel(model)
    scaler = ShardedGradScaler(enabled=args.fp16)
    return model, scaler
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        wraps = [site for site in model.call_sites if site.qualified_name in _FSDP]
        if not wraps:
            return
        if any(qualified in _SHARDED for _, qualified, _, _, _ in model.scaler_call_sites):
            return
        for call, qualified, scope, _, _ in model.scaler_call_sites:
            params = _DEPRECATED_PARAMS if qualified in names.IMPLIED_DEVICE else _AMP_PARAMS
            enabled = argument(call, params.index("enabled"), "enabled")
            if enabled is not None and literal_bool(enabled.value) is False:
                continue
            site = next((s for s in model.call_sites if s.call is call), None)
            confidence = Confidence.HIGH
            if site is None or not any(_same_path(site, w) for w in wraps):
                confidence = Confidence.MEDIUM
            yield self.finding(
                call,
                f"`{short(call)}` is a plain GradScaler in a file that wraps models in FullyShardedDataParallel; "
                "use torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
                fix=_sharded_fix(model, call, qualified, params),
                confidence=confidence,
                context=scope.name,
            )


def _same_path(a: CallSite, b: CallSite) -> bool:
    """Both calls in the same function, not on opposite sides of an `if`."""
    if a.scope is not b.scope:
        return False
    mine = {br.node: br.taken for br in a.branches}
    return all(mine.get(br.node, br.taken) == br.taken for br in b.branches) and not (
        {br.node for br in b.branches} - set(mine)
    )


def _sharded_fix(model: FileModel, call: cst.Call, qualified: str, params) -> Optional[Fix]:
    if has_star_args(call):
        return None
    bound = model.module_names.lookup("ShardedGradScaler")
    if bound is None and "ShardedGradScaler" in model.module_names.own:
        return None
    if bound is not None and bound not in _SHARDED:
        return None
    builder = FixBuilder(model.module)
    if bound is None:
        builder.need_import(_MODULE, "ShardedGradScaler")
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) > len(params):
        return None
    keywords: List[cst.Arg] = []
    implied = names.IMPLIED_DEVICE.get(qualified)
    if implied is not None and implied != "cuda":
        keywords.append(keyword_arg("device", cst.SimpleString(builder.string(implied))))
    keywords += [keyword_arg(params[i], arg.value) for i, arg in enumerate(positional)]

    def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
        named = [a for a in updated.args if a.keyword is not None]
        return with_call_args(updated.with_changes(func=cst.Name("ShardedGradScaler")), [*keywords, *named])

    builder.replace(call, rewrite)
    return builder.build("Use `ShardedGradScaler` with keyword arguments", Applicability.SAFE)
