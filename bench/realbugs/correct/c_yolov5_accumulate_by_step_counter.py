# origin: ultralytics/yolov5 | code@0015b188fe15f2764271ba449a2f2cab0051117e | train.py
# principle: 7
# expect: none
# tempts: AMP040, AMP041, AMP043, AMP021
# summary: the scaled backward runs on every batch, and the step/update/zero_grad/EMA update run only when `ni - last_opt_step >= accumulate`, a boundary kept with a counter rather than a modulo; under DDP the loss is multiplied by the world size inside autocast.
import torch


def train(model, optimizer, train_loader, compute_loss, ema, epochs, accumulate, half_precision, rank, world_size):
    scaler = torch.amp.GradScaler("cuda", enabled=half_precision)
    nb = len(train_loader)
    last_opt_step = -1
    optimizer.zero_grad()
    for epoch in range(epochs):
        for i, (imgs, targets) in enumerate(train_loader):
            ni = i + nb * epoch
            with torch.autocast("cuda", enabled=half_precision):
                pred = model(imgs)
                loss, loss_items = compute_loss(pred, targets)
                if rank != -1:
                    loss *= world_size
            scaler.scale(loss).backward()
            if ni - last_opt_step >= accumulate:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                if ema:
                    ema.update(model)
                last_opt_step = ni
