# origin: microsoft/Swin-Transformer | https://github.com/microsoft/Swin-Transformer/issues/311 | main_simmim_pt.py
# principle: 4
# expect: AMP041|AMP024 line 19
# summary: with accumulation steps > 1 the SimMIM pre-training loop unscales (and clips) on every micro-batch, but steps only on the boundary; the second micro-batch raises "unscale_() has already been called".
import torch


def train_one_epoch(config, model, data_loader, optimizer, epoch, lr_scheduler, scaler):
    model.train()
    optimizer.zero_grad()
    num_steps = len(data_loader)
    for idx, (img, mask) in enumerate(data_loader):
        with torch.autocast("cuda", enabled=config.AMP_ENABLE):
            loss = model(img, mask)
        if config.TRAIN.ACCUMULATION_STEPS > 1:
            loss = loss / config.TRAIN.ACCUMULATION_STEPS
            scaler.scale(loss).backward()
            if config.TRAIN.CLIP_GRAD:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.TRAIN.CLIP_GRAD)
            if (idx + 1) % config.TRAIN.ACCUMULATION_STEPS == 0:
                scaler.step(optimizer)
                optimizer.zero_grad()
                scaler.update()
                lr_scheduler.step_update(epoch * num_steps + idx)
        else:
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            if config.TRAIN.CLIP_GRAD:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.TRAIN.CLIP_GRAD)
            scaler.step(optimizer)
            scaler.update()
            lr_scheduler.step_update(epoch * num_steps + idx)
