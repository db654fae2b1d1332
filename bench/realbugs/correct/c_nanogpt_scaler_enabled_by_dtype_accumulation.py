# origin: karpathy/nanoGPT | https://github.com/karpathy/nanoGPT/issues/654 | train.py
# also: https://github.com/karpathy/nanoGPT/issues/605 (the accumulation loss division), https://github.com/karpathy/nanoGPT/pull/709 (torch.amp spelling)
# principle: 7
# expect: none
# tempts: AMP012, AMP040, AMP041, AMP043
# summary: one `dtype` string picks bfloat16 or float16 for autocast and enables the GradScaler only for float16; micro-steps backpropagate scaled losses and the unscale/clip/step/update/zero_grad run once after the micro-step loop.
from contextlib import nullcontext

import torch

device = "cuda"
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)


def train(model, optimizer, get_batch, max_iters, gradient_accumulation_steps, grad_clip, ddp):
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))
    X, Y = get_batch("train")
    for iter_num in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            if ddp:
                model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
