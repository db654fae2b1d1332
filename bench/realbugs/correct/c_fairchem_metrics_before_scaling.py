# origin: facebookresearch/fairchem | https://github.com/facebookresearch/fairchem/pull/617 | -
# principle: 7
# expect: none
# tempts: AMP033
# summary: the reviewer-preferred fix: record the loss metric before `loss = self.scaler.scale(loss)`, so no division by a scale that _backward may already have updated is needed.
import torch


class OCPTrainer:
    def __init__(self, model, optimizer, amp):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda") if amp else None
        self.metrics = {}

    def _backward(self, loss):
        self.optimizer.zero_grad()
        loss.backward()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def train(self, loader):
        for batch in loader:
            with torch.autocast("cuda", enabled=self.scaler is not None):
                out = self.model(batch)
                loss = torch.nn.functional.l1_loss(out, batch.y)
            self.metrics["loss"] = loss.detach().item()
            loss = self.scaler.scale(loss) if self.scaler else loss
            self._backward(loss)
