# origin: huggingface/transformers | https://github.com/huggingface/transformers/pull/21428 | src/transformers/trainer.py
# principle: 6
# expect: AMP012 line 18
# summary: the trainer picks float16 or bfloat16 from the same args but turns gradient scaling on for both; bf16 needs no scaler.
# upstream-fix: PR #21428 sets do_grad_scaling only when amp_dtype is float16.
import torch


class Trainer:
    def __init__(self, model, optimizer, args):
        self.model = model
        self.optimizer = optimizer
        self.args = args
        self.use_cuda_amp = args.fp16 or args.bf16
        self.amp_dtype = torch.float16 if args.fp16 else torch.bfloat16
        self.do_grad_scaling = self.use_cuda_amp
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
