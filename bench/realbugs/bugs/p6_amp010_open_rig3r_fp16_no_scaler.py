# origin: engichang1467/Open-Rig3R | https://github.com/engichang1467/Open-Rig3R/issues/35 | scripts/train.py
# principle: 6
# expect: AMP010 line 14,17
# summary: the training step enters CUDA autocast without a dtype (float16 by default) and there is no GradScaler anywhere in the script, so small gradients flush to zero.
import torch
from torch.amp import autocast


def train(model, criterion, optimizer, loader, device):
    model.train()
    for images, metadata, targets in loader:
        images = images.to(device)
        optimizer.zero_grad()
        with autocast(device_type="cuda"):
            outputs = model(images, metadata)
            loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
