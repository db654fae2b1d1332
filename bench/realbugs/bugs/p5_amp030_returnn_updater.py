# origin: rwth-i6/returnn | https://github.com/rwth-i6/returnn/issues/1590 | returnn/torch/updater.py
# also: https://github.com/rwth-i6/returnn/pull/1595
# principle: 5
# expect: AMP030 line 23,46
# summary: the engine scales the loss and hands its GradScaler to an updater object whose step adds gradient noise and clips the global norm before scaler.step; both see scaled gradients.
# upstream-fix: PR #1595 calls grad_scaler.unscale_(optimizer) before the noise and the clipping.
import torch


class Updater:
    def __init__(self, model, optimizer, grad_clip_global_norm, grad_noise):
        self.model = model
        self.optimizer = optimizer
        self.grad_clip_global_norm = grad_clip_global_norm
        self.grad_noise = grad_noise

    def step(self, grad_scaler=None):
        if self.grad_noise:
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.add_(torch.randn_like(p.grad) * self.grad_noise)
        if self.grad_clip_global_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip_global_norm)
        if grad_scaler is not None:
            grad_scaler.step(self.optimizer)
            grad_scaler.update()
        else:
            self.optimizer.step()


class Engine:
    def __init__(self, model, updater, use_amp):
        self.model = model
        self.updater = updater
        self.grad_scaler = torch.amp.GradScaler("cuda") if use_amp else None

    def train_epoch(self, data_loader):
        for batch in data_loader:
            self.updater.optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16, enabled=self.grad_scaler is not None):
                loss = self.model(batch)
            if self.grad_scaler is not None:
                self.grad_scaler.scale(loss).backward()
            else:
                loss.backward()
            self.updater.step(grad_scaler=self.grad_scaler)
