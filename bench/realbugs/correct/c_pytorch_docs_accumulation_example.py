# origin: pytorch/pytorch | https://github.com/pytorch/pytorch/pull/36601 | docs/source/notes/amp_examples.rst
# principle: 7
# expect: none
# tempts: AMP040, AMP041, AMP043
# summary: the documented accumulation pattern: the scaled backward runs on every micro-batch, while step, update and zero_grad run only on iterations where the optimizer actually steps.
import torch


def train(model, optimizer, loss_fn, data, epochs, iters_to_accumulate):
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for i, (input, target) in enumerate(data):
            with torch.autocast("cuda", dtype=torch.float16):
                output = model(input)
                loss = loss_fn(output, target)
                loss = loss / iters_to_accumulate
            scaler.scale(loss).backward()
            if (i + 1) % iters_to_accumulate == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
