"""AMP091: FSDP with a plain GradScaler: each rank checks only its own shard for infs, so ranks can
disagree on skipping a step. Not shown here: one CPU process (gloo, world size 1) has no other rank to
disagree with; the fixed script (ShardedGradScaler) runs, in the documented order."""
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

rendezvous = tempfile.NamedTemporaryFile(suffix=".rendezvous", delete=False).name
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
torch.manual_seed(0)
model = FSDP(torch.nn.Linear(4, 1), device_id=torch.device("cpu"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
scaler = torch.amp.GradScaler("cpu")
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
dist.destroy_process_group()
