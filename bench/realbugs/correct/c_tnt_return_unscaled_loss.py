# origin: meta-pytorch/tnt | https://github.com/meta-pytorch/tnt/pull/354 | torchtnt/framework/auto_unit.py
# principle: 7
# expect: none
# tempts: AMP033, AMP011
# summary: after the fix the unit backpropagates the scaled loss held in a separate name and returns the unscaled loss for logging.
import torch


class AutoUnit:
    def __init__(self, module, optimizer, precision):
        self.module = module
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda") if precision == torch.float16 else None

    def train_step(self, data):
        inputs, targets = data
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.grad_scaler is not None):
            outputs = self.module(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, targets)
        if self.grad_scaler:
            scaled_loss = self.grad_scaler.scale(loss)
            scaled_loss.backward()
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss, outputs


def train(unit, dataloader, logger):
    for step, data in enumerate(dataloader):
        loss, _ = unit.train_step(data)
        logger.log("train_loss", loss.item(), step)
