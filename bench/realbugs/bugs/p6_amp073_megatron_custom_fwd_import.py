# origin: NVIDIA/Megatron-LM | https://github.com/NVIDIA/Megatron-LM/pull/1222 | -
# principle: 6
# expect: AMP073 line 7,12
# summary: a fused autograd Function is decorated with torch.cuda.amp.custom_fwd / custom_bwd, deprecated in favour of torch.amp.custom_fwd(device_type="cuda").
# fix-check: custom_fwd\(device_type=[\"']cuda[\"']\)
import torch
from torch.cuda.amp import custom_bwd, custom_fwd


class LinearWithGradAccumulation(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, input, weight, bias):
        ctx.save_for_backward(input, weight)
        output = torch.matmul(input, weight.t())
        return output + bias if bias is not None else output

    @staticmethod
    @custom_bwd
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        return grad_output.matmul(weight), grad_output.t().matmul(input), grad_output.sum(0)
