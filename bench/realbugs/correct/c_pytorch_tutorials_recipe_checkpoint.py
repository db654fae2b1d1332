# origin: pytorch/tutorials | https://github.com/pytorch/tutorials/pull/3257 | recipes_source/recipes/amp_recipe.py
# principle: 7
# expect: none
# tempts: AMP080, AMP030
# summary: the AMP recipe after the fix: torch.GradScaler("cuda", enabled=use_amp), unscale_ before inspecting/clipping gradients, and a checkpoint that saves and restores scaler.state_dict() with the model and optimizer.
import torch

use_amp = True


def run(net, opt, loss_fn, data, targets, epochs, path):
    scaler = torch.GradScaler("cuda", enabled=use_amp)
    for epoch in range(epochs):
        for input, target in zip(data, targets):
            with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_amp):
                output = net(input)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.1)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
    checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()}
    torch.save(checkpoint, path)
    checkpoint = torch.load(path)
    net.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
