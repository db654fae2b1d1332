# origin: engichang1467/Open-Rig3R | https://github.com/engichang1467/Open-Rig3R/issues/35 | scripts/train.py
# principle: 7
# expect: none
# tempts: AMP010, AMP011
# summary: the fix the issue proposes: run autocast in bfloat16, which has fp32's exponent range, with a plain backward and no GradScaler.
import torch
from torch.amp import autocast


def train(model, criterion, optimizer, loader, device):
    model.train()
    for images, metadata, targets in loader:
        images = images.to(device)
        optimizer.zero_grad()
        with autocast(device_type="cuda", dtype=torch.bfloat16):
            outputs = model(images, metadata)
            loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
