# origin: pytorch/examples | https://github.com/pytorch/examples/issues/1196 | distributed/minGPT-ddp/mingpt/trainer.py
# principle: 3
# expect: AMP030 line 24
# summary: a trainer class scales the loss with its own GradScaler and clips the gradients before any unscale_.
# upstream-fix: the issue asks for scaler.unscale_(optimizer) right before clip_grad_norm_.
# fix-check: self\.scaler\.unscale_\(self\.optimizer\)\n\s*torch\.nn\.utils\.clip_grad_norm_
import torch
from torch import nn


class Trainer:
    def __init__(self, model, optimizer, use_amp, grad_norm_clip):
        self.model = model
        self.optimizer = optimizer
        self.grad_norm_clip = grad_norm_clip
        self.scaler = torch.amp.GradScaler("cuda") if use_amp else None

    def run_batch(self, source, targets):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler is not None):
            _, loss = self.model(source, targets)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_norm_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_norm_clip)
            self.optimizer.step()
        return loss.item()

    def run_epoch(self, loader):
        for source, targets in loader:
            self.run_batch(source, targets)
