# origin: huggingface/diffusers | https://github.com/huggingface/diffusers/issues/8960 | docs/source/en/tutorials/basic_training.md
# principle: 4
# expect: AMP041 line 20
# summary: the tutorial loop (Accelerator with fp16 mixed precision) clips with accelerator.clip_grad_norm_ on every micro-batch inside accelerator.accumulate(); with gradient_accumulation_steps > 1 the second micro-batch raises "unscale_() has already been called".
import torch.nn.functional as F
from accelerate import Accelerator


def train_loop(config, model, noise_scheduler, optimizer, train_dataloader, lr_scheduler, sample_noise):
    accelerator = Accelerator(mixed_precision=config.mixed_precision, gradient_accumulation_steps=config.gradient_accumulation_steps)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(model, optimizer, train_dataloader, lr_scheduler)
    for epoch in range(config.num_epochs):
        for batch in train_dataloader:
            clean_images = batch["images"]
            noise, timesteps, noisy_images = sample_noise(clean_images, noise_scheduler)
            with accelerator.accumulate(model):
                noise_pred = model(noisy_images, timesteps, return_dict=False)[0]
                loss = F.mse_loss(noise_pred, noise)
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
