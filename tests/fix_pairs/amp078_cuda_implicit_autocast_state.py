"""AMP078: torch.is_autocast_enabled() without a device type asks about CUDA: inside
torch.autocast("cpu") it answers False (torch.is_autocast_enabled("cpu") answers True), so the script's
"cast when autocast is on" never casts. The fix writes the device the call already means, "cuda": the
answer stays False, now visibly so (choosing the tensor's device is left to the author); the numbers are
the same."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
scaler = torch.amp.GradScaler("cpu")
inside, cpu_inside, input_dtypes = [], [], []
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        inside.append(torch.is_autocast_enabled())
        cpu_inside.append(torch.is_autocast_enabled("cpu"))
        if inside[-1]:
            x = x.to(torch.get_autocast_dtype("cpu"))
        input_dtypes.append(x.dtype)
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(model.parameters(), start))
