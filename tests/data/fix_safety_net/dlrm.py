import torch


def train(model, loader, optimizer, emb_optimizer, use_dense, use_emb):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        if use_dense:
            scaler.step(optimizer)
        if use_emb:
            scaler.step(emb_optimizer)
        scaler.update()
