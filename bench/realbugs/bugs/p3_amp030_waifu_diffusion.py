# origin: harubaru/waifu-diffusion | https://github.com/harubaru/waifu-diffusion/issues/64 | trainer/diffusers_trainer.py
# principle: 3
# expect: AMP030 line 19
# summary: with fp16 on, the diffusion trainer clips the UNet gradients while the GradScaler still has them scaled.
import torch
import torch.nn.functional as F


def main(args, unet, optimizer, lr_scheduler, train_dataloader, noise_fn):
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for epoch in range(args.epochs):
        unet.train()
        for batch in train_dataloader:
            with torch.autocast("cuda", enabled=args.fp16):
                noisy, noise, timesteps, encoder_hidden_states = noise_fn(batch)
                noise_pred = unet(noisy, timesteps, encoder_hidden_states).sample
                loss = F.mse_loss(noise_pred.float(), noise.float(), reduction="mean")
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            lr_scheduler.step()
            optimizer.zero_grad()
