# origin: conservationtechlab/animl-py | https://github.com/conservationtechlab/animl-py/pull/304 | src/animl/train.py
# principle: 7
# expect: none
# tempts: AMP013, AMP080
# summary: the fix: train_classifier builds one GradScaler before the epoch loop, hands it to the per-epoch helper, and saves/loads its state with the checkpoint.
import torch


def _train_classifier_helper(data_loader, model, criterion, optimizer, device, scaler):
    model.train()
    for images, labels in data_loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = criterion(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()


def save_classifier(path, epoch, model, optimizer, scaler):
    state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    torch.save(state, path)


def load_classifier_checkpoint(path, model, optimizer, scaler):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None and "scaler" in ckpt:
        scaler.load_state_dict(ckpt["scaler"])
    return ckpt["epoch"]


def train_classifier(config, data_loader, model, criterion, optimizer, device):
    scaler = torch.amp.GradScaler("cuda") if config["mixed_precision"] else None
    for epoch in range(config["num_epochs"]):
        _train_classifier_helper(data_loader, model, criterion, optimizer, device, scaler)
        save_classifier(config["checkpoint"], epoch, model, optimizer, scaler)
