# origin: oke-aditya/pytorch_cnn_trainer | https://github.com/oke-aditya/pytorch_cnn_trainer/pull/10 | pytorch_cnn_trainer/engine.py
# also: the PR fixes issue #5 of the same repository
# principle: 2
# expect: AMP013 line 13
# summary: the first fp16 version built a GradScaler inside the per-epoch train_step; the author noted the scaler must be instantiated only once and moved it to fit().
# upstream-fix: fit() creates one scaler and passes it to train_step.
import torch


def train_step(model, train_loader, criterion, device, optimizer, fp16=False):
    model.train()
    if fp16:
        scaler = torch.amp.GradScaler("cuda")
    for inputs, target in train_loader:
        inputs, target = inputs.to(device), target.to(device)
        optimizer.zero_grad()
        if fp16:
            with torch.autocast("cuda"):
                loss = criterion(model(inputs), target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss = criterion(model(inputs), target)
            loss.backward()
            optimizer.step()


def fit(epochs, model, train_loader, criterion, device, optimizer, fp16=False):
    for epoch in range(epochs):
        train_step(model, train_loader, criterion, device, optimizer, fp16=fp16)
