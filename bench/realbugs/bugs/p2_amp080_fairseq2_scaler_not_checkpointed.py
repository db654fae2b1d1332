# origin: facebookresearch/fairseq2 | https://github.com/facebookresearch/fairseq2/issues/1346 | -
# principle: 2
# expect: AMP080 line 19
# summary: resuming fp16 training restored trainer and optimizer state but not the loss scaler's, and the first unscale_ after the restore found no scale.
import torch


class Trainer:
    def __init__(self, model, optimizer, checkpoint_manager):
        self.model = model
        self.optimizer = optimizer
        self.checkpoint_manager = checkpoint_manager
        self.loss_scaler = torch.amp.GradScaler("cuda", init_scale=128.0)
        self.step_nr = 0

    def restore(self):
        state = self.checkpoint_manager.load_last()
        self.step_nr = state["step_nr"]
        self.optimizer.load_state_dict(state["optimizer"])

    def run_step(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch)
        self.loss_scaler.scale(loss).backward()
        self.loss_scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.loss_scaler.step(self.optimizer)
        self.loss_scaler.update()
        self.optimizer.zero_grad()
        self.step_nr += 1
