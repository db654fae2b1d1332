import torch


def train(unet, text_encoder, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda"):
            loss = unet(batch)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(text_encoder.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
