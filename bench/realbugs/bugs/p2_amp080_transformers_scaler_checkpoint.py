# origin: huggingface/transformers | https://github.com/huggingface/transformers/pull/11663 | src/transformers/trainer.py
# also: fixes issue #11323 (as stated in the PR)
# principle: 2
# expect: AMP080 line 22
# summary: the trainer saved optimizer and scheduler state at each checkpoint but not the AMP GradScaler's, so resumed runs did not match uninterrupted ones.
# upstream-fix: PR #11663 saves and reloads the scaler state dict with the checkpoint.
import os

import torch


class Trainer:
    def __init__(self, model, optimizer, lr_scheduler, use_amp):
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.use_amp = use_amp
        if use_amp:
            self.scaler = torch.amp.GradScaler("cuda")

    def _save_checkpoint(self, output_dir):
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
        torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))

    def _load_optimizer_and_scheduler(self, checkpoint):
        self.optimizer.load_state_dict(torch.load(os.path.join(checkpoint, "optimizer.pt")))
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, "scheduler.pt")))

    def training_step(self, inputs):
        with torch.autocast("cuda", enabled=self.use_amp):
            loss = self.model(**inputs).loss
        if self.use_amp:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
