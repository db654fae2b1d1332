from typing import cast

import torch


def train_step(engine, batch, model, optimizer, loss_fn, scaler):
    model.train()
    x, y = batch
    with torch.autocast("cuda"):
        output = model(x)
        loss = loss_fn(output, y)
    cast(torch.Tensor, scaler.scale(loss)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()
