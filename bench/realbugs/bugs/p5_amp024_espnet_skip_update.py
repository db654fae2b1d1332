# origin: espnet/espnet | https://github.com/espnet/espnet/pull/2362 | espnet2/train/trainer.py
# principle: 5
# expect: AMP024|AMP021 line 17
# summary: when the clipped gradient norm is not finite, the trainer skips both the optimizer step and scaler.update(); the next unscale_ raises "unscale_() has already been called".
# upstream-fix: PR #2362 calls scaler.update() on every iteration, also when the step is skipped.
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
        else:
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
        optimizer.zero_grad()
