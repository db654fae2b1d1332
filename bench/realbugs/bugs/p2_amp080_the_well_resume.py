# origin: PolymathicAI/the_well | https://github.com/PolymathicAI/the_well/issues/77 | -
# principle: 2
# expect: AMP080 line 17
# summary: the benchmark trainer saves model and optimizer state but neither the LR scheduler nor the grad scaler, so a resumed run diverges from an uninterrupted one.
import torch


class Trainer:
    def __init__(self, model, optimizer, lr_scheduler, enable_amp):
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.grad_scaler = torch.amp.GradScaler("cuda", enabled=enable_amp)
        self.enable_amp = enable_amp

    def save_model(self, epoch, checkpoint_path):
        torch.save(
            {"epoch": epoch, "model_state_dict": self.model.state_dict(), "optimizer_state_dict": self.optimizer.state_dict()},
            checkpoint_path,
        )

    def train_one_epoch(self, dataloader):
        for batch in dataloader:
            with torch.autocast("cuda", enabled=self.enable_amp):
                loss = self.model(batch)
            self.grad_scaler.scale(loss).backward()
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
            self.optimizer.zero_grad()
        self.lr_scheduler.step()
