# origin: pytorch/pytorch | https://github.com/pytorch/pytorch/issues/40907 | -
# principle: 3
# expect: AMP030 line 20
# summary: a user's MNIST script (reported upstream) clips with clip_grad_norm_(model.parameters(), 12) right after the scaled backward; the loss stopped decreasing.
import torch
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_


def train(args, model, device, train_loader, optimizer, epoch):
    scaler = torch.amp.GradScaler("cuda")
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            output = model(data)
            loss = F.nll_loss(output, target)
        scaler.scale(loss).backward()
        clip_grad_norm_(model.parameters(), 12)
        scaler.step(optimizer)
        scaler.update()
