# origin: Azure/MS-AMP | https://github.com/Azure/MS-AMP/pull/45 | examples/mnist.py
# principle: 5
# expect: AMP021 line 20
# summary: the MNIST example steps through the GradScaler but never calls scaler.update(); the second batch raises "step() has already been called since the last update()".
# upstream-fix: PR #45 adds scaler.update() after scaler.step(optimizer).
# fix-check: scaler\.step\(optimizer\)\n\s*scaler\.update\(\)
import torch
import torch.nn.functional as F


def train(args, model, device, train_loader, optimizer, epoch, scaler):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            output = model(data)
            loss = F.nll_loss(output, target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)


def main(args, model, device, train_loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, scaler)
