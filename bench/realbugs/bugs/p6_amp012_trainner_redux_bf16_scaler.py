# origin: the-database/traiNNer-redux | https://github.com/the-database/traiNNer-redux/pull/244 | -
# principle: 6
# expect: AMP012 line 15
# summary: the super-resolution model builds its GradScaler from the AMP switch alone, also when the AMP dtype option is bfloat16.
# upstream-fix: PR #244 disables loss scaling for bf16.
import torch


class SRModel:
    def __init__(self, net_g, optimizer_g, opt):
        self.net_g = net_g
        self.optimizer_g = optimizer_g
        self.use_amp = opt["use_amp"]
        self.amp_dtype = torch.bfloat16 if opt["amp_bf16"] else torch.float16
        self.scaler_g = torch.amp.GradScaler("cuda", enabled=self.use_amp)

    def optimize_parameters(self, lq, gt):
        with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.use_amp):
            output = self.net_g(lq)
            l_total = torch.nn.functional.l1_loss(output, gt)
        self.scaler_g.scale(l_total).backward()
        self.scaler_g.step(self.optimizer_g)
        self.scaler_g.update()
        self.optimizer_g.zero_grad()
