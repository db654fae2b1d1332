# origin: NovaSky-AI/SkyRL | https://github.com/NovaSky-AI/SkyRL/pull/212 | skyrl-train/skyrl_train/distributed/deepspeed_strategy.py
# principle: 7
# expect: none
# tempts: AMP092
# summary: the PR replaces torch.autocast with a strategy.autocast() that returns a null context under DeepSpeed (which handles bf16 itself) and a real autocast for the other strategies.
import contextlib

import deepspeed
import torch


class DeepspeedStrategy:
    def autocast(self):
        return contextlib.nullcontext()

    def setup(self, model, ds_config):
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        return engine


class FSDPStrategy:
    def autocast(self):
        return torch.autocast("cuda", dtype=torch.bfloat16)


def train(strategy, model_engine, dataloader):
    for batch in dataloader:
        with strategy.autocast():
            action_log_probs = model_engine(batch["sequences"], batch["attention_mask"])
            loss = -(action_log_probs * batch["advantages"]).mean()
        model_engine.backward(loss)
        model_engine.step()
