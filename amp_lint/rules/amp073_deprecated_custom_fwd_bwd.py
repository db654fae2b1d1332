"""AMP073: the deprecated `torch.cuda.amp.custom_fwd` / `custom_bwd`, reported and fixed as AMP070-AMP072 are."""

from __future__ import annotations

from amp_lint.rules.amp07x_deprecated_spelling import _DeprecatedSpelling
from amp_lint.rules.base import Invalid


class DeprecatedCustomFwdBwd(_DeprecatedSpelling):
    """
    ## What it does
    Finds `torch.cuda.amp.custom_fwd` / `torch.cuda.amp.custom_bwd`, deprecated since torch 2.4.

    ## Why is this bad?
    They emit ``FutureWarning: `torch.cuda.amp.custom_fwd(args...)` is deprecated. Please use
    `torch.amp.custom_fwd(args..., device_type='cuda')` instead.`` The replacements take a required
    keyword `device_type`: a bare `@torch.amp.custom_fwd` raises `TypeError` at import time.

    ## Example
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.cuda.amp.custom_fwd
        def forward(ctx, a, b): ...
    ```

    ## Use instead
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, a, b): ...
    ```

    ## Fix safety
    Safe. `device_type="cuda"` is added, keeping `cast_inputs=` and other keywords.

    ## Torch versions
    `torch.amp.custom_fwd(device_type=...)` / `custom_bwd` are new in torch 2.4 (pytorch/pytorch#126531);
    with a `target-torch` below 2.4 nothing is reported. Version shims
    (`if torch.__version__ >= "2.4": ... else: custom_fwd = torch.cuda.amp.custom_fwd`) are left alone.

    ## References
    - [AMP examples: autocast and custom autograd functions](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions)
    - pytorch/pytorch#126527
    """

    code = "AMP073"
    name = "deprecated-custom-fwd-bwd"
    summary = "Deprecated torch.cuda.amp.custom_fwd / custom_bwd"
    needs = (r"\bcustom_[fb]wd\b", r"\bamp\b")
    qualified_names = frozenset({"torch.cuda.amp.custom_fwd", "torch.cuda.amp.custom_bwd"})

    valid = [
        """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x):
        return x
""",
        # A version shim (Megatron-LM): the old spelling for torch < 2.4.
        """
import functools
import torch
if torch.__version__ >= "2.4.0":
    custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
else:
    custom_fwd = torch.cuda.amp.custom_fwd
""",
    ]
    invalid = [
        Invalid(
            """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, g):
        return g
""",
            fixed="""
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(cast_inputs=torch.float32, device_type="cuda")
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        return g
""",
            count=2,
        ),
        Invalid(
            """
from torch.cuda.amp import custom_fwd, custom_bwd
class F(Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x

    @staticmethod
    @custom_bwd
    def backward(ctx, g):
        return g
""",
            fixed="""
from torch.amp import custom_fwd, custom_bwd
class F(Function):
    @staticmethod
    @custom_fwd(device_type="cuda")
    def forward(ctx, x):
        return x

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, g):
        return g
""",
            count=2,
        ),
    ]
