# origin: facebookresearch/detectron2 | https://github.com/facebookresearch/detectron2/pull/5486 | detectron2/engine/train_loop.py
# principle: 6
# expect: AMP070 line 21
# summary: the AMP trainer's step runs the model under `torch.cuda.amp.autocast(dtype=self.precision)`, which warns as deprecated.
# upstream-fix: PR #5486 (closed) proposed torch.amp.autocast("cuda", ...).
# fix-check: autocast\([\"']cuda[\"']
import torch
from torch.cuda.amp import autocast


class AMPTrainer:
    def __init__(self, model, data_loader, optimizer, precision=torch.float16):
        self.model = model
        self.data_loader_iter = iter(data_loader)
        self.optimizer = optimizer
        self.precision = precision
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def run_step(self):
        data = next(self.data_loader_iter)
        with autocast(dtype=self.precision):
            loss_dict = self.model(data)
            losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
