"""README: trains a small MLP regressor on synthetic tabular data (MSE loss, Adam).

A plain fp32 training script, one of the fixtures `amp-lint verify` converts to AMP and runs both ways.
The data is generated here with a fixed seed; nothing is downloaded. VERIFY_SCALE (default 1) widens the
model and the batch for a GPU; AMP_LINT_VERIFY_DEVICE, when set, chooses the device.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_dataset(n_samples, n_features, generator):
    """A smooth non-linear target with a noise floor, so the loss falls quickly and then levels off."""
    x = torch.randn(n_samples, n_features, generator=generator)
    w = torch.randn(n_features, 1, generator=generator) / n_features**0.5
    y = torch.sin(2 * x @ w) + 0.5 * x[:, :1] ** 2 + 0.1 * torch.randn(n_samples, 1, generator=generator)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description="Train an MLP regressor on synthetic data.")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    scale = int(os.environ.get("VERIFY_SCALE", "1"))
    device = torch.device(os.environ.get("AMP_LINT_VERIFY_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))

    n_features, hidden, batch_size = 32, 128 * scale, 64 * scale
    dataset = make_dataset(32 * batch_size, n_features, torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(1))

    model = nn.Sequential(
        nn.Linear(n_features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    for epoch in range(args.epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            prediction = model(x)
            loss = loss_fn(prediction, y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
