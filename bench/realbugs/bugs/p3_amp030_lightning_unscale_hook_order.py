# origin: Lightning-AI/pytorch-lightning | https://github.com/Lightning-AI/pytorch-lightning/pull/9606 | pytorch_lightning/plugins/precision/native_amp.py
# also: fixes issues #9599, #9330, #9205, #9694 (as listed in the PR)
# principle: 3
# expect: AMP030 line 36
# summary: the precision plugin unscales inside its optimizer_step, but the loop tracks the gradient norm and clips in an earlier hook, so both read scaled gradients.
# upstream-fix: PR #9606 moves unscale_ to a hook that runs before norm tracking and clipping.
import torch


class NativeMixedPrecisionPlugin:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def optimizer_step(self, optimizer):
        self.scaler.unscale_(optimizer)
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
            if self.gradient_clip_val:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.gradient_clip_val)
            self.plugin.optimizer_step(self.optimizer)
            self.optimizer.zero_grad()
