# origin: VCasecnikovs/Yet-Another-YOLOv4-Pytorch | https://github.com/VCasecnikovs/Yet-Another-YOLOv4-Pytorch/issues/6 | model.py
# principle: 5
# expect: AMP052 line 17
# summary: the YOLO layer's loss uses F.binary_cross_entropy on the predicted objectness (a sigmoid output), which autocast refuses.
import torch
import torch.nn.functional as F
from torch import nn


class YOLOLayer(nn.Module):
    def forward(self, x, targets=None):
        prediction = x.sigmoid()
        pred_conf = prediction[..., 4]
        if targets is None:
            return prediction
        obj_mask, noobj_mask, tconf = targets
        loss_conf_obj = F.binary_cross_entropy(pred_conf[obj_mask], tconf[obj_mask])
        loss_conf_noobj = F.binary_cross_entropy(pred_conf[noobj_mask], tconf[noobj_mask])
        return loss_conf_obj + loss_conf_noobj


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for imgs, targets in loader:
        with torch.autocast("cuda"):
            loss = model(imgs, targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
