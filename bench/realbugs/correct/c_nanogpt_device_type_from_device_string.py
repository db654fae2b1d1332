# origin: karpathy/nanoGPT | https://github.com/karpathy/nanoGPT/pull/27 | train.py
# also: https://github.com/karpathy/build-nanogpt/pull/16 fixes the same call in build-nanogpt
# principle: 7
# expect: none
# tempts: AMP075
# summary: the device may be "cuda:{rank}" under DDP; autocast receives `device_type = 'cuda' if 'cuda' in device else 'cpu'`, the one-liner the maintainer asked for.
import os
from contextlib import nullcontext

import torch

ddp = int(os.environ.get("RANK", -1)) != -1
device = f"cuda:{int(os.environ['LOCAL_RANK'])}" if ddp else "cuda"
device_type = "cuda" if "cuda" in device else "cpu"
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=torch.bfloat16)


def train(model, optimizer, get_batch, max_iters):
    for _ in range(max_iters):
        X, Y = get_batch("train")
        with ctx:
            logits, loss = model(X, Y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
