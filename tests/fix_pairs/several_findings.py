"""Several findings in one loop, for the composition test: AMP013 (scaler built in the loop), AMP001
(backward inside autocast), two AMP030 (two clips on scaled gradients, each wanting `unscale_` first) and
AMP031 (error_if_nonfinite). Any subset of them fixed gives a script that runs."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = [(torch.randn(16, 4), torch.randn(16, 1)) for _ in range(4)]

for x, y in data:
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model[0].parameters(), 1.0, error_if_nonfinite=True)
    torch.nn.utils.clip_grad_norm_(model[2].parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
