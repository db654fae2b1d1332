# origin: nerfstudio-project/nerfacc | https://github.com/nerfstudio-project/nerfacc/issues/307 | examples/train_ngp_nerf_prop.py
# principle: 5
# expect: AMP020 line 17
# summary: the example scales the loss with a GradScaler but then steps the optimizer directly, so the update uses gradients 1024x too large and nothing is ever unscaled.
import torch
import torch.nn.functional as F


def train(radiance_field, proposal_networks, optimizer, scheduler, dataset, max_steps):
    grad_scaler = torch.amp.GradScaler("cuda", init_scale=2**10)
    for step in range(max_steps):
        data = dataset[step % len(dataset)]
        rgb = radiance_field(data["rays"])
        loss = F.smooth_l1_loss(rgb, data["pixels"])
        optimizer.zero_grad()
        grad_scaler.scale(loss).backward()
        optimizer.step()
        scheduler.step()
