# origin: conservationtechlab/animl-py | https://github.com/conservationtechlab/animl-py/issues/298 | src/animl/train.py
# also: https://github.com/conservationtechlab/animl-py/pull/304
# principle: 2
# expect: AMP013 line 13
# summary: with mixed precision on, the per-epoch helper builds a new GradScaler each time it is called, so the learned scale restarts every epoch.
# upstream-fix: PR #304 builds the scaler once in train_classifier and passes it in (and checkpoints its state).
import torch


def _train_classifier_helper(data_loader, model, criterion, optimizer, device, mixed_precision):
    model.train()
    if mixed_precision:
        scaler = torch.amp.GradScaler("cuda")
    for images, labels in data_loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        if mixed_precision:
            with torch.autocast("cuda"):
                loss = criterion(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()


def train_classifier(config, data_loader, model, criterion, optimizer, device):
    for epoch in range(config["num_epochs"]):
        _train_classifier_helper(data_loader, model, criterion, optimizer, device, config["mixed_precision"])
