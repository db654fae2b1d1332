# origin: h2oai/h2o-llmstudio | https://github.com/h2oai/h2o-llmstudio/pull/1063 | llm_studio/train.py
# principle: 7
# expect: none
# tempts: AMP092
# summary: after the fix the forward-pass autocast is disabled whenever the model is a DeepSpeed engine, which does its own mixed precision; without DeepSpeed the same code runs under autocast with a GradScaler.
import deepspeed
import torch


def run_train(cfg, model, train_dataloader, ds_config, optimizer):
    use_deepspeed = cfg.environment.use_deepspeed
    scaler = None
    if use_deepspeed:
        model, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    elif cfg.environment.mixed_precision:
        scaler = torch.amp.GradScaler("cuda")
    for data in train_dataloader:
        with torch.autocast("cuda", enabled=cfg.environment.mixed_precision and not use_deepspeed):
            output_dict = model.forward(data)
        loss = output_dict["loss"]
        if use_deepspeed:
            model.backward(loss)
            model.step()
        elif scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        else:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
