"""Dense training code: a file made of nothing but training functions, as research repositories write them.

    python bench/dense_gen.py 3000 > dense_3000.py

Each unit is one training function (its own GradScaler, autocast region, scaled backward, unscale, clipping,
step, update, a scheduler and logging every few steps) and one evaluation function. The file keeps exactly one
bug, in the middle unit: its gradients are clipped before `scaler.unscale_` (AMP030, clipping scaled gradients),
so that a check has one finding to report and no more. `dense_training_file(lines)` is exactly `lines` lines
long (padded with constants after the last unit). Standard library only.
"""

from __future__ import annotations

import sys
import textwrap

HEADER = textwrap.dedent(
    """\
    import logging
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    logger = logging.getLogger(__name__)
    LOG_EVERY = 50

    """
)

# One unit: a training function and its evaluation function. `{clip_then_unscale}` is where the bug goes.
UNIT = textwrap.dedent(
    """\

    def train_{n}(model, loader, optimizer, scheduler, epochs={epochs}, max_norm=1.0):
        \"\"\"Train variant {n}: mixed precision with a gradient scaler, clipping and logging.\"\"\"
        scaler = torch.amp.GradScaler("cuda")
        model.train()
        for epoch in range(epochs):
            running = 0.0
            for step, (inputs, targets) in enumerate(loader):
                inputs, targets = inputs.cuda(non_blocking=True), targets.cuda(non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.float16):
                    outputs = model(inputs)
                    loss = F.cross_entropy(outputs, targets)
                scaler.scale(loss).backward()
    {clip_block}
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                running += loss.item()
                if step % LOG_EVERY == 0:
                    logger.info("train_{n} epoch %d step %d loss %.4f norm %.3f", epoch, step, loss.item(), float(norm))
            logger.info("train_{n} epoch %d mean loss %.4f", epoch, running / max(len(loader), 1))
        return model


    def evaluate_{n}(model, loader):
        \"\"\"Accuracy of variant {n} under autocast.\"\"\"
        model.eval()
        correct = total = 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            for inputs, targets in loader:
                outputs = model(inputs.cuda())
                correct += (outputs.argmax(-1) == targets.cuda()).sum().item()
                total += targets.numel()
        logger.info("evaluate_{n}: accuracy %.4f", correct / max(total, 1))
        return correct / max(total, 1)

    """
)

CLIP_GOOD = """\
            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"""
# The one bug: the gradients are clipped while they are still scaled (no `scaler.unscale_` before).
CLIP_BUG = """\
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"""

UNIT_LINES = UNIT.format(n=0, epochs=1, clip_block=CLIP_GOOD).count("\n")


def dense_training_file(lines: int, seed: int = 0) -> str:
    """A file of exactly `lines` lines (at least one unit's worth): units of training and evaluation code, the
    middle unit's clipping done on scaled gradients (the one bug)."""
    units = max(1, (lines - HEADER.count("\n")) // UNIT_LINES)
    buggy = units // 2
    parts = [HEADER]
    for index in range(units):
        n = seed * 10_000 + index
        clip = CLIP_BUG if index == buggy else CLIP_GOOD
        parts.append(UNIT.format(n=n, epochs=1 + index % 7, clip_block=clip))
    text = "".join(parts)
    padding = 0
    while text.count("\n") < lines:
        text += f"WARMUP_STEPS_{padding} = {padding * 10}\n"
        padding += 1
    return text


def units_in(text: str) -> int:
    """How many training functions a generated file holds."""
    return text.count("\ndef train_")


def line_of(text: str, needle: str, unit: int = None) -> int:
    """The 0-based line of the first `needle` (inside the `unit`-th training function when given)."""
    rows = text.split("\n")
    start = 0
    if unit is not None:
        start = next(i for i, row in enumerate(rows) if row.startswith(f"def train_{unit}("))
    return next(i for i in range(start, len(rows)) if needle in rows[i])


if __name__ == "__main__":
    sys.stdout.write(dense_training_file(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
