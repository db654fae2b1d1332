# origin: HorizonRobotics/alf | https://github.com/HorizonRobotics/alf/pull/1734 | alf/algorithms/algorithm.py
# principle: 6
# expect: AMP012 line 14
# summary: adding a bf16 option to AMP kept the GradScaler for every AMP dtype; the review asked to use it only for fp16.
# upstream-fix: the PR was changed to use GradScaler only for fp16 training.
import torch


class Algorithm:
    def __init__(self, optimizer, enable_amp=False, amp_dtype=torch.bfloat16):
        self._optimizer = optimizer
        self._enable_amp = enable_amp
        self._amp_dtype = amp_dtype
        self._grad_scaler = torch.amp.GradScaler("cuda") if enable_amp else None

    def update_with_gradient(self, loss_fn, batch):
        with torch.autocast("cuda", dtype=self._amp_dtype, enabled=self._enable_amp):
            loss = loss_fn(batch)
        if self._grad_scaler is not None:
            self._grad_scaler.scale(loss).backward()
            self._grad_scaler.step(self._optimizer)
            self._grad_scaler.update()
        else:
            loss.backward()
            self._optimizer.step()
        self._optimizer.zero_grad()
