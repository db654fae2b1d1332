# origin: catalyst-team/catalyst | https://github.com/catalyst-team/catalyst/issues/1319 | catalyst/callbacks/optimizer.py
# principle: 5
# expect: AMP030 line 39
# summary: the optimizer callback runs the engine's (scaled) backward, then its grad_clip_fn, then the engine's optimizer step, which is where the scaler unscales: the clip sees scaled gradients.
import torch


class AMPEngine:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward_loss(self, loss, model, optimizer):
        self.scaler.scale(loss).backward()

    def optimizer_step(self, loss, model, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()

    def zero_grad(self, loss, model, optimizer):
        model.zero_grad()


class OptimizerCallback:
    def __init__(self, metric_key, model, optimizer, grad_clip_fn=None, accumulation_steps=1):
        self.metric_key = metric_key
        self.model = model
        self.optimizer = optimizer
        self.grad_clip_fn = grad_clip_fn
        self.accumulation_steps = accumulation_steps
        self._accumulation_counter = 0

    def on_batch_end(self, runner):
        if runner.is_train_loader:
            self._accumulation_counter += 1
            need_gradient_step = self._accumulation_counter % self.accumulation_steps == 0
            loss = runner.batch_metrics[self.metric_key]
            runner.engine.backward_loss(loss, self.model, self.optimizer)
            if self.grad_clip_fn is not None:
                self.grad_clip_fn(self.model.parameters())
            if need_gradient_step:
                runner.engine.optimizer_step(loss, self.model, self.optimizer)
                runner.engine.zero_grad(loss, self.model, self.optimizer)
