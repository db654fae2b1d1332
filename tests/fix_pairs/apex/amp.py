"""Fake `apex.amp` (see the package docstring). `initialize` warns with apex's DeprecatedFeatureWarning (real
apex issues it when `apex.amp` is imported; here on each `initialize`, since a module is imported once per
process) and gives the optimizer a dynamic loss scale of 2**16; `scale_loss` yields the loss times the scale
and, on exit, divides the optimizer's gradients by it (on inf/NaN it zeroes them and halves the scale, where
apex skips the step); `master_params` yields the optimizer's parameters (O1 keeps no separate master copy)."""
import contextlib
import warnings

import torch

from apex import DeprecatedFeatureWarning

_scales = {}


def initialize(model, optimizer, opt_level="O1"):
    warnings.warn(
        "apex.amp is deprecated and will be removed by the end of February 2023. "
        "Use [PyTorch AMP](https://pytorch.org/docs/stable/amp.html)",
        DeprecatedFeatureWarning,
    )
    _scales[id(optimizer)] = 2.0**16
    return model, optimizer


def master_params(optimizer):
    for group in optimizer.param_groups:
        yield from group["params"]


@contextlib.contextmanager
def scale_loss(loss, optimizer):
    scale = _scales[id(optimizer)]
    yield loss.float() * scale
    grads = [p.grad for p in master_params(optimizer) if p.grad is not None]
    finite = all(bool(torch.isfinite(g).all()) for g in grads)
    for g in grads:
        if finite:
            g.div_(scale)
        else:
            g.zero_()
    if not finite:
        _scales[id(optimizer)] = scale / 2
