"""README: trains a conditional GAN (pix2pix-style, on vectors) with two optimizers stepped in turn.

A plain fp32 training script, one of the fixtures `amp-lint verify` converts to AMP and runs both ways.
Written as a module-level loop. Each iteration steps the discriminator on real and generated pairs, then the
generator on the adversarial loss plus a weighted L1 loss to the target (the pix2pix recipe), so the
generator's loss falls clearly while the two networks compete. Both adversarial losses use
BCEWithLogitsLoss, which (unlike BCELoss) is safe under autocast. VERIFY_SCALE (default 1) widens the
networks and the batch for a GPU; AMP_LINT_VERIFY_DEVICE, when set, chooses the device.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser(description="Train a conditional GAN on synthetic vectors.")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--l1-weight", type=float, default=100.0)
args = parser.parse_args()

torch.manual_seed(0)
scale = int(os.environ.get("VERIFY_SCALE", "1"))
device = torch.device(os.environ.get("AMP_LINT_VERIFY_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))

dim, hidden, batch_size = 8, 128 * scale, 64 * scale
generator_rng = torch.Generator().manual_seed(0)
mixing = torch.randn(dim, dim, generator=generator_rng) / dim**0.5
conditions = torch.randn(32 * batch_size, dim, generator=generator_rng)
targets = 2 * torch.tanh(2 * conditions @ mixing) + 0.3 * torch.randn(len(conditions), dim, generator=generator_rng)
loader = DataLoader(
    TensorDataset(conditions, targets),
    batch_size=batch_size,
    shuffle=True,
    generator=torch.Generator().manual_seed(1),
)

generator = nn.Sequential(
    nn.Linear(dim, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, dim)
).to(device)
discriminator = nn.Sequential(
    nn.Linear(2 * dim, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, 1)
).to(device)
opt_g = torch.optim.Adam(generator.parameters(), lr=args.lr, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=args.lr, betas=(0.5, 0.999))
adversarial = nn.BCEWithLogitsLoss()
l1 = nn.L1Loss()

for epoch in range(args.epochs):
    for condition, target in loader:
        condition, target = condition.to(device), target.to(device)
        real_label = torch.ones(len(condition), 1, device=device)
        fake_label = torch.zeros(len(condition), 1, device=device)

        opt_d.zero_grad()
        fake = generator(condition)
        real_logits = discriminator(torch.cat([condition, target], dim=1))
        fake_logits = discriminator(torch.cat([condition, fake.detach()], dim=1))
        d_loss = 0.5 * (adversarial(real_logits, real_label) + adversarial(fake_logits, fake_label))
        d_loss.backward()
        opt_d.step()

        opt_g.zero_grad()
        fake_logits = discriminator(torch.cat([condition, fake], dim=1))
        g_loss = adversarial(fake_logits, real_label) + args.l1_weight * l1(fake, target)
        g_loss.backward()
        opt_g.step()
    print(f"epoch {epoch}: d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")
