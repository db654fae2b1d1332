# origin: WatChMaL/WatChMaL | https://github.com/WatChMaL/WatChMaL/pull/106 | -
# principle: 7
# expect: none
# tempts: AMP022, AMP023, AMP080
# summary: after the fix the scheduler steps only when the optimizer really stepped (the scale did not decrease across update()), and the scaler state is saved and restored with the checkpoint.
import torch


class ClassifierEngine:
    def __init__(self, model, optimizer, scheduler, use_amp):
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.use_amp = use_amp
        self.scaler = torch.amp.GradScaler("cuda") if use_amp else None

    def backward(self, loss):
        self.optimizer.zero_grad()
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            scale_before = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if self.scaler.get_scale() >= scale_before:
                self.scheduler.step()
        else:
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()

    def train(self, loader):
        for data, labels in loader:
            with torch.autocast("cuda", enabled=self.use_amp):
                loss = torch.nn.functional.cross_entropy(self.model(data), labels)
            self.backward(loss)

    def save_state(self, filename):
        state = {"optimizer": self.optimizer.state_dict(), "state_dict": self.model.state_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        torch.save(state, filename)
