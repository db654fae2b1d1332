# origin: traveller59/spconv | https://github.com/traveller59/spconv/pull/728 | -
# principle: 6
# expect: AMP073 line 13
# summary: sparse-convolution Functions use torch.cuda.amp.custom_fwd(cast_inputs=...) and custom_bwd, which warn as deprecated since torch 2.4.
# upstream-fix: PR #728 (open) uses torch.amp.custom_fwd(..., device_type='cuda').
# fix-check: custom_fwd\((?=[^)]*device_type=[\"']cuda[\"'])(?=[^)]*cast_inputs=torch\.float16)
import torch
from torch.cuda.amp import custom_bwd, custom_fwd


class SparseConvFunction(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float16)
    def forward(ctx, features, filters, indice_pairs):
        ctx.save_for_backward(indice_pairs, features, filters)
        return features @ filters

    @staticmethod
    @custom_bwd
    def backward(ctx, grad_output):
        indice_pairs, features, filters = ctx.saved_tensors
        return grad_output @ filters.t(), features.t() @ grad_output, None
