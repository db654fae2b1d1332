# origin: yoshitomo-matsubara/torchdistill | https://github.com/yoshitomo-matsubara/torchdistill/pull/248 | -
# principle: 6
# expect: AMP077 line 16
# summary: the distillation box supports mixed precision through apex.amp, which PyTorch superseded with torch.amp.
# upstream-fix: PR #248 removes apex.
from apex import amp


class DistillationBox:
    def __init__(self, teacher, student, optimizer, apex_opt_level=None):
        self.teacher = teacher
        self.student = student
        self.optimizer = optimizer
        self.apex = apex_opt_level is not None
        if self.apex:
            self.student, self.optimizer = amp.initialize(self.student, self.optimizer, opt_level=apex_opt_level)

    def update_params(self, loss):
        self.optimizer.zero_grad()
        if self.apex:
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        self.optimizer.step()
