"""AMP054: `autocast("cpu", True)` passes True as the dtype: entering the region raises "set_autocast_dtype():
argument 'dtype' (position 2) must be torch.dtype, not bool". The fix passes it as `enabled`: CPU autocast
in its default bfloat16, which needs no GradScaler (so this loop has none)."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
for x, y in data:
    optimizer.zero_grad()
    with torch.amp.autocast("cpu", True):
        out = model(x)
        loss_dtype = out.dtype
        loss = torch.nn.functional.mse_loss(out.float(), y)
    loss.backward()
    optimizer.step()
