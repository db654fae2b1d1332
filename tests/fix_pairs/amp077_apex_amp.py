"""AMP077: NVIDIA apex.amp, deprecated ("apex.amp is deprecated and will be removed"). apex is not installed
here: `from apex import amp` imports the small fake in tests/fix_pairs/apex/, which mimics `amp.initialize`,
`amp.scale_loss` (dynamic loss scale 2**16, gradients unscaled on exit) and `amp.master_params`, and warns
with apex's DeprecatedFeatureWarning. The fixed script imports no apex and steps through a torch GradScaler,
in the documented order; the fix writes `GradScaler("cuda")` (apex is CUDA's), which on a machine without
CUDA disables itself, so there it trains in float32 and moves the model as far as the (unscaled) apex
gradients did."""
import torch
from apex import amp


def train(model, optimizer, data):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
        optimizer.step()


torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
train(model, optimizer, data)
moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(model.parameters(), start))
