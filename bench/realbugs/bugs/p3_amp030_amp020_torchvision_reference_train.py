# origin: pytorch/vision | https://github.com/pytorch/vision/pull/4874 | references/classification/train.py
# principle: 3
# expect: AMP030 line 22
# expect: AMP020 line 29
# summary: with --amp the reference script clipped gradients without unscaling them and then stepped the optimizer a second time after scaler.step.
# upstream-fix: PR #4874 unscales before the clip and stops calling optimizer.step twice (it also moves the forward into autocast).
import torch
from torch import nn


def train_one_epoch(model, criterion, optimizer, data_loader, device, args, scaler=None):
    model.train()
    for image, target in data_loader:
        image, target = image.to(device), target.to(device)
        output = model(image)
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = criterion(output, target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            if args.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if args.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        optimizer.step()
