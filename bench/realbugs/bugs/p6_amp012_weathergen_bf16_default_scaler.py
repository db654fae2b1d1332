# origin: ecmwf/WeatherGenerator | https://github.com/ecmwf/WeatherGenerator/issues/874 | src/weathergen/train/trainer.py
# principle: 6
# expect: AMP012 line 13
# summary: the default mixed-precision dtype is bfloat16, but the trainer always builds an enabled GradScaler; profiling showed the scaling costs real time.
import torch


class Trainer:
    def __init__(self, model, optimizer, cf):
        self.model = model
        self.optimizer = optimizer
        self.mixed_precision_dtype = torch.bfloat16
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def train(self, loader):
        for batch in loader:
            with torch.autocast(device_type="cuda", dtype=self.mixed_precision_dtype, enabled=True):
                loss = self.model(batch)
            self.optimizer.zero_grad()
            self.grad_scaler.scale(loss).backward()
            self.grad_scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
