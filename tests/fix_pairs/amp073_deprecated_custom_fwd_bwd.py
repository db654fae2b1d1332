"""AMP073: torch.cuda.amp.custom_fwd / custom_bwd warn "`torch.cuda.amp.custom_fwd(args...)` is deprecated";
the fixed spelling behaves the same, without the warning."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]


class Scale(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        backward_autocast.append(torch.is_autocast_enabled("cpu"))
        return grad * 2


backward_autocast = []

scaler = torch.amp.GradScaler("cpu")
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(Scale.apply(model(x)).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
