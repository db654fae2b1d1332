# origin: WatChMaL/WatChMaL | https://github.com/WatChMaL/WatChMaL/pull/106 | -
# principle: 2
# expect: AMP080 line 18
# summary: the engine's checkpoints saved model and optimizer state but not the AMP GradScaler's; a restored run started again from the initial loss scale.
# upstream-fix: PR #106 saves and restores the AMP scaler state in checkpoints (among other AMP fixes).
import torch


class ClassifierEngine:
    def __init__(self, model, optimizer, use_amp):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        self.use_amp = use_amp
        self.iteration = 0

    def save_state(self, filename):
        torch.save({"global_step": self.iteration, "optimizer": self.optimizer.state_dict(), "state_dict": self.model.state_dict()}, filename)

    def restore_state(self, weight_file):
        checkpoint = torch.load(weight_file)
        self.model.load_state_dict(checkpoint["state_dict"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.iteration = checkpoint["global_step"]

    def train(self, loader):
        for data, labels in loader:
            with torch.autocast("cuda", enabled=self.use_amp):
                loss = torch.nn.functional.cross_entropy(self.model(data), labels)
            self.optimizer.zero_grad()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.iteration += 1
