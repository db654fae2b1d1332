# origin: NovaSky-AI/SkyRL | https://github.com/NovaSky-AI/SkyRL/pull/212 | skyrl-train/skyrl_train/distributed/deepspeed_strategy.py
# principle: 6
# expect: AMP092 line 13
# summary: the policy forward runs a DeepSpeed (bf16) engine inside an outer torch.autocast; autocast expects fp32 parameters and DeepSpeed >= 0.17.2 refuses an autocast enabled outside the engine.
# upstream-fix: PR #212 (open) replaces torch.autocast with a strategy.autocast that is a no-op under DeepSpeed.
import deepspeed
import torch


def train(model, ds_config, dataloader):
    model_engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    for batch in dataloader:
        with torch.autocast(dtype=torch.bfloat16, device_type="cuda"):
            action_log_probs = model_engine(batch["sequences"], batch["attention_mask"])
            loss = -(action_log_probs * batch["advantages"]).mean()
        model_engine.backward(loss)
        model_engine.step()
