# origin: NVIDIA/apex | https://github.com/NVIDIA/apex/pull/1188 | apex/transformer/functional/fused_softmax.py
# principle: 7
# expect: none
# tempts: AMP061, AMP060
# summary: after the fix the fused-softmax Function carries neither custom_fwd nor custom_bwd; the caller casts the inputs itself when autocast is enabled.
import torch


class ScaledUpperTriangMaskedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, scale):
        scale_t = torch.tensor([scale])
        softmax_results = torch.softmax(inputs * scale, dim=-1)
        ctx.save_for_backward(softmax_results, scale_t)
        return softmax_results

    @staticmethod
    def backward(ctx, output_grads):
        softmax_results, scale_t = ctx.saved_tensors
        input_grads = softmax_results * (output_grads - (output_grads * softmax_results).sum(-1, keepdim=True))
        return input_grads * scale_t, None


def fused_softmax(inputs, scale):
    if torch.is_autocast_enabled("cuda"):
        inputs = inputs.to(torch.get_autocast_dtype("cuda"))
    return ScaledUpperTriangMaskedSoftmax.apply(inputs, scale)
