# origin: huggingface/accelerate | code@06e0d75bd4884b2a598e5406a8f786b7a2999b83 | examples/by_feature/gradient_accumulation.py
# principle: 7
# expect: none
# tempts: AMP011, AMP043, AMP040, AMP093
# summary: with an Accelerator that may run fp16, micro-batches backpropagate through accelerator.backward under no_sync, and only the boundary step calls optimizer.step() then zero_grad().
from accelerate import Accelerator


def training_function(args, model, optimizer, train_dataloader, lr_scheduler, num_epochs):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(model, optimizer, train_dataloader, lr_scheduler)
    gradient_accumulation_steps = int(args.gradient_accumulation_steps)
    for epoch in range(num_epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            if step % gradient_accumulation_steps != 0:
                with accelerator.no_sync(model):
                    output = model(**batch)
                    loss = output.loss / gradient_accumulation_steps
                    accelerator.backward(loss)
            else:
                output = model(**batch)
                loss = output.loss / gradient_accumulation_steps
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
