# origin: allenai/allennlp | https://github.com/allenai/allennlp/pull/5426 | allennlp/training/gradient_descent_trainer.py
# also: #5413 (named as "see also" in the PR description)
# principle: 5
# expect: AMP030 line 21,32
# summary: the trainer scales the loss, then calls its own rescale-gradients method (a norm clip) before scaler.step; the clip sees scaled gradients.
# upstream-fix: PR #5426 unscales the optimizer's gradients before the clipping method runs.
import torch


class GradientDescentTrainer:
    def __init__(self, model, optimizer, grad_norm, use_amp):
        self.model = model
        self.optimizer = optimizer
        self._grad_norm = grad_norm
        self._scaler = torch.amp.GradScaler("cuda") if use_amp else None

    def rescale_gradients(self):
        if self._grad_norm is None:
            return None
        params = [p for p in self.model.parameters() if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, self._grad_norm)

    def train_epoch(self, batches):
        for batch in batches:
            self.optimizer.zero_grad()
            with torch.autocast("cuda", enabled=self._scaler is not None):
                loss = self.model(**batch)["loss"]
            if self._scaler is not None:
                self._scaler.scale(loss).backward()
            else:
                loss.backward()
            batch_grad_norm = self.rescale_gradients()
            if self._scaler is not None:
                self._scaler.step(self.optimizer)
                self._scaler.update()
            else:
                self.optimizer.step()
