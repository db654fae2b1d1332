# origin: speechbrain/speechbrain | https://github.com/speechbrain/speechbrain/issues/2881 | speechbrain/core.py
# principle: 1
# expect: AMP075 line 10,26
# summary: the Brain class builds its training context through a small autocast wrapper with device_type=self.device, and self.device is "cuda:0" from run options: RuntimeError "unsupported autocast device_type 'cuda:0'" since 1.0.3.
import torch


class TorchAutocast:
    def __init__(self, *args, **kwargs):
        self.autocast = torch.autocast(*args, **kwargs)

    def __enter__(self):
        return self.autocast.__enter__()

    def __exit__(self, *exc):
        return self.autocast.__exit__(*exc)


class Brain:
    def __init__(self, modules, opt_class, run_opts=None):
        run_opts = run_opts or {}
        self.device = run_opts.get("device", "cuda:0")
        self.modules = modules
        self.optimizer = opt_class(modules.parameters())
        self.scaler = torch.amp.GradScaler("cuda")
        self.training_ctx = TorchAutocast(device_type=self.device, dtype=torch.float16)

    def fit_batch(self, batch):
        with self.training_ctx:
            loss = self.modules(batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        return loss.detach()

    def fit(self, train_set, epochs):
        for _ in range(epochs):
            for batch in train_set:
                self.fit_batch(batch)
