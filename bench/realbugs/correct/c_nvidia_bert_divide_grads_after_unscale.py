# origin: NVIDIA/DeepLearningExamples | https://github.com/NVIDIA/DeepLearningExamples/issues/1112 | PyTorch/LanguageModeling/BERT/run_pretraining.py
# principle: 7
# expect: none
# tempts: AMP042, AMP030, AMP040
# summary: the loss is not divided by the accumulation steps; instead the summed gradients are divided after unscale_ at the optimizer step (the maintainer: the same in theory, more stable).
import torch


def take_optimizer_step(args, optimizer, grad_scaler, model):
    grad_scaler.unscale_(optimizer)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(args.gradient_accumulation_steps)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    grad_scaler.step(optimizer)
    grad_scaler.update()
    optimizer.zero_grad(set_to_none=True)


def train(args, model, optimizer, train_dataloader):
    grad_scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for step, batch in enumerate(train_dataloader):
        with torch.autocast("cuda", enabled=args.fp16):
            loss = model(**batch)
        grad_scaler.scale(loss).backward()
        if (step + 1) % args.gradient_accumulation_steps == 0:
            take_optimizer_step(args, optimizer, grad_scaler, model)
