# origin: pytorch/pytorch | https://github.com/pytorch/pytorch/issues/40497 | -
# principle: 7
# expect: none
# tempts: AMP033, AMP030
# summary: a reported seq2seq loop (NaN after some epochs for numerical reasons) follows the protocol: it logs loss.item() of the unscaled loss inside autocast, unscales before clipping, then steps and updates.
import torch


def train(model, data_loader, optimizer, criterion, device, scaler):
    clip = 1
    model.train()
    epoch_loss = 0
    for src, trg in data_loader:
        optimizer.zero_grad()
        src, trg = src.to(device, non_blocking=True), trg.to(device, non_blocking=True)
        with torch.autocast("cuda"):
            output, _ = model(src, trg[:, :-1])
            output = output.contiguous().view(-1, output.shape[-1])
            loss = criterion(output, trg[:, 1:].contiguous().view(-1))
            epoch_loss += loss.item()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
    return epoch_loss / len(data_loader)
