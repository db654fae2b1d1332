"""AMP900: a `# noqa: AMP021` (missing update) left on `scaler.step` after the update was added: it
suppresses nothing. A hygiene rule, no bug to show: the fix removes the comment, and the script runs
unchanged, same numbers, in the documented order."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu")
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # noqa: AMP021
    scaler.update()
moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(model.parameters(), start))
