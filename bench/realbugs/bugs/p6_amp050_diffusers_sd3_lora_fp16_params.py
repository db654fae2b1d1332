# origin: huggingface/diffusers | https://github.com/huggingface/diffusers/issues/9628 | examples/dreambooth/train_dreambooth_lora_sd3.py
# principle: 6
# expect: AMP050 line 14
# summary: with fp16 mixed precision the script moves the transformer to float16 and adds LoRA layers, but trains the LoRA parameters without casting them back to float32; the accelerator's scaler raises "Attempting to unscale FP16 gradients".
import torch
from accelerate import Accelerator
from peft import LoraConfig


def main(args, transformer, train_dataloader, compute_loss):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    transformer.requires_grad_(False)
    transformer.to(accelerator.device, dtype=weight_dtype)
    transformer.add_adapter(LoraConfig(r=args.rank, lora_alpha=args.rank, target_modules=["to_k", "to_q", "to_v", "to_out.0"]))
    params_to_optimize = [p for p in transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params_to_optimize, lr=args.learning_rate)
    transformer, optimizer, train_dataloader = accelerator.prepare(transformer, optimizer, train_dataloader)
    for batch in train_dataloader:
        with accelerator.accumulate(transformer):
            loss = compute_loss(transformer, batch)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
