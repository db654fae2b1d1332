# origin: hankyul2/pytorch-image-classification | code-search | pic/criterion/scaler.py
# principle: 7
# expect: none
# tempts: AMP040, AMP041, AMP043
# summary: a scaler wrapper backpropagates the scaled loss on every call and unscales, clips, steps, updates and zeroes only when the caller says update=True at the accumulation boundary.
import torch


class NativeScalerWithGradAccum:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, model_param, grad_norm=None, update=True):
        self._scaler.scale(loss).backward()
        if update:
            if grad_norm:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model_param, grad_norm)
            self._scaler.step(optimizer)
            self._scaler.update()
            optimizer.zero_grad()


def train_one_epoch(model, loader, optimizer, criterion, scaler, grad_accum, grad_norm):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = criterion(model(x), y) / grad_accum
        scaler(loss, optimizer, model.parameters(), grad_norm=grad_norm, update=(i + 1) % grad_accum == 0)
