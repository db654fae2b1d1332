# origin: state-spaces/mamba | https://github.com/state-spaces/mamba/pull/560 | -
# principle: 6
# expect: AMP073 line 12
# summary: the selective-scan autograd Function is decorated with torch.cuda.amp.custom_fwd / custom_bwd, deprecated since torch 2.4.
# upstream-fix: PR #560 (closed) updated them to torch.amp.custom_fwd(device_type="cuda").
# fix-check: custom_fwd\(device_type=[\"']cuda[\"']\)
import torch


class MambaInnerFn(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, xz, conv1d_weight, out_proj_weight):
        ctx.save_for_backward(xz, conv1d_weight, out_proj_weight)
        return torch.nn.functional.linear(xz, out_proj_weight)

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, dout):
        xz, conv1d_weight, out_proj_weight = ctx.saved_tensors
        return dout @ out_proj_weight, None, dout.transpose(-1, -2) @ xz
