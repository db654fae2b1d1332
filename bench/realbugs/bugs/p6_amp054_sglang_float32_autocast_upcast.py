# origin: sgl-project/sglang | https://github.com/sgl-project/sglang/pull/36632 | python/sglang/multimodal_gen/runtime/models/vocoder/ltx_2_vocoder.py
# principle: 6
# expect: AMP054 line 17
# summary: the vocoder "upcasts" a block by entering torch.autocast(device_type=..., dtype=torch.float32); float32 is not an autocast dtype, so autocast only warns and disables itself and the block keeps running in the input's low precision (noted in the PR's review).
import torch
from torch import nn


class Vocoder(nn.Module):
    def __init__(self, upsampler, resblocks):
        super().__init__()
        self.upsampler = upsampler
        self.resblocks = resblocks

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        autocast_ctx = torch.autocast(device_type=hidden_states.device.type, dtype=torch.float32)
        with autocast_ctx:
            hidden_states = self.upsampler(hidden_states)
            for block in self.resblocks:
                hidden_states = block(hidden_states)
        return hidden_states.to(input_dtype)
