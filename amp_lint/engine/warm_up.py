"""One check of a small training program, made before the real ones, in a process that will check many
files: the caches each process makes at its first check (the analysis's per-node-type tables, the rules'
patterns, the prefilter's, the modules the analysis imports lazily) are made here, once. The language
server warms up so before its first document (`server.memory`); a big CLI run's zygote does before its
workers fork from it (`engine.zygote`), so that each worker does not make them again.

The check has no path: no project is indexed, and nothing it leaves behind is read by a later check.
"""

from __future__ import annotations

# The warm-up's program: the statements and expressions of a training script, so that the per-node-type
# caches of the analysis are made before the first document's check.
WARM_UP = """\
import math
from typing import Optional
import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate(model, loader, *, device: Optional[str] = None, **kw):
    total, seen = 0.0, 0
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16), torch.inference_mode():
            out = model(x.to(device, non_blocking=True))
        total += float((out.argmax(-1) == y).sum().item()) if out is not None else 0
        seen += len(y)
    return total / max(seen, 1)


class Trainer:
    scale: float = 2.0**16

    def __init__(self, model, optimizer, steps=10):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda", init_scale=self.scale)
        self.steps = [i for i in range(steps) if i % 2 == 0]
        self.names = {k: v for k, v in model.named_parameters()}

    async def step(self, batch, accumulate: int = 1):
        try:
            with torch.autocast(device_type="cuda"):
                loss = F.cross_entropy(*self.model(batch)) / accumulate
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"step failed: {error!r}") from error
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        while not math.isfinite(loss.item()):
            break
        del batch
        return lambda: {"loss": loss.detach(), **{"lr": self.optimizer.param_groups[0]["lr"]}}


if __name__ == "__main__":
    assert Trainer, "unreachable"
    print(evaluate(None, [], device="cpu") if True else None, [*range(3)], {1, 2} | {3}, not False)
"""

# Lines that only hold a comment take the program past the size where the prefilter's second step (its
# `ast` parse of the names the code reads) runs: that step is warmed up too.
_PADDING = "#\n" * 2_000


def check_warm_up() -> None:
    """Import the rules, LibCST and the checker, and check `WARM_UP` once with the default rules."""
    from amp_lint import rules as registry
    from amp_lint.engine.runner import CheckConfig, check_text

    config = CheckConfig(frozenset(registry.default_codes()), False, False, False, False)
    check_text(WARM_UP + _PADDING, "warm_up.py", config)
