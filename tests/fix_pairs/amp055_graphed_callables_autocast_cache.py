"""AMP055: torch.cuda.make_graphed_callables under a CUDA autocast that keeps its cast cache raises
"make_graphed_callables does not support the autocast caching". CUDA-only: on a machine without CUDA the
graph capture is skipped (the `if`), so the bug is not shown; the fixed script (cache_enabled=False) runs,
in the documented order. With CUDA the model is graphed and trained on the GPU."""
import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4, device=device), torch.randn(8, 1, device=device)) for _ in range(4)]
if device == "cuda":
    with torch.autocast("cuda", dtype=torch.float16):
        model = torch.cuda.make_graphed_callables(model, (data[0][0],))
scaler = torch.amp.GradScaler(device)
for x, y in data:
    optimizer.zero_grad()
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
