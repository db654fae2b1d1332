# origin: pytorch/tutorials | https://github.com/pytorch/tutorials/pull/3257 | recipes_source/recipes/amp_recipe.py
# principle: 6
# expect: AMP072 line 13
# summary: the AMP recipe itself built its scaler with torch.cuda.amp.GradScaler(), which now warns as deprecated.
# upstream-fix: PR #3257 uses torch.GradScaler("cuda").
# fix-check: GradScaler\([\"']cuda[\"']
import torch

use_amp = True


def run(net, opt, loss_fn, data, targets, epochs):
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    for epoch in range(epochs):
        for input, target in zip(data, targets):
            with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_amp):
                output = net(input)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
