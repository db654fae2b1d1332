# origin: karpathy/nanoGPT | https://github.com/karpathy/nanoGPT/issues/635 | train.py
# also: https://github.com/karpathy/nanoGPT/pull/709
# principle: 6
# expect: AMP072 line 20
# summary: train.py line 196 builds torch.cuda.amp.GradScaler(enabled=(dtype == 'float16')), which warns that the factory is deprecated.
# upstream-fix: PR #709 uses torch.amp.GradScaler('cuda', enabled=...).
# fix-check: torch\.amp\.GradScaler\(["']cuda["'], enabled=\(dtype == ["']float16["']\)\)
from contextlib import nullcontext

import torch

device = "cuda"
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)


def train(model, optimizer, get_batch, max_iters, grad_clip):
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    for it in range(max_iters):
        X, Y = get_batch("train")
        with ctx:
            logits, loss = model(X, Y)
        scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
