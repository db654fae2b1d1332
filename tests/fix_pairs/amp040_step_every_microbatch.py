"""AMP040: in a gradient-accumulation loop, scaler.step() on every micro-batch: four optimizer steps where
two were meant (accumulating two micro-batches each)."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
accum = 2
scaler = torch.amp.GradScaler("cpu")
for i, (x, y) in enumerate(data):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y) / accum
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if (i + 1) % accum == 0:
        optimizer.zero_grad()
