# origin: wenet-e2e/wenet | https://github.com/wenet-e2e/wenet/issues/2788 | wenet/utils/train_utils.py
# principle: 6
# expect: AMP092 line 10
# summary: batch_forward enters autocast around the model even when the train engine is DeepSpeed; DeepSpeed raises "torch.autocast is enabled outside DeepSpeed, but not in the DeepSpeed config".
import deepspeed
import torch


def batch_forward(model, batch, dtype):
    with torch.autocast("cuda", enabled=dtype is not None, dtype=dtype, cache_enabled=False):
        loss_dict = model(batch)
    return loss_dict


def train(model, configs, data_loader):
    model, optimizer, _, scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=configs["ds_config"])
    dtype = torch.bfloat16
    for batch in data_loader:
        loss_dict = batch_forward(model, batch, dtype)
        model.backward(loss_dict["loss"])
        model.step()
