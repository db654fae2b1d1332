# origin: Haian-Jin/LVSM | https://github.com/Haian-Jin/LVSM/pull/19 | train.py
# principle: 7
# expect: none
# tempts: AMP021, AMP024
# summary: the fixed loop skips the optimizer step when the gradient norm is too large but calls scaler.update() on every iteration, outside the if.
import torch


def main(config, model, optimizer, lr_scheduler, dataloader):
    scaler = torch.amp.GradScaler("cuda", enabled=config.use_amp)
    for data in dataloader:
        with torch.autocast("cuda", enabled=config.use_amp):
            loss = model(data)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        total_grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=config.grad_clip_norm)
        if total_grad_norm.item() > config.skip_threshold:
            print(f"WARNING: grad norm too large {total_grad_norm.item()}, skipping optimizer step")
        else:
            scaler.step(optimizer)
            lr_scheduler.step()
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
