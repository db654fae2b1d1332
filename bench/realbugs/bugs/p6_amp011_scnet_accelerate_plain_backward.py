# origin: starrytong/SCNet | https://github.com/starrytong/SCNet/issues/7 | scnet/solver.py
# principle: 6
# expect: AMP011 line 20
# summary: with fp16 chosen in the accelerate config, the solver calls loss.backward() on the unscaled loss and then the prepared optimizer's step: "Attempted step but _scale is None".
# upstream-fix: the maintainer added a separate branch for FP16 training.
from accelerate import Accelerator


class Solver:
    def __init__(self, model, optimizer, loader, loss_fn):
        self.accelerator = Accelerator()
        self.model, self.optimizer, self.loader = self.accelerator.prepare(model, optimizer, loader)
        self.loss_fn = loss_fn

    def _run_one_epoch(self):
        for sources, mix in self.loader:
            estimate = self.model(mix)
            loss = self.loss_fn(estimate, sources)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
