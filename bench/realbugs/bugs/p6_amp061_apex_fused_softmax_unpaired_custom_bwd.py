# origin: NVIDIA/apex | https://github.com/NVIDIA/apex/pull/1188 | apex/transformer/functional/fused_softmax.py
# principle: 6
# expect: AMP061 line 13,20
# summary: a fused-softmax autograd Function kept @custom_bwd on backward after custom_fwd was removed from forward; under autocast the backward fails with "no attribute '_fwd_used_autocast'".
# upstream-fix: PR #1188 removes the unpaired custom_bwd.
# fix-check: ^(?![\s\S]*@custom_(?:fwd|bwd))
import torch
from torch.amp import custom_bwd


class ScaledUpperTriangMaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, scale):
        scale_t = torch.tensor([scale])
        softmax_results = torch.softmax(inputs * scale, dim=-1)
        ctx.save_for_backward(softmax_results, scale_t)
        return softmax_results

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, output_grads):
        softmax_results, scale_t = ctx.saved_tensors
        input_grads = softmax_results * (output_grads - (output_grads * softmax_results).sum(-1, keepdim=True))
        return input_grads * scale_t, None
