# origin: roboflow/rf-detr | https://github.com/roboflow/rf-detr/pull/324 | rfdetr/engine.py
# principle: 7
# expect: none
# tempts: AMP075, AMP070
# summary: the engine imports autocast from torch.cuda.amp on old torch and from torch.amp otherwise, and builds autocast's keyword arguments under the same flag, so device_type is passed exactly when torch.amp's autocast is used.
import torch

DEPRECATED_AMP = not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler")
if DEPRECATED_AMP:
    from torch.cuda.amp import autocast
else:
    from torch.amp import autocast


def get_autocast_args(args):
    if DEPRECATED_AMP:
        return {"enabled": args.amp, "dtype": torch.bfloat16}
    return {"device_type": "cuda", "enabled": args.amp, "dtype": torch.bfloat16}


def train_one_epoch(model, criterion, data_loader, optimizer, args):
    for samples, targets in data_loader:
        with autocast(**get_autocast_args(args)):
            outputs = model(samples, targets)
            losses = sum(criterion(outputs, targets).values())
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
