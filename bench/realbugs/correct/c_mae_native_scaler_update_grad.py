# origin: facebookresearch/mae | code@3c0121bf8b86859dc31b7a3afbd1179bd0678196 | util/misc.py
# also: the same helper is discussed in https://github.com/shansongliu/MuMu-LLaMA/issues/11 (misc.py NativeScalerWithGradNormCount, called from engine_train.py)
# principle: 7
# expect: none
# tempts: AMP040, AMP041, AMP043, AMP030
# summary: a loss-scaler helper scales and backpropagates on every micro-batch, and unscales, clips (or measures the norm), steps and updates only when update_grad is true; the caller passes the accumulation boundary and zeroes the gradients only there.
import math
import sys

import torch


class NativeScalerWithGradNormCount:
    state_dict_key = "amp_scaler"

    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, create_graph=False, update_grad=True):
        self._scaler.scale(loss).backward(create_graph=create_graph)
        if update_grad:
            self._scaler.unscale_(optimizer)
            if clip_grad is not None:
                norm = torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            else:
                norm = torch.norm(torch.stack([p.grad.detach().norm(2) for p in parameters if p.grad is not None]), 2)
            self._scaler.step(optimizer)
            self._scaler.update()
        else:
            norm = None
        return norm


def train_one_epoch(model, data_loader, optimizer, loss_scaler, accum_iter):
    optimizer.zero_grad()
    for data_iter_step, (samples, _) in enumerate(data_loader):
        with torch.autocast("cuda"):
            loss = model(samples)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            sys.exit(1)
        loss = loss / accum_iter
        loss_scaler(loss, optimizer, parameters=list(model.parameters()), update_grad=(data_iter_step + 1) % accum_iter == 0)
        if (data_iter_step + 1) % accum_iter == 0:
            optimizer.zero_grad()
