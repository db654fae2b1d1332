# origin: huggingface/transformers | https://github.com/huggingface/transformers/pull/21428 | src/transformers/trainer.py
# principle: 7
# expect: none
# tempts: AMP012
# summary: after the fix the trainer picks float16 or bfloat16 from its arguments and turns gradient scaling on only when the AMP dtype is float16.
import torch


class Trainer:
    def __init__(self, model, optimizer, args):
        self.model = model
        self.optimizer = optimizer
        self.use_cuda_amp = args.fp16 or args.bf16
        self.amp_dtype = torch.float16 if args.fp16 else torch.bfloat16
        self.do_grad_scaling = self.use_cuda_amp and self.amp_dtype == torch.float16
        if self.do_grad_scaling:
            self.scaler = torch.amp.GradScaler("cuda")

    def training_step(self, inputs):
        with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.use_cuda_amp):
            loss = self.model(**inputs).loss
        if self.do_grad_scaling:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss.detach()

    def train(self, dataloader):
        for inputs in dataloader:
            self.training_step(inputs)
            if self.do_grad_scaling:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad()
