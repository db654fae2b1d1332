"""AMP011: backward on the unscaled loss while GradScaler steps: step() finds nothing scaled this iteration
and raises "Attempted step but _scale is None" (were the scaler used elsewhere, it would divide gradients
that were never multiplied)."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
