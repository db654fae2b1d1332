# origin: Lightning-AI/pytorch-lightning | https://github.com/Lightning-AI/pytorch-lightning/pull/12915 | -
# principle: 7
# expect: none
# tempts: AMP012
# summary: after the fix the sharded precision plugin creates a ShardedGradScaler only for 16-bit precision; bf16 runs autocast without a scaler.
import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


class ShardedNativeMixedPrecisionPlugin:
    def __init__(self, precision, device="cuda"):
        self.precision = precision
        self.device = device
        self.scaler = ShardedGradScaler() if precision == 16 else None

    def run_step(self, model, optimizer, batch):
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        with torch.autocast(self.device, dtype=dtype):
            loss = model(batch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
