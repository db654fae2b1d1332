# origin: pytorch/vision | https://github.com/pytorch/vision/pull/4874 | references/classification/train.py
# principle: 7
# expect: none
# tempts: AMP030, AMP020, AMP011
# summary: after the fix the forward runs inside autocast, the clip follows scaler.unscale_, and optimizer.step() runs only on the path without a scaler.
import torch
from torch import nn


def train_one_epoch(model, criterion, optimizer, data_loader, device, args, scaler=None):
    model.train()
    for image, target in data_loader:
        image, target = image.to(device), target.to(device)
        with torch.autocast("cuda", enabled=scaler is not None):
            output = model(image)
            loss = criterion(output, target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            if args.clip_grad_norm is not None:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if args.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            optimizer.step()
