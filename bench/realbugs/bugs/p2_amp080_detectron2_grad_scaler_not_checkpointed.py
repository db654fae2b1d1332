# origin: facebookresearch/detectron2 | https://github.com/facebookresearch/detectron2/pull/3686 | detectron2/engine/defaults.py
# principle: 2
# expect: AMP080 line 31
# summary: with AMP enabled the default trainer's checkpoints held model and optimizer but not the AMP trainer's grad_scaler state, so resuming restarted the loss scale.
# upstream-fix: PR #3686 (closed) registered the grad scaler with the checkpointer; the review suggested merging it into the trainer's state_dict.
import torch


class DefaultTrainer:
    def __init__(self, model, optimizer, cfg):
        self.model = model
        self.optimizer = optimizer
        self.amp = cfg.SOLVER.AMP.ENABLED
        self.grad_scaler = torch.amp.GradScaler("cuda") if self.amp else None
        self.iter = 0

    def run_step(self, data):
        with torch.autocast("cuda", enabled=self.amp):
            losses = sum(self.model(data).values())
        self.optimizer.zero_grad()
        if self.grad_scaler is not None:
            self.grad_scaler.scale(losses).backward()
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            losses.backward()
            self.optimizer.step()
        self.iter += 1

    def checkpoint(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "iteration": self.iter}, path)
