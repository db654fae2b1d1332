# origin: pytorch/ignite | https://github.com/pytorch/ignite/issues/3435 | ignite/engine/__init__.py
# principle: 6
# expect: AMP072 line 26
# summary: the supervised trainer factory creates torch.cuda.amp.GradScaler when amp_mode is on, which warns as deprecated.
import torch
from torch.cuda.amp import GradScaler


def supervised_training_step_amp(model, optimizer, loss_fn, scaler):
    def update(engine, batch):
        model.train()
        x, y = batch
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.item()

    return update


def create_supervised_trainer(model, optimizer, loss_fn, scaler=False):
    if scaler is True:
        scaler = GradScaler(enabled=True)
    return supervised_training_step_amp(model, optimizer, loss_fn, scaler)
