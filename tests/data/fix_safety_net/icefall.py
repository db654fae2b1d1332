import torch


def train_one_epoch(model, optimizer, loader, scaler):
    for batch_idx, batch in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if batch_idx % 100 == 0:
            cur_grad_scale = scaler._scale.item()
            if cur_grad_scale < 8.0:
                scaler.update(cur_grad_scale * 2.0)
