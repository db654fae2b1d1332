# origin: huggingface/accelerate | https://github.com/huggingface/accelerate/issues/641 | -
# principle: 7
# expect: none
# tempts: AMP041, AMP024, AMP043
# summary: the maintainer's answer to "clip_grad_norm_ breaks accumulation": inside accelerator.accumulate(), clip only when accelerator.sync_gradients is true; the prepared optimizer's step and zero_grad are no-ops off the boundary.
from accelerate import Accelerator


def train_one_epoch(model, optimizer, lr_scheduler, dataloader, max_grad_norm, grad_accum):
    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=grad_accum)
    model, optimizer, dataloader, lr_scheduler = accelerator.prepare(model, optimizer, dataloader, lr_scheduler)
    for step, batch in enumerate(dataloader):
        with accelerator.accumulate(model):
            _, loss = model(**batch)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
