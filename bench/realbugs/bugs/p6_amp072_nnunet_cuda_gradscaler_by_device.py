# origin: MIC-DKFZ/nnUNet | https://github.com/MIC-DKFZ/nnUNet/pull/2684 | nnunetv2/training/nnUNetTrainer/nnUNetTrainer.py
# principle: 6
# expect: AMP072 line 18
# summary: the trainer builds torch.cuda.amp.GradScaler() only when its device is CUDA; the factory is deprecated.
# upstream-fix: PR #2684 switches to torch.GradScaler("cuda").
# fix-check: GradScaler\([\"']cuda[\"']
import contextlib

import torch
from torch import autocast


class nnUNetTrainer:
    def __init__(self, network, optimizer, device):
        self.network = network
        self.optimizer = optimizer
        self.device = device
        self.grad_scaler = torch.cuda.amp.GradScaler() if self.device.type == "cuda" else None

    def train_step(self, data, target, loss):
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.device.type, enabled=True) if self.device.type == "cuda" else contextlib.nullcontext():
            output = self.network(data)
            l = loss(output, target)
        if self.grad_scaler is not None:
            self.grad_scaler.scale(l).backward()
            self.grad_scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.network.parameters(), 12)
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            l.backward()
            torch.nn.utils.clip_grad_norm_(self.network.parameters(), 12)
            self.optimizer.step()
        return l.detach()
