# origin: huggingface/accelerate | https://github.com/huggingface/accelerate/pull/4294 | src/accelerate/accelerator.py
# principle: 5
# expect: AMP024 line 21,30
# summary: under FSDP, clip_grad_norm_ unscales the gradients, looks for a prepared model whose parameters match, and when the caller passed only part of the parameters (an adapter) falls through to the generic tail, which unscales again: "unscale_() has already been called" with fp16.
# upstream-fix: PR #4294 (open) returns from the FSDP branch instead of falling through.
import torch


class Accelerator:
    def __init__(self, models, optimizers, use_fsdp):
        self._models = models
        self._optimizers = optimizers
        self.use_fsdp = use_fsdp
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def unscale_gradients(self):
        for optimizer in self._optimizers:
            self.scaler.unscale_(optimizer)

    def clip_grad_norm_(self, parameters, max_norm):
        if self.use_fsdp:
            self.unscale_gradients()
            parameters = list(parameters)
            for model in self._models:
                if all(p is q for p, q in zip(parameters, model.parameters())):
                    return model.clip_grad_norm_(max_norm)
        self.unscale_gradients()
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def step(self):
        for optimizer in self._optimizers:
            self.scaler.step(optimizer)
        self.scaler.update()


def train(accelerator, model, adapter_parameters, loader):
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(adapter_parameters, 1.0)
        accelerator.step()
