# origin: huggingface/accelerate | https://github.com/huggingface/accelerate/pull/1036 | src/accelerate/accelerator.py
# principle: 7
# expect: none
# tempts: AMP012
# summary: after the fix the accelerator builds its GradScaler only for fp16; bf16 autocast runs with a plain backward and step.
import torch


class Accelerator:
    def __init__(self, mixed_precision="no"):
        self.mixed_precision = mixed_precision
        self.native_amp = mixed_precision in ("fp16", "bf16")
        self.scaler = torch.amp.GradScaler("cuda") if mixed_precision == "fp16" else None
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


def train(model, optimizer, loader, mixed_precision):
    accelerator = Accelerator(mixed_precision=mixed_precision)
    for batch in loader:
        with accelerator.autocast():
            loss = model(batch)
        accelerator.backward(loss)
        accelerator.step(optimizer)
        optimizer.zero_grad()
