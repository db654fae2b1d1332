"""AMP053: a nested `autocast(enabled=False)` for the wrong device leaves the outer (CPU) autocast on: the
head meant to run in float32 runs in float16."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
head = torch.nn.Linear(1, 1)
optimizer.add_param_group({"params": head.parameters()})
scaler = torch.amp.GradScaler("cpu")
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        h = model(x)
        with torch.autocast("cuda", enabled=False):
            out = head(h.float())
        loss = torch.nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
head_dtype = out.dtype
