# origin: IDEA-Research/DN-DETR | https://github.com/IDEA-Research/DN-DETR/issues/18 | engine.py
# principle: 7
# expect: none
# tempts: AMP043, AMP011, AMP020
# summary: a reporter read zero_grad as running before the step; it runs before the scaled backward. The plain backward and optimizer.step sit in the else of the same `args.amp` flag that enables autocast and the scaler path.
import math
import sys

import torch


def train_one_epoch(model, criterion, data_loader, optimizer, scaler, max_norm, args):
    model.train()
    for samples, targets in data_loader:
        with torch.autocast("cuda", enabled=args.amp):
            outputs = model(samples)
            loss_dict = criterion(outputs, targets)
            losses = sum(loss_dict[k] * criterion.weight_dict[k] for k in loss_dict if k in criterion.weight_dict)
        loss_value = losses.item()
        if not math.isfinite(loss_value):
            print("Loss is {}, stopping training".format(loss_value))
            sys.exit(1)
        if args.amp:
            optimizer.zero_grad()
            scaler.scale(losses).backward()
            if max_norm > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.zero_grad()
            losses.backward()
            if max_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()


def main(model, criterion, data_loader, optimizer, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
    for epoch in range(args.epochs):
        train_one_epoch(model, criterion, data_loader, optimizer, scaler, args.clip_max_norm, args)
