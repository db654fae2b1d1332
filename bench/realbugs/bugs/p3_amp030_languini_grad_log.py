# origin: languini-kitchen/languini-kitchen | https://github.com/languini-kitchen/languini-kitchen/pull/7 | -
# principle: 3
# expect: AMP030 line 20
# summary: the trainer logs the gradient norm of every step from gradients that are still multiplied by the (changing) loss scale.
# upstream-fix: PR #7 calls scaler.unscale_(optimizer) explicitly before the gradients are logged.
import torch


def grad_global_norm(model):
    norms = [p.grad.detach().norm(2) for p in model.parameters() if p.grad is not None]
    return torch.norm(torch.stack(norms), 2)


def train(model, optimizer, scaler, loader, logger, log_every):
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        if step % log_every == 0:
            logger.log({"grad_norm": grad_global_norm(model).item()}, step)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
