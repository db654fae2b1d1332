"""README: trains a small CNN classifier on synthetic 1-channel images (cross-entropy loss, SGD with momentum).

A plain fp32 training script, one of the fixtures `amp-lint verify` converts to AMP and runs both ways.
Each class is a fixed random pattern; an image is its class pattern, randomly dimmed or brightened, plus
noise, and 10% of the labels are shuffled so the loss levels off above zero. VERIFY_SCALE (default 1) widens
the network and the batch for a GPU; AMP_LINT_VERIFY_DEVICE, when set, chooses the device.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

N_CLASSES = 10
IMAGE_SIZE = 16


def make_dataset(n_samples, generator):
    patterns = torch.randn(N_CLASSES, 1, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    labels = torch.randint(0, N_CLASSES, (n_samples,), generator=generator)
    contrast = 0.5 + torch.rand(n_samples, 1, 1, 1, generator=generator)
    noise = torch.randn(n_samples, 1, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    images = contrast * patterns[labels] + noise
    noisy = torch.rand(n_samples, generator=generator) < 0.1
    labels[noisy] = torch.randint(0, N_CLASSES, (int(noisy.sum()),), generator=generator)
    return TensorDataset(images, labels)


class SmallCNN(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * width * (IMAGE_SIZE // 4) ** 2, N_CLASSES)

    def forward(self, images):
        return self.classifier(self.features(images).flatten(1))


def train(model, loader, optimizer, device, epochs):
    criterion = nn.CrossEntropyLoss()
    model.train()
    for epoch in range(epochs):
        for step, (images, labels) in enumerate(loader):
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            logits = model(images)
            loss = criterion(logits, labels)
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")


def main():
    parser = argparse.ArgumentParser(description="Train a CNN on synthetic images.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    torch.manual_seed(0)
    scale = int(os.environ.get("VERIFY_SCALE", "1"))
    device = torch.device(os.environ.get("AMP_LINT_VERIFY_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))

    batch_size = 64 * scale
    dataset = make_dataset(128 * batch_size, torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(1))
    model = SmallCNN(width=16 * scale).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train(model, loader, optimizer, device, args.epochs)


if __name__ == "__main__":
    main()
