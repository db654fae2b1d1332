# origin: victorchall/EveryDream2trainer | https://github.com/victorchall/EveryDream2trainer/pull/175 | -
# principle: 3
# expect: AMP030 line 12
# summary: `--clip_grad_scale` is applied to the scaled gradients, so users had to pass 1e5-1e6 instead of 1.0.
# upstream-fix: PR #175 unscales before clipping so the usual threshold works.
import torch


def optimizer_step(unet, optimizer, scaler, loss, clip_grad_norm, step, grad_accum):
    scaler.scale(loss).backward()
    if clip_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(parameters=unet.parameters(), max_norm=clip_grad_norm)
    if (step + 1) % grad_accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


def train(unet, optimizer, batches, args):
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp, init_scale=2**17.5)
    for step, batch in enumerate(batches):
        with torch.autocast("cuda", enabled=args.amp):
            loss = unet(batch).mean()
        optimizer_step(unet, optimizer, scaler, loss, args.clip_grad_norm, step, args.grad_accum)
