# origin: pytorch/torchtitan | https://github.com/pytorch/torchtitan/pull/25 | -
# principle: 7
# expect: none
# tempts: AMP012, AMP010
# summary: the gradient scaler is enabled only when mixed-precision training uses float16 parameters; with the (default) bfloat16 setting it is a disabled pass-through.
import torch


def build_grad_scaler(mixed_precision_param):
    enable_grad_scaling = mixed_precision_param == "float16"
    return torch.amp.GradScaler("cuda", enabled=enable_grad_scaling)


def train(model, optimizer, data_loader, job_config):
    scaler = build_grad_scaler(job_config.training.mixed_precision_param)
    dtype = torch.float16 if job_config.training.mixed_precision_param == "float16" else torch.bfloat16
    for batch in data_loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=dtype):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
