"""AMP034: `loss = scaler.scale(loss)` and then `scaler.scale(loss).backward()`: the gradients are the true ones
times the scale squared (1024 * 1024 here) and `step()` divides by the scale once. The float16 backward
overflows, so the scaler skips steps and backs off (1024 -> 128 here), and the step it takes is still 128
times too large: the model moves over 10 times as far as the fixed script's, which keeps its scale."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss = scaler.scale(loss)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(model.parameters(), start))
final_scale = scaler.get_scale()
