"""AMP013: a GradScaler built in the loop starts again from its initial scale every iteration: with
growth_interval=1 the scale should double each clean step (256 -> 4096 after four), but stays at 512."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
for x, y in data:
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=1)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
final_scale = scaler.get_scale()
