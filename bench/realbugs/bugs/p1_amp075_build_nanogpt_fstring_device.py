# origin: karpathy/build-nanogpt | https://github.com/karpathy/build-nanogpt/issues/44 | train_gpt2.py
# also: https://github.com/karpathy/build-nanogpt/pull/16
# principle: 1
# expect: AMP075 line 27
# summary: under DDP the device is f"cuda:{ddp_local_rank}" and that string is passed as autocast's device_type: RuntimeError "unsupported autocast device_type 'cuda:0'".
# upstream-fix: PR #16 passes a device type ("cuda") derived from the device instead.
# fix-check: autocast\(device_type=(?!device,)
import os

import torch

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(device)
else:
    device = "cuda" if torch.cuda.is_available() else "cpu"


def train(model, optimizer, train_loader, max_steps, grad_accum_steps):
    for step in range(max_steps):
        optimizer.zero_grad()
        for micro_step in range(grad_accum_steps):
            x, y = train_loader.next_batch()
            x, y = x.to(device), y.to(device)
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                logits, loss = model(x, y)
            loss = loss / grad_accum_steps
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
