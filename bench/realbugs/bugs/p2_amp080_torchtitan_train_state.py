# origin: pytorch/torchtitan | https://github.com/pytorch/torchtitan/issues/146 | -
# principle: 2
# expect: AMP080 line 25
# summary: the train state saved at checkpoints holds model and optimizer but not the grad scaler's factor, so a reload restarts the scale (closed: fp16 not planned).
import torch


class Trainer:
    def __init__(self, model, optimizer, mixed_precision_param):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=(mixed_precision_param == torch.float16))
        self.step = 0

    def train_step(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        self.step += 1

    def save(self, path):
        torch.save({"step": self.step, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)
