# origin: milesial/Pytorch-UNet | https://github.com/milesial/Pytorch-UNet/issues/468 | train.py
# also: https://github.com/milesial/Pytorch-UNet/pull/470
# principle: 3
# expect: AMP030 line 22
# summary: the segmentation training loop clips the gradients straight after the scaled backward, before scaler.step.
# upstream-fix: PR #470 inserts grad_scaler.unscale_(optimizer) before the clip.
# fix-check: grad_scaler\.unscale_\(optimizer\)\n\s*torch\.nn\.utils\.clip_grad_norm_
import torch
import torch.nn.functional as F


def train_model(model, device, train_loader, optimizer, amp=False, gradient_clipping=1.0, epochs=5):
    grad_scaler = torch.amp.GradScaler("cuda", enabled=amp)
    for epoch in range(1, epochs + 1):
        model.train()
        for images, true_masks in train_loader:
            with torch.autocast(device.type if device.type != "mps" else "cpu", enabled=amp):
                masks_pred = model(images)
                loss = F.cross_entropy(masks_pred, true_masks)
            optimizer.zero_grad(set_to_none=True)
            grad_scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping)
            grad_scaler.step(optimizer)
            grad_scaler.update()
