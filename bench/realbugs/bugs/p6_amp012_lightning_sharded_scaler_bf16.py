# origin: Lightning-AI/pytorch-lightning | https://github.com/Lightning-AI/pytorch-lightning/pull/12915 | -
# also: issue #12914 (closed by the PR)
# principle: 6
# expect: AMP012 line 15
# summary: the sharded precision plugin was given a ShardedGradScaler for "bf16" as well as 16-bit precision; bf16 needs no scaler.
# upstream-fix: PR #12915 sets the ShardedGradScaler only for FP16.
import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


class ShardedNativeMixedPrecisionPlugin:
    def __init__(self, precision, device="cuda"):
        self.precision = precision
        self.device = device
        self.scaler = ShardedGradScaler() if precision in (16, "bf16") else None

    def autocast_context_manager(self):
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device, dtype=dtype)

    def run_step(self, model, optimizer, batch):
        with self.autocast_context_manager():
            loss = model(batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad()
