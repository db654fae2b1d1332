# origin: bcmi/SLBR-Visible-Watermark-Removal | https://github.com/bcmi/SLBR-Visible-Watermark-Removal/issues/10 | src/models/SLBR.py
# principle: 5
# expect: AMP052 line 16
# summary: the loss module keeps an nn.BCELoss() for the predicted watermark mask; with the training step wrapped in autocast it raises "binary_cross_entropy ... unsafe to autocast".
import torch
from torch import nn


class Losses(nn.Module):
    def __init__(self):
        super().__init__()
        self.masked_l1_loss, self.mask_loss = nn.L1Loss(), nn.BCELoss()

    def forward(self, pred_ims, target, pred_ms, mask):
        pixel_loss = self.masked_l1_loss(pred_ims, target)
        final_mask_loss = self.mask_loss(pred_ms, mask)
        return pixel_loss, final_mask_loss


class SLBR:
    def __init__(self, model, optimizer):
        self.model = model
        self.loss = Losses()
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def train(self, loader):
        for inputs, target, mask in loader:
            with torch.autocast("cuda"):
                pred_ims, pred_ms = self.model(inputs)
                pixel_loss, mask_loss = self.loss(pred_ims, target, pred_ms, mask)
                total = pixel_loss + mask_loss
            self.optimizer.zero_grad()
            self.scaler.scale(total).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
