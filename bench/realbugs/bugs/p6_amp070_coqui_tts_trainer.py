# origin: idiap/coqui-ai-TTS | https://github.com/idiap/coqui-ai-TTS/pull/144 | -
# principle: 6
# expect: AMP070 line 19
# summary: a TTS model's forward pass disables autocast for its flow with torch.cuda.amp.autocast(enabled=False), a deprecated spelling.
# upstream-fix: PR #144 handles the deprecation by moving to torch.autocast.
# fix-check: autocast\([\"']cuda[\"'], enabled=False\)
import torch
from torch import nn


class Vits(nn.Module):
    def __init__(self, text_encoder, flow):
        super().__init__()
        self.text_encoder = text_encoder
        self.flow = flow

    def forward(self, x, x_lengths):
        x, m_p, logs_p = self.text_encoder(x, x_lengths)
        with torch.cuda.amp.autocast(enabled=False):
            z = self.flow(x.float(), m_p.float())
        return z, m_p, logs_p
