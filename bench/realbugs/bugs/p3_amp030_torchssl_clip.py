# origin: TorchSSL/TorchSSL | https://github.com/TorchSSL/TorchSSL/pull/59 | -
# principle: 3
# expect: AMP030 line 26
# summary: the semi-supervised trainer clips gradients (when clip > 0) after the scaled backward without unscaling them first.
# upstream-fix: PR #59 unscales all gradients before clipping.
# fix-check: scaler\.unscale_\(self\.optimizer\)
import torch


class FixMatchTrainer:
    def __init__(self, model, optimizer, scheduler, clip):
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.clip = clip

    def train(self, loader, use_amp):
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        for x_lb, y_lb, x_ulb in loader:
            with torch.autocast("cuda", enabled=use_amp):
                logits = self.model(torch.cat([x_lb, x_ulb]))
                total_loss = torch.nn.functional.cross_entropy(logits[: len(y_lb)], y_lb)
            if use_amp:
                scaler.scale(total_loss).backward()
                if self.clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                scaler.step(self.optimizer)
                scaler.update()
            else:
                total_loss.backward()
                if self.clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                self.optimizer.step()
            self.scheduler.step()
            self.model.zero_grad()
