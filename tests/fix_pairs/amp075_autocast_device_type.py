"""AMP075: an autocast device_type with a device index ("cuda:0"): torch raises on it. Not shown on a machine
without CUDA, where the CUDA region is disabled either way; the fixed script runs, in the documented order."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu")
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cuda:0", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
