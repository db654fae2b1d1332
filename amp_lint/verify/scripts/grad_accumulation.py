"""README: trains an MLP classifier with gradient accumulation and gradient clipping (Adam).

A plain fp32 training script, one of the fixtures `amp-lint verify` converts to AMP and runs both ways.
Written as a module-level loop: four micro-batches are accumulated per optimizer step (the loss is divided
by the accumulation count), and the gradient norm is clipped at each accumulation boundary. The data are
Gaussian blobs with 10% shuffled labels. VERIFY_SCALE (default 1) widens the model and the batch for a GPU;
AMP_LINT_VERIFY_DEVICE, when set, chooses the device.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser(description="Train an MLP classifier with gradient accumulation.")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--lr", type=float, default=2e-3)
parser.add_argument("--accum-steps", type=int, default=4)
parser.add_argument("--max-grad-norm", type=float, default=1.0)
args = parser.parse_args()

torch.manual_seed(0)
scale = int(os.environ.get("VERIFY_SCALE", "1"))
device = torch.device(os.environ.get("AMP_LINT_VERIFY_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))

n_features, n_classes = 16, 8
accum_steps = args.accum_steps
micro_batch_size = 16 * scale
generator = torch.Generator().manual_seed(0)
centers = 1.5 * torch.randn(n_classes, n_features, generator=generator)
labels = torch.randint(0, n_classes, (32 * accum_steps * micro_batch_size,), generator=generator)
features = centers[labels] + torch.randn(len(labels), n_features, generator=generator)
shuffled = torch.rand(len(labels), generator=generator) < 0.1
labels[shuffled] = torch.randint(0, n_classes, (int(shuffled.sum()),), generator=generator)
loader = DataLoader(
    TensorDataset(features, labels),
    batch_size=micro_batch_size,
    shuffle=True,
    generator=torch.Generator().manual_seed(1),
)

model = nn.Sequential(
    nn.Linear(n_features, 128 * scale),
    nn.GELU(),
    nn.Linear(128 * scale, 128 * scale),
    nn.GELU(),
    nn.Linear(128 * scale, n_classes),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
criterion = nn.CrossEntropyLoss()

optimizer.zero_grad()
for epoch in range(args.epochs):
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = criterion(logits, y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
    print(f"epoch {epoch}: loss {loss.item() * accum_steps:.4f}")
