# origin: decoderesearch/SAELens | https://github.com/decoderesearch/SAELens/pull/723 | sae_lens/training/sae_trainer.py
# principle: 6
# expect: AMP012 line 16
# summary: the SAE trainer routes every step through a GradScaler while its only autocast hard-codes bfloat16; the scaler does nothing useful, can skip steps, and fails on bf16 parameters.
# upstream-fix: PR #723 removes the GradScaler from the trainer.
import contextlib

import torch


class SAETrainer:
    def __init__(self, sae, optimizer, cfg):
        self.sae = sae
        self.optimizer = optimizer
        self.cfg = cfg
        self.grad_scaler = torch.amp.GradScaler(device="cuda", enabled=cfg.autocast)

    def _autocast(self):
        if self.cfg.autocast:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _train_step(self, batch):
        with self._autocast():
            loss = self.sae.training_forward_pass(batch).loss
        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.sae.parameters(), 1.0)
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
        self.optimizer.zero_grad()

    def fit(self, batches):
        for batch in batches:
            self._train_step(batch)
