# origin: maxencewynen/ConfLUNet | https://github.com/maxencewynen/ConfLUNet/pull/16 | -
# principle: 2
# expect: AMP080 line 15
# summary: the scaler's state was written with the checkpoint but never loaded on resume, so the loss scale restarted.
# upstream-fix: PR #16 loads the scaler state dict when resuming training.
import torch


def train(model, optimizer, loader, epochs, ckpt_path=None, amp=True):
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    start_epoch = 0
    if ckpt_path is not None:
        ckpt = torch.load(ckpt_path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_epoch = ckpt["epoch"] + 1
    for epoch in range(start_epoch, epochs):
        for x, y in loader:
            with torch.autocast("cuda", enabled=amp):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch}, "last.pt")
