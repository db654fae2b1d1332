# origin: ultralytics/ultralytics | https://github.com/ultralytics/ultralytics/pull/22189 | ultralytics/engine/trainer.py
# principle: 7
# expect: none
# tempts: AMP080, AMP013
# summary: after the fix the trainer's checkpoint holds "scaler": self.scaler.state_dict() and resume loads it when present; the scaler itself is built once in the trainer.
import torch


class BaseTrainer:
    def __init__(self, model, optimizer, amp):
        self.model = model
        self.optimizer = optimizer
        self.amp = amp
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp)
        self.epoch = 0

    def save_model(self, path):
        ckpt = {
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
        }
        torch.save(ckpt, path)

    def resume_training(self, ckpt):
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if ckpt.get("scaler") is not None:
            self.scaler.load_state_dict(ckpt["scaler"])
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
