# origin: lucidrains/med-seg-diff-pytorch | https://github.com/lucidrains/med-seg-diff-pytorch/pull/6 | driver.py
# principle: 6
# expect: AMP011 line 16
# summary: with an Accelerator doing fp16 mixed precision, the loop calls loss.backward() instead of accelerator.backward(loss): the loss is never scaled, yet the prepared optimizer's step unscales the gradients.
# upstream-fix: PR #6 replaces loss.backward() with accelerator.backward(loss).
from accelerate import Accelerator


def main(args, diffusion, optimizer, dataloader):
    accelerator = Accelerator(mixed_precision=args.mixed_precision, gradient_accumulation_steps=args.gradient_accumulation_steps)
    diffusion, optimizer, dataloader = accelerator.prepare(diffusion, optimizer, dataloader)
    for epoch in range(args.epochs):
        for img, mask in dataloader:
            with accelerator.accumulate(diffusion):
                loss = diffusion(mask, img)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
