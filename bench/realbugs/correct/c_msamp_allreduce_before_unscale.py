# origin: Azure/MS-AMP-Examples | code-search | Deit/scaler.py
# principle: 7
# expect: none
# tempts: AMP030
# summary: the scaler helper all-reduces the still-scaled gradients (a linear operation that keeps the scale) before unscale_, then clips the unscaled gradients, steps and updates.
import torch


class NativeScalerWithGradReduce:
    state_dict_key = "amp_scaler"

    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, model, optimizer, clip_grad=None, parameters=None, create_graph=False):
        self._scaler.scale(loss).backward(create_graph=create_graph)
        if hasattr(optimizer, "all_reduce_grads"):
            optimizer.all_reduce_grads(model)
        if clip_grad is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()
