# origin: espnet/espnet | https://github.com/espnet/espnet/pull/2362 | espnet2/train/trainer.py
# principle: 7
# expect: none
# tempts: AMP021, AMP024, AMP022
# summary: the fixed trainer: when the unscaled gradient norm is not finite the optimizer step is skipped, but scaler.update() still runs on every iteration (the inf checks were recorded by unscale_).
import logging

import torch


def train_one_epoch(model, optimizer, scheduler, iterator, scaler, grad_clip):
    for batch in iterator:
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = model(**batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=grad_clip)
        if not torch.isfinite(grad_norm):
            logging.warning(f"The grad norm is {grad_norm}. Skipping updating the model.")
            if scaler is not None:
                scaler.update()
        else:
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
        optimizer.zero_grad()
