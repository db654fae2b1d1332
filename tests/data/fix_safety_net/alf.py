import torch


def update(model, optimizer, loss_fn, batch, scaler):
    with torch.autocast("cuda"):
        loss = loss_fn(model(batch))
    loss = scaler.scale(loss)
    loss.mean().backward()
    scaler.step(optimizer)
    scaler.update()
