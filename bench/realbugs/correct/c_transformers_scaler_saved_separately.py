# origin: huggingface/transformers | https://github.com/huggingface/transformers/pull/11663 | src/transformers/trainer.py
# principle: 7
# expect: none
# tempts: AMP080
# summary: after the fix the checkpoint writes the optimizer, the scheduler and the GradScaler to three files with three torch.save calls, and resume loads all three.
import os

import torch


class Trainer:
    def __init__(self, model, optimizer, lr_scheduler, use_amp):
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.use_amp = use_amp
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

    def _save_checkpoint(self, output_dir):
        torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
        torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))
        if self.use_amp:
            torch.save(self.scaler.state_dict(), os.path.join(output_dir, "scaler.pt"))

    def _load_optimizer_and_scheduler(self, checkpoint):
        self.optimizer.load_state_dict(torch.load(os.path.join(checkpoint, "optimizer.pt")))
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, "scheduler.pt")))
        if self.use_amp and os.path.isfile(os.path.join(checkpoint, "scaler.pt")):
            self.scaler.load_state_dict(torch.load(os.path.join(checkpoint, "scaler.pt")))

    def training_step(self, inputs):
        with torch.autocast("cuda", enabled=self.use_amp):
            loss = self.model(**inputs).loss
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
