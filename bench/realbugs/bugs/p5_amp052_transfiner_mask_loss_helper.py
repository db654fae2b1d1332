# origin: SysCV/transfiner | https://github.com/SysCV/transfiner/issues/43 | detectron2/modeling/roi_heads/mask_head.py
# principle: 5
# expect: AMP052 line 12
# summary: the mask head's loss helper calls F.binary_cross_entropy on already-sigmoided logits; the head runs inside the AMP trainer's autocast, so it raises "unsafe to autocast".
import torch
import torch.nn.functional as F
from torch import nn


def mask_rcnn_loss(pred_mask_logits, gt_masks):
    uncertain = pred_mask_logits.sigmoid()
    return F.binary_cross_entropy_with_logits(pred_mask_logits, gt_masks) + F.binary_cross_entropy(uncertain, gt_masks, reduction="mean")


class MaskHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.predictor = nn.Conv2d(256, 1, 1)

    def forward(self, features, gt_masks):
        return {"loss_mask": mask_rcnn_loss(self.predictor(features), gt_masks)}


class AMPTrainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def run_step(self, data):
        with torch.autocast("cuda", dtype=torch.float16):
            loss_dict = self.model(*data)
            losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
