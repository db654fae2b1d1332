"""README: trains one network with two heads and two losses under one optimizer (SGD with momentum).

A plain fp32 training script, one of the fixtures `amp-lint verify` converts to AMP and runs both ways.
A shared trunk feeds a classification head (cross-entropy) and a regression head (smooth L1); each loss is
backpropagated on its own (the first with retain_graph=True) before a single optimizer step. VERIFY_SCALE
(default 1) widens the model and the batch for a GPU; AMP_LINT_VERIFY_DEVICE, when set, chooses the device.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

N_FEATURES = 24
N_CLASSES = 6


def make_dataset(n_samples, generator):
    x = torch.randn(n_samples, N_FEATURES, generator=generator)
    w_cls = torch.randn(N_FEATURES, N_CLASSES, generator=generator)
    w_reg = torch.randn(N_FEATURES, 2, generator=generator) / N_FEATURES**0.5
    logits = x @ w_cls + torch.randn(n_samples, N_CLASSES, generator=generator)
    labels = logits.argmax(dim=1)
    values = torch.cos(x @ w_reg) + 0.1 * torch.randn(n_samples, 2, generator=generator)
    return TensorDataset(x, labels, values)


class TwoHeadNet(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(N_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.LayerNorm(hidden)
        )
        self.classify = nn.Linear(hidden, N_CLASSES)
        self.regress = nn.Linear(hidden, 2)

    def forward(self, x):
        shared = self.trunk(x)
        return self.classify(shared), self.regress(shared)


def main():
    parser = argparse.ArgumentParser(description="Train a two-headed network with two losses.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.03)
    args = parser.parse_args()

    torch.manual_seed(0)
    scale = int(os.environ.get("VERIFY_SCALE", "1"))
    device = torch.device(os.environ.get("AMP_LINT_VERIFY_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))

    batch_size = 64 * scale
    loader = DataLoader(
        make_dataset(128 * batch_size, torch.Generator().manual_seed(0)),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(1),
    )
    model = TwoHeadNet(hidden=128 * scale).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    classification_loss = nn.CrossEntropyLoss()
    regression_loss = nn.SmoothL1Loss()

    for epoch in range(args.epochs):
        for x, labels, values in loader:
            x, labels, values = x.to(device), labels.to(device), values.to(device)
            optimizer.zero_grad()
            class_logits, predicted_values = model(x)
            loss_cls = classification_loss(class_logits, labels)
            loss_reg = regression_loss(predicted_values, values)
            loss_cls.backward(retain_graph=True)
            loss_reg.backward()
            optimizer.step()
        print(f"epoch {epoch}: classification {loss_cls.item():.4f} regression {loss_reg.item():.4f}")


if __name__ == "__main__":
    main()
