# origin: huggingface/accelerate | https://github.com/huggingface/accelerate/pull/1036 | src/accelerate/accelerator.py
# principle: 6
# expect: AMP012 line 15
# summary: the accelerator built a GradScaler whenever native AMP was on, also for bf16 on GPU, and every step went through scale/unscale/inf checks for nothing.
# upstream-fix: PR #1036 builds the scaler only for fp16.
import torch


class Accelerator:
    def __init__(self, mixed_precision="no"):
        self.mixed_precision = mixed_precision
        self.native_amp = mixed_precision in ("fp16", "bf16")
        self.scaler = None
        if self.native_amp:
            self.scaler = torch.amp.GradScaler("cuda")
        self.autocast_dtype = torch.float16 if mixed_precision == "fp16" else torch.bfloat16

    def autocast(self):
        return torch.autocast("cuda", dtype=self.autocast_dtype, enabled=self.native_amp)

    def backward(self, loss):
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def step(self, optimizer):
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()


def train(model, optimizer, loader):
    accelerator = Accelerator(mixed_precision="bf16")
    for batch in loader:
        with accelerator.autocast():
            loss = model(batch)
        accelerator.backward(loss)
        accelerator.step(optimizer)
        optimizer.zero_grad()
