"""Runs a fix pair's script in this process with GradScaler's calls recorded.

`recording()` installs a GradScaler subclass as `torch.amp.GradScaler` that notes every `scale`,
`unscale_(optimizer)`, `step(optimizer)` and `update()`, and notes each `backward()`, each clip
(`torch.nn.utils.clip_grad_norm_` / `clip_grad_value_`) and each optimizer step that does not come through
`scaler.step`. `documented_order(events)` checks them against GradScaler's documented order, iteration by
iteration: scale, backward, unscale_ before any clip, one step per optimizer, one update.
"""

from __future__ import annotations

import contextlib
import runpy
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import torch


@dataclass
class Recorder:
    events: List[Tuple[str, int]] = field(default_factory=list)  # (what, id of the optimizer or 0)
    inside_scaler_step: int = 0
    caught: List[warnings.WarningMessage] = field(default_factory=list)

    def note(self, what: str, optimizer=None) -> None:
        self.events.append((what, id(optimizer) if optimizer is not None else 0))

    def names(self) -> List[str]:
        return [what for what, _ in self.events]


@contextlib.contextmanager
def recording():
    recorder = Recorder()
    original = torch.amp.GradScaler

    class Recording:
        """Notes the scaler's calls; mixed into GradScaler and FSDP's ShardedGradScaler."""

        def scale(self, outputs):
            recorder.note("scale")
            return super().scale(outputs)

        def unscale_(self, optimizer):
            if not recorder.inside_scaler_step:  # step() unscales by itself when the loop did not
                recorder.note("unscale_", optimizer)
            return super().unscale_(optimizer)

        def step(self, optimizer, *args, **kwargs):
            recorder.note("step", optimizer)
            recorder.inside_scaler_step += 1
            try:
                return super().step(optimizer, *args, **kwargs)
            finally:
                recorder.inside_scaler_step -= 1

        def update(self, new_scale=None):
            recorder.note("update")
            return super().update(new_scale)

    RecordingGradScaler = type("GradScaler", (Recording, original), {})
    from torch.distributed.fsdp import sharded_grad_scaler

    sharded = sharded_grad_scaler.ShardedGradScaler
    sharded_grad_scaler.ShardedGradScaler = type("ShardedGradScaler", (Recording, sharded), {})

    backward = torch.Tensor.backward

    def recorded_backward(self, *args, **kwargs):
        recorder.note("backward")
        return backward(self, *args, **kwargs)

    def recorded_clip(function):
        def clip(*args, **kwargs):
            recorder.note("clip")
            return function(*args, **kwargs)

        return clip

    def optimizer_step(optimizer, args, kwargs):
        if not recorder.inside_scaler_step:
            recorder.note("optimizer.step", optimizer)

    utils = torch.nn.utils
    saved = (utils.clip_grad_norm_, utils.clip_grad_value_)
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    hook = register_optimizer_step_pre_hook(optimizer_step)
    torch.amp.GradScaler = RecordingGradScaler
    torch.Tensor.backward = recorded_backward
    utils.clip_grad_norm_, utils.clip_grad_value_ = recorded_clip(saved[0]), recorded_clip(saved[1])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield recorder
            recorder.caught = list(caught)
    finally:
        torch.amp.GradScaler = original
        sharded_grad_scaler.ShardedGradScaler = sharded
        torch.Tensor.backward = backward
        utils.clip_grad_norm_, utils.clip_grad_value_ = saved
        hook.remove()


def run_script(path: Path) -> Tuple[Dict[str, object], Recorder]:
    """Run `path` as `__main__` under `recording()`: its globals and what was recorded."""
    with recording() as recorder:
        names = runpy.run_path(str(path), run_name="__main__")
    return names, recorder


def iterations(events: List[Tuple[str, int]]) -> List[List[Tuple[str, int]]]:
    """The events cut after each `update()`; what follows the last one is its own (unfinished) part."""
    parts: List[List[Tuple[str, int]]] = [[]]
    for event in events:
        parts[-1].append(event)
        if event[0] == "update":
            parts.append([])
    return [part for part in parts if part]


def documented_order(events: List[Tuple[str, int]]) -> List[str]:
    """What breaks GradScaler's documented order, iteration by iteration (empty: nothing)."""
    problems = []
    parts = iterations(events)
    for number, part in enumerate(parts, 1):
        names = [what for what, _ in part]
        where = f"iteration {number} ({' '.join(names)})"
        if names[-1] != "update":
            problems.append(f"{where}: does not end with update()")
        if "optimizer.step" in names:
            problems.append(f"{where}: an optimizer steps outside scaler.step()")
        if "scale" not in names or "backward" not in names:
            problems.append(f"{where}: no scaled backward")
        elif names.index("backward") < names.index("scale"):
            problems.append(f"{where}: backward before scale")
        steps = [opt for what, opt in part if what == "step"]
        if not steps:
            problems.append(f"{where}: no scaler.step()")
        if len(steps) != len(set(steps)):
            problems.append(f"{where}: an optimizer stepped twice")
        unscaled = set()
        stepped = set()
        backward_after_unscale = False
        for what, opt in part:
            if what == "unscale_":
                if opt in unscaled or opt in stepped:
                    problems.append(f"{where}: unscale_ twice, or after step")
                unscaled.add(opt)
            elif what == "clip" and not unscaled:
                problems.append(f"{where}: clip before unscale_")
            elif what == "step":
                stepped.add(opt)
            elif what in ("backward", "scale") and unscaled:
                backward_after_unscale = True
        if backward_after_unscale:
            problems.append(f"{where}: a backward after unscale_")
    return problems
