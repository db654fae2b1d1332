# origin: facebookresearch/multimodal | https://github.com/facebookresearch/multimodal/pull/433 | -
# principle: 6
# expect: AMP012 line 15
# summary: an FSDP training script with a bfloat16 MixedPrecision policy still builds and drives a ShardedGradScaler, which bf16 does not need.
# upstream-fix: PR #433 (open) drops the scaler for bf16.
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


def train(model, loader, lr):
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16)
    model = FSDP(model, mixed_precision=mp)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = ShardedGradScaler()
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
