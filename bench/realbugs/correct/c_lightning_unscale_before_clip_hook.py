# origin: Lightning-AI/pytorch-lightning | https://github.com/Lightning-AI/pytorch-lightning/pull/9606 | pytorch_lightning/plugins/precision/native_amp.py
# principle: 7
# expect: none
# tempts: AMP030, AMP024
# summary: after the fix the precision plugin unscales in a hook that runs before norm tracking and clipping, and its optimizer_step no longer unscales again.
import torch


class NativeMixedPrecisionPlugin:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def pre_optimizer_step(self, optimizer):
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()


class TrainingBatchLoop:
    def __init__(self, model, optimizer, plugin, gradient_clip_val):
        self.model = model
        self.optimizer = optimizer
        self.plugin = plugin
        self.gradient_clip_val = gradient_clip_val

    def run(self, batches):
        for batch in batches:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model.training_step(batch)
            self.plugin.backward(loss)
            self.plugin.pre_optimizer_step(self.optimizer)
            if self.gradient_clip_val:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.gradient_clip_val)
            self.plugin.optimizer_step(self.optimizer)
            self.optimizer.zero_grad()
