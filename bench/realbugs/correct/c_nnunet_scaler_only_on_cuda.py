# origin: MIC-DKFZ/nnUNet | https://github.com/MIC-DKFZ/nnUNet/pull/2684 | nnunetv2/training/nnUNetTrainer/nnUNetTrainer.py
# principle: 7
# expect: none
# tempts: AMP011, AMP020, AMP014, AMP075
# summary: the trainer builds torch.GradScaler("cuda") only when its device is CUDA, enters autocast(device.type) only on CUDA (a null context elsewhere), and uses the plain backward/step when the scaler is None.
import contextlib

import torch
from torch import autocast


class nnUNetTrainer:
    def __init__(self, network, optimizer, device):
        self.network = network
        self.optimizer = optimizer
        self.device = device
        self.grad_scaler = torch.GradScaler("cuda") if self.device.type == "cuda" else None

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
