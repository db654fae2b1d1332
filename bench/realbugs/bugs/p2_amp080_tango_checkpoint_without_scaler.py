# origin: allenai/tango | https://github.com/allenai/tango/issues/154 | tango/integrations/torch/train.py
# principle: 2
# expect: AMP080 line 22
# summary: the torch train step checkpoints model and optimizer state but not the GradScaler's, so a resumed run restarts the loss scale (and its growth tracker).
import torch


def train(model, optimizer, loader, amp, checkpoint_every, path):
    grad_scaler = torch.amp.GradScaler("cuda") if amp else None
    for step, batch in enumerate(loader):
        with torch.autocast("cuda", enabled=amp):
            loss = model(**batch)["loss"]
        if grad_scaler is not None:
            grad_scaler.scale(loss).backward()
            grad_scaler.step(optimizer)
            grad_scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
        if step % checkpoint_every == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)
