"""AMP079: `torch.cuda.amp.grad_scaler.OptState` is a private name that torch keeps only for backward
compatibility (torch/cuda/amp/grad_scaler.py re-exports torch.amp's). No error to show on torch 2.13, which
still carries the shim: the fix imports it from `torch.amp.grad_scaler`, the same object, and the script
reads the scaler's per-optimizer stage exactly as before, same numbers, in the documented order."""
import torch
from torch.cuda.amp.grad_scaler import OptState

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu")
stages = []
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    stages.append(scaler._per_optimizer_states[id(optimizer)]["stage"] is OptState.STEPPED)
    scaler.update()
moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(model.parameters(), start))
