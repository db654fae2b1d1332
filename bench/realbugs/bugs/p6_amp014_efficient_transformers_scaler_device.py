# origin: quic/efficient-transformers | https://github.com/quic/efficient-transformers/pull/345 | -
# also: https://github.com/quic/efficient-transformers/pull/343 (the first version of the change)
# principle: 6
# expect: AMP014 line 13
# summary: the fine-tuning loop builds GradScaler() with its default CUDA device while autocast follows the configured device, which may be the CPU.
# upstream-fix: PR #345 passes the device type to GradScaler so the CPU path gets a CPU scaler.
import torch
from torch.amp import GradScaler


def train(model, train_dataloader, optimizer, train_config):
    device = train_config.device
    scaler = GradScaler()
    for epoch in range(train_config.num_epochs):
        for batch in train_dataloader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.autocast(device_type=device, dtype=torch.float16):
                loss = model(**batch).loss
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
