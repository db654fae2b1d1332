# origin: roboflow/rf-detr | https://github.com/roboflow/rf-detr/issues/30 | rfdetr/engine.py
# also: fixed by https://github.com/roboflow/rf-detr/pull/33 (as stated in the issue)
# principle: 1
# expect: AMP075 line 16
# summary: the training step enters torch.amp's autocast without a device type (the evaluation path passes 'cuda'); newer torch requires device_type.
# upstream-fix: PR #33 passes 'cuda' as the first argument, as evaluation already did.
# fix-check: autocast\([\"']cuda[\"'], enabled=args\.amp
import torch
from torch.amp import GradScaler, autocast


def train_one_epoch(model, criterion, data_loader, optimizer, device, args):
    scaler = GradScaler("cuda", enabled=args.amp)
    for samples, targets in data_loader:
        samples = samples.to(device)
        with autocast(enabled=args.amp, dtype=torch.bfloat16):
            outputs = model(samples, targets)
            loss_dict = criterion(outputs, targets)
            losses = sum(loss_dict.values())
        optimizer.zero_grad()
        scaler.scale(losses).backward()
        scaler.step(optimizer)
        scaler.update()


@torch.no_grad()
def evaluate(model, data_loader, args):
    for samples, targets in data_loader:
        with autocast("cuda", enabled=args.amp, dtype=torch.bfloat16):
            model(samples)
