# origin: ultralytics/ultralytics | https://github.com/ultralytics/ultralytics/pull/22189 | ultralytics/engine/trainer.py
# also: fixes issues #21913 and #17282 (as stated in the PR)
# principle: 2
# expect: AMP080 line 20
# summary: the trainer's checkpoint held model, EMA and optimizer state but not the AMP GradScaler's; resuming restarted the loss scale.
# upstream-fix: PR #22189 saves "scaler": self.scaler.state_dict() and restores it on resume.
import torch


class BaseTrainer:
    def __init__(self, model, optimizer, amp):
        self.model = model
        self.optimizer = optimizer
        self.amp = amp
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp)
        self.epoch = 0

    def save_model(self, path):
        ckpt = {"epoch": self.epoch, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        torch.save(ckpt, path)

    def resume_training(self, ckpt):
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.epoch = ckpt["epoch"] + 1

    def optimizer_step(self):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=10.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def _do_train(self, loader):
        for batch in loader:
            with torch.autocast("cuda", enabled=self.amp):
                loss = self.model(batch)
            self.scaler.scale(loss).backward()
            self.optimizer_step()
