"""AMP033: `loss = scaler.scale(loss)` before logging: the logged losses are the true ones times the scale
(1024 here), while the gradients are the same; the fixed script logs the true loss and moves the model
exactly as far."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
logged = []
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    logged.append(loss.item())
moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(model.parameters(), start))
