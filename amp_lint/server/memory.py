"""The server's memory: a warm-up that makes the analysis's caches before the first document's check, and the
memory a check freed handed back to the system between checks (a long-lived process, unlike a CLI run).
Nothing here imports pygls."""

from __future__ import annotations

import logging

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



def warm_up() -> None:
    """Import the engine, the rules and LibCST, and check `WARM_UP` once."""
    try:
        from amp_lint import rules as registry
        from amp_lint.engine.runner import CheckConfig, check_text

        config = CheckConfig(frozenset(registry.default_codes()), False, False, False, False)
        check_text(WARM_UP, "warm_up.py", config)
        import linecache

        import amp_lint.fixes.text_edits  # noqa: F401  (code actions)

        # What the first checks cached for good (the fields of each LibCST node type, read from LibCST's
        # source) is in place; the source lines they were read from are not needed again. Caches made
        # now, not in the middle of a big file's check, do not pin the memory its tree leaves behind.
        linecache.clearcache()
        release_memory()
        # What is loaded now (modules, rules, LibCST's tables) lives as long as the server: out of the
        # collector's sight, a full collection while a document is checked does not walk it again.
        import gc

        gc.collect()
        gc.freeze()
    except Exception as error:  # the first real check will say what is wrong
        logging.getLogger("amp_lint.server").warning("warm-up failed: %s: %s", type(error).__name__, error)


def settle_step(checker, key: str) -> bool:
    """One step of `UnitChecker.settle`; the memory its checks freed handed back once it is done."""
    more = checker.settle(key)
    if not more:  # idle time: the verification's trees, cycles included, collected before the memory goes back
        import gc

        gc.collect()
        release_memory()
    return more


def release_memory() -> None:
    """Give the memory a check freed back to the system (glibc keeps it otherwise: a 3,000-line file's
    tree left the server at 140 MB instead of 75), and the `ast` tree the prefilter keeps for the next
    reader of the same text (7 MB for a 3,000-line file; a server's next check is of another text)."""
    from amp_lint.parse import python_ast

    python_ast.forget()
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            import ctypes

            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None
