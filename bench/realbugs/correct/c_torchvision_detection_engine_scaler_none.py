# origin: pytorch/vision | https://github.com/pytorch/vision/issues/8068 | references/detection/engine.py
# principle: 7
# expect: none
# tempts: AMP011, AMP020, AMP001
# summary: autocast is enabled exactly when a scaler was passed (`enabled=scaler is not None`), and the plain backward/step run in the else of `if scaler is not None`.
import torch


def train_one_epoch(model, optimizer, data_loader, device, epoch, scaler=None):
    model.train()
    lr_scheduler = None
    if epoch == 0:
        warmup_iters = min(1000, len(data_loader) - 1)
        lr_scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0 / 1000, total_iters=warmup_iters)
    for images, targets in data_loader:
        images = list(image.to(device) for image in images)
        with torch.autocast("cuda", enabled=scaler is not None):
            loss_dict = model(images, targets)
            losses = sum(loss for loss in loss_dict.values())
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(losses).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            losses.backward()
            optimizer.step()
        if lr_scheduler is not None:
            lr_scheduler.step()
