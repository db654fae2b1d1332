# origin: h2oai/h2o-llmstudio | https://github.com/h2oai/h2o-llmstudio/pull/1063 | llm_studio/train.py
# also: closes issue #945 of the same repository (as stated in the PR)
# principle: 6
# expect: AMP092 line 14
# summary: the training loop wraps the forward pass in torch.autocast also when the model is a DeepSpeed engine, which handles mixed precision through its own config; DeepSpeed 0.17 asserts on the nested autocast.
# upstream-fix: PR #1063 disables the forward-pass autocast when DeepSpeed is used, as the backward and eval paths already did.
import deepspeed
import torch


def run_train(cfg, model, train_dataloader, ds_config):
    model, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    for data in train_dataloader:
        with torch.autocast("cuda", enabled=cfg.environment.mixed_precision, dtype=torch.bfloat16):
            output_dict = model.forward(data)
        loss = output_dict["loss"]
        model.backward(loss)
        model.step()
