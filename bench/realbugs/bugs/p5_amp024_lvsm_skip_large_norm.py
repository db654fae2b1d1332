# origin: Haian-Jin/LVSM | https://github.com/Haian-Jin/LVSM/pull/19 | train.py
# principle: 5
# expect: AMP024|AMP021 line 15
# summary: when the gradient norm is above a threshold the loop skips the optimizer step, and scaler.update() sat inside the same branch; the next iteration's unscale_ raises.
# upstream-fix: PR #19 moves scaler.update() out of the `if` so it runs on every iteration.
import torch


def main(config, model, optimizer, lr_scheduler, dataloader):
    scaler = torch.amp.GradScaler("cuda", enabled=config.use_amp)
    for data in dataloader:
        with torch.autocast("cuda", dtype=torch.bfloat16 if config.bf16 else torch.float16, enabled=config.use_amp):
            loss = model(data)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        total_grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=config.grad_clip_norm)
        if total_grad_norm.item() > config.skip_threshold:
            print(f"WARNING: grad norm too large {total_grad_norm.item()}, skipping optimizer step")
        else:
            scaler.step(optimizer)
            scaler.update()
            lr_scheduler.step()
        optimizer.zero_grad(set_to_none=True)
