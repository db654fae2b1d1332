# origin: open-mmlab/mmengine | code@0200622c09c64a2f19aaa3aae87dcf051e04ca70 | mmengine/optim/optimizer/amp_optimizer_wrapper.py
# principle: 7
# expect: none
# tempts: AMP021, AMP030, AMP023, AMP080
# summary: an optimizer wrapper splits the protocol over methods: backward() scales, step() unscales only when clipping is configured, clips, steps and updates with an optional static scale; its state_dict carries the scaler's state.
import torch


class AmpOptimWrapper:
    def __init__(self, optimizer, loss_scale="dynamic", clip_grad=None):
        self.optimizer = optimizer
        self.clip_grad_kwargs = clip_grad or {}
        self._scale_update_param = None
        if loss_scale == "dynamic":
            self.loss_scaler = torch.amp.GradScaler("cuda")
        else:
            self._scale_update_param = loss_scale
            self.loss_scaler = torch.amp.GradScaler("cuda", init_scale=loss_scale)

    def backward(self, loss):
        self.loss_scaler.scale(loss).backward()

    def _clip_grad(self):
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, **self.clip_grad_kwargs)

    def step(self):
        if self.clip_grad_kwargs:
            self.loss_scaler.unscale_(self.optimizer)
            self._clip_grad()
        self.loss_scaler.step(self.optimizer)
        self.loss_scaler.update(self._scale_update_param)

    def zero_grad(self):
        self.optimizer.zero_grad()

    def state_dict(self):
        state_dict = self.optimizer.state_dict()
        state_dict["loss_scaler"] = self.loss_scaler.state_dict()
        return state_dict

    def update_params(self, loss):
        self.backward(loss)
        self.step()
        self.zero_grad()


def train(model, optim_wrapper, loader):
    for data in loader:
        with torch.autocast("cuda"):
            loss = model(data)
        optim_wrapper.update_params(loss)
