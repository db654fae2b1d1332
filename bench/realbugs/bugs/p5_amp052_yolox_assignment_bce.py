# origin: Megvii-BaseDetection/YOLOX | https://github.com/Megvii-BaseDetection/YOLOX/issues/336 | yolox/models/yolo_head.py
# principle: 5
# expect: AMP052 line 16
# summary: the label-assignment helper of the detection head computes a pairwise F.binary_cross_entropy on sigmoid scores; under fp16 autocast it raises "unsafe to autocast".
import torch
import torch.nn.functional as F
from torch import nn


class YOLOXHead(nn.Module):
    def get_assignments(self, cls_preds_, obj_preds_, gt_cls_per_image, num_gt):
        cls_preds_ = (
            cls_preds_.float().unsqueeze(0).repeat(num_gt, 1, 1).sigmoid_()
            * obj_preds_.unsqueeze(0).repeat(num_gt, 1, 1).sigmoid_()
        )
        pair_wise_cls_loss = F.binary_cross_entropy(cls_preds_.sqrt_(), gt_cls_per_image, reduction="none").sum(-1)
        return pair_wise_cls_loss

    def forward(self, cls_preds, obj_preds, gt_cls, num_gt):
        return self.get_assignments(cls_preds, obj_preds, gt_cls, num_gt).mean()


def train_one_iter(model, optimizer, scaler, inps, targets):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(inps, targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
