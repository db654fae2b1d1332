# origin: facebookresearch/detectron2 | code@012c8986baac12c9e7c2f8877a51ff5e97e7fe96 | detectron2/solver/build.py
# principle: 7
# expect: none
# tempts: AMP030
# summary: gradient clipping lives in an optimizer subclass's step(); the AMP trainer calls grad_scaler.step(optimizer), which unscales before it calls that step, so the clip sees true gradients.
import itertools

import torch


def _generate_optimizer_class_with_gradient_clipping(optimizer, per_param_clipper):
    def optimizer_wgc_step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                per_param_clipper(p)
        super(type(self), self).step(closure)

    return type(optimizer.__name__ + "WithGradientClip", (optimizer,), {"step": optimizer_wgc_step})


def build_optimizer(model, clip_value):
    def clip_grad_norm(p):
        torch.nn.utils.clip_grad_norm_(p, clip_value)

    cls = _generate_optimizer_class_with_gradient_clipping(torch.optim.SGD, per_param_clipper=clip_grad_norm)
    return cls(itertools.chain(model.parameters()), lr=0.02, momentum=0.9)


class AMPTrainer:
    def __init__(self, model, data_loader, optimizer):
        self.model = model
        self.data_loader_iter = iter(data_loader)
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def run_step(self):
        data = next(self.data_loader_iter)
        with torch.autocast("cuda"):
            loss_dict = self.model(data)
            losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
