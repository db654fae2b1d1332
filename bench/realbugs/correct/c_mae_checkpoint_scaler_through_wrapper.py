# origin: facebookresearch/mae | code@3c0121bf8b86859dc31b7a3afbd1179bd0678196 | util/misc.py
# principle: 7
# expect: none
# tempts: AMP080
# summary: the checkpoint saves the loss-scaler wrapper's state under "scaler" and loads it back on resume; the GradScaler itself lives inside the wrapper.
import torch


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer):
        self._scaler.scale(loss).backward()
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()

    def load_state_dict(self, state_dict):
        self._scaler.load_state_dict(state_dict)


def save_model(path, epoch, model, optimizer, loss_scaler):
    to_save = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "scaler": loss_scaler.state_dict()}
    torch.save(to_save, path)


def load_model(path, model, optimizer, loss_scaler):
    checkpoint = torch.load(path, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if "scaler" in checkpoint:
        loss_scaler.load_state_dict(checkpoint["scaler"])
    return checkpoint["epoch"] + 1


def train(model, optimizer, loader, epochs, path):
    loss_scaler = NativeScaler()
    for epoch in range(epochs):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x, y)
            optimizer.zero_grad()
            loss_scaler(loss, optimizer)
        save_model(path, epoch, model, optimizer, loss_scaler)
