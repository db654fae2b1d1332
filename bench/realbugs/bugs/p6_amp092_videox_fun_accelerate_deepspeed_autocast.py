# origin: aigc-apps/VideoX-Fun | https://github.com/aigc-apps/VideoX-Fun/issues/250 | scripts/wan2.1_fun/train.py
# principle: 6
# expect: AMP092 line 15
# summary: training through accelerate with a DeepSpeed ZeRO-2 plugin, the script still wraps the transformer forward in torch.cuda.amp.autocast; DeepSpeed rejects an autocast enabled outside its engine.
import torch
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin


def main(transformer, optimizer, train_dataloader, weight_dtype):
    accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    transformer, optimizer, train_dataloader = accelerator.prepare(transformer, optimizer, train_dataloader)
    for batch in train_dataloader:
        with accelerator.accumulate(transformer):
            with torch.cuda.amp.autocast(dtype=weight_dtype):
                noise_pred = transformer(batch["latents"], batch["timesteps"], batch["context"])
            loss = torch.nn.functional.mse_loss(noise_pred.float(), batch["target"].float())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
