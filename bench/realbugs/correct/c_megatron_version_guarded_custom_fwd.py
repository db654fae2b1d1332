# origin: NVIDIA/Megatron-LM | https://github.com/NVIDIA/Megatron-LM/pull/1222 | -
# principle: 7
# expect: none
# tempts: AMP073, AMP062
# summary: the maintainer's backward-compatible spelling: torch.amp.custom_fwd with device_type="cuda" on torch >= 2.4, torch.cuda.amp.custom_fwd on older torch.
from functools import partial

import torch

if torch.__version__ >= "2.4.0":
    custom_fwd = partial(torch.amp.custom_fwd, device_type="cuda")
    custom_bwd = partial(torch.amp.custom_bwd, device_type="cuda")
else:
    custom_fwd = torch.cuda.amp.custom_fwd
    custom_bwd = torch.cuda.amp.custom_bwd


class LinearWithGradAccumulation(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, input, weight):
        ctx.save_for_backward(input, weight)
        return torch.matmul(input, weight.t())

    @staticmethod
    @custom_bwd
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        return grad_output.matmul(weight), grad_output.t().matmul(input)
