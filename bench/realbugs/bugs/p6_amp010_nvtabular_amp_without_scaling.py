# origin: NVIDIA-Merlin/NVTabular | https://github.com/NVIDIA-Merlin/NVTabular/pull/815 | nvtabular/framework_utils/torch/utils.py
# principle: 6
# expect: AMP010 line 13,18
# summary: the epoch helper runs the forward under CUDA autocast when amp is on but backpropagates the unscaled loss and steps directly; the example produced NaNs.
# upstream-fix: PR #815 (closed) scales the loss with a GradScaler when amp is used.
import torch


def process_epoch(dataloader, model, train=False, optimizer=None, loss_func=torch.nn.MSELoss(), amp=True):
    model.train(mode=train)
    with torch.set_grad_enabled(train):
        for x_cat, x_cont, y in dataloader:
            with torch.autocast("cuda", enabled=amp):
                y_pred = model(x_cat, x_cont)
                loss = loss_func(y_pred, y)
            if train:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
