# origin: NCAR/miles-credit | https://github.com/NCAR/miles-credit/pull/141 | -
# principle: 3
# expect: AMP030 line 23
# summary: the weather-model trainer clips gradients under an optional max-norm flag while they are still scaled by the GradScaler.
# upstream-fix: PR #141 unscales the gradient before clipping.
import torch


class Trainer:
    def __init__(self, model, optimizer, conf):
        self.model = model
        self.optimizer = optimizer
        self.grad_max_norm = conf["trainer"].get("grad_max_norm", 0.0)
        self.amp = conf["trainer"]["amp"]

    def train_one_epoch(self, loader, scaler):
        for batch in loader:
            with torch.autocast("cuda", enabled=self.amp):
                y_pred = self.model(batch["x"])
                loss = torch.nn.functional.mse_loss(y_pred, batch["y"])
            scaler.scale(loss).backward()
            if self.grad_max_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=self.grad_max_norm)
            scaler.step(self.optimizer)
            scaler.update()
            self.optimizer.zero_grad()

    def fit(self, loader, epochs):
        scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        for _ in range(epochs):
            self.train_one_epoch(loader, scaler)
