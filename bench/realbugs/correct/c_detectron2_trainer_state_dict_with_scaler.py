# origin: facebookresearch/detectron2 | https://github.com/facebookresearch/detectron2/pull/3686 | detectron2/engine/defaults.py
# principle: 7
# expect: none
# tempts: AMP080
# summary: the shape the review asked for: the AMP trainer's state_dict merges the grad scaler's state with the optimizer's, and the checkpoint saves the trainer's state_dict.
import torch


class AMPTrainer:
    def __init__(self, model, data_loader, optimizer):
        self.model = model
        self.data_loader_iter = iter(data_loader)
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def run_step(self):
        data = next(self.data_loader_iter)
        with torch.autocast("cuda"):
            losses = sum(self.model(data).values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "grad_scaler": self.grad_scaler.state_dict()}

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self.grad_scaler.load_state_dict(state_dict["grad_scaler"])


def checkpoint(trainer, model, path):
    torch.save({"model": model.state_dict(), "trainer": trainer.state_dict()}, path)
