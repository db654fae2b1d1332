from __future__ import annotations

from typing import Iterator

from amp_lint.diagnostics import Confidence, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.rules._helpers import same_binding, short, sites_in_one_pass
from amp_lint.rules.amp050_fp16_params_with_scaler import Fp16ParamsWithScaler, half_casts
from amp_lint.rules.base import Finding, Invalid, Rule


class HalfModelWithAutocast(Rule):
    """
    ## What it does
    Finds a model converted to half precision (`model.half()`, `model.bfloat16()`,
    `model.to(torch.float16)`) that is also called inside an enabled autocast region.

    ## Why is this bad?
    "You should not call `half()` or `bfloat16()` on your model(s) or inputs when using autocasting."
    Autocast expects float32 parameters (the master weights): with float16 parameters small updates
    round away (96.5 % of the weights unchanged after one SGD step at lr=1e-4 in a CPU reproduction),
    and GradScaler raises `ValueError: Attempting to unscale FP16 gradients.`

    ## Example
    ```python
    model = Net().cuda().half()
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    ```

    ## Use instead
    ```python
    model = Net().cuda()
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    ```

    ## Fix safety
    No automatic fix. Intentional pure-bfloat16 training without autocast is not reported. Off by
    default (heuristic): the model is recognised by being called inside the autocast region. A float16
    model whose optimizer a GradScaler steps is AMP050's (on by default: it raises) and not reported here.

    ## References
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) docstring
    - `torch/amp/grad_scaler.py`: `GradScaler._unscale_grads_` (`allow_fp16=False`)
    - `../shared/amp-reference/rules.md` AMP050 (E4-n: the 96.5 % measurement)
    """

    code = "AMP057"
    name = "half-model-with-autocast"
    summary = "Model converted with .half()/.bfloat16() and also run under autocast"
    severity = Severity.WARNING
    default_enabled = False
    needs = (r"\bautocast\b", r"half|bfloat16|float16|\bto\b")

    valid = [
        """
import torch
model = Net().cuda()
with torch.autocast("cuda"):
    out = model(x)
""",
        # Pure half precision, no autocast.
        """
model = Net().cuda().half()
out = model(x.half())
""",
        # One or the other, chosen at run time.
        """
import torch
if args.pure_fp16:
    model.half()
    out = model(x)
else:
    with torch.autocast("cuda"):
        out = model(x)
""",
        # A tensor cast, not a module.
        """
import torch
x = x.half()
with torch.autocast("cuda"):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
model = Net().cuda().half()
with torch.autocast("cuda"):
    loss = loss_fn(model(x), y)
"""
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, net):
        self.model = net.to(torch.bfloat16)

    def step(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.model(x)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        casts = list(half_casts(model))
        if not casts:
            return
        reported = {id(f.node) for f in Fp16ParamsWithScaler().check(model)}
        for cast in casts:
            if id(cast.site.call) in reported:
                continue
            key, cast_site = cast.key, cast.site
            for site in model.call_sites:
                if site.func != key or site.in_enabled_autocast() is None:
                    continue
                if not same_binding(model, key, cast_site.scope, site.scope):
                    continue
                if site.scope is cast_site.scope and not sites_in_one_pass(model, site, cast_site):
                    continue
                yield self.finding(
                    cast_site.call,
                    f"{cast.how} turns `{key}` to {cast.dtype}, and `{short(site.call, 40)}` runs it under "
                    "autocast: keep the parameters in float32 and let autocast choose per-op dtypes",
                    confidence=Confidence.HIGH
                    if site.scope is cast_site.scope and site.in_enabled_autocast().spec.enabled is True
                    else Confidence.MEDIUM,
                    context=cast_site.scope.name,
                )
                break
