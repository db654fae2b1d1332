"""The child-process side of ``amp-lint verify``: run one training script as written and record how it trains.

    python -m amp_lint.verify.bootstrap --script PATH [--origin ORIGINAL] [--module NAME=PATH ...] --seeds 0,1,2 \
        --steps N --warmup W --out RESULT.json -- [script args]

The script runs once per seed, as ``python ORIGINAL args`` would run it from ORIGINAL's folder: the working
directory is that folder, ``__file__`` and ``sys.path[0]`` point at the original (scripts that read data next to
``__file__`` find it), and the code executed is PATH's (the AMP version). ``--module NAME=PATH`` makes ``import
NAME`` load PATH's code in place of the local module of that name (the converted modules of a package the entry
script imports), again with the original's ``__file__``. Nothing else is edited: the fp32 original and its AMP
conversion are measured by the same means. The bootstrap wraps the few torch entry points every step passes through:

* ``torch.autograd.backward`` (which ``Tensor.backward`` calls) records each scalar tensor backpropagated (the
  loss), and ``torch.autograd.grad`` each scalar output it differentiates (not a gradient penalty's
  ``create_graph=True`` call);
* ``torch.amp.GradScaler.scale`` records the *unscaled* loss and marks the scaled tensor it returns, so the
  ``backward`` wrapper does not record that one a second time;
* a global optimizer step post-hook (``register_optimizer_step_post_hook``) counts optimizer steps, and
  ``GradScaler.step`` is wrapped so that a step the scaler skipped (it never calls ``optimizer.step()`` when the
  gradients hold inf/NaN) still counts;
* ``GradScaler.update`` compares the scale before and after: a scale that went down means the step was skipped;
* ``GradScaler.__init__`` counts the scalers built, and the optimizer hook the distinct optimizers stepped (a
  scaler re-created every epoch shows as more scalers than optimizers);
* ``torch.amp.autocast.__enter__`` records the device type, dtype and ``enabled`` flag autocast really ran with;
* ``warnings.showwarning`` keeps every warning containing "Disabling": autocast and GradScaler say so when they
  switch themselves off (an unsupported dtype, ``GradScaler("cuda")`` without CUDA), leaving an fp32 run behind.

A *training step* is one round of every optimizer the script steps: one ``optimizer.step()`` for a plain loop, one
``opt_d`` plus one ``opt_g`` step for a GAN. The round is learnt from the order of the first steps: it is complete
when the optimizer that stepped first steps again. The loss recorded for a training step is the **sum of the losses
backpropagated in it**: both losses of a two-loss step, the discriminator's plus the generator's loss of a GAN step,
and the micro-batch losses of an accumulation step (which, divided by the accumulation count as usual, add up to
their mean). After ``--steps`` training steps the script is stopped by an exception derived from BaseException, so
``except Exception`` in the script cannot swallow it.

Before each run the bootstrap seeds ``random``, numpy (when installed) and torch with the run's seed, and offsets
the script's own seeding by it (``torch.manual_seed(1)`` in the script seeds ``1 + seed``): seed 0 runs the script
exactly as written, other seeds give the seed-to-seed spread the runner judges against. It also turns on
``torch.use_deterministic_algorithms(True, warn_only=True)`` (the runner sets ``CUBLAS_WORKSPACE_CONFIG``), so the
fp32 and AMP runs of one seed differ only by what the conversion changed.

Losses are kept as tensors and read once at the end, so recording them adds no device synchronisation (reading the
scale in ``GradScaler.update`` adds one per step, where ``GradScaler.step`` already waits for its inf check); on
CUDA the device is synchronised for the timing only at the end of step W and of the last step.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import runpy
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from amp_lint.verify.launch import restore_seeders, run_script, script_site, seed_everything

#: Prefix of the progress lines written to stderr; the runner relays them and keeps the rest as script output.
PROGRESS_PREFIX = "[amp-lint verify] step "

#: Attribute set on the tensor ``GradScaler.scale`` returns, so its ``backward()`` is not recorded twice.
_SCALED_MARK = "_amp_lint_verify_scaled"

#: How many trailing traceback lines a crash report keeps.
_TRACEBACK_TAIL_LINES = 15


@dataclass
class RunRecord:
    """What one run of a training script did: the contents of RESULT.json, written here and read by the runner."""

    status: str
    """``"ok"`` or ``"crashed"``."""
    losses: list[float | None] = field(default_factory=list)
    """The loss of each training step; ``None`` where it was not finite (JSON has no NaN) or none was recorded."""
    loss_parts: list[list[float | None]] = field(default_factory=list)
    """Each loss backpropagated in each training step, in order (a GAN step: the discriminator's, the generator's);
    ``losses`` holds their sums. ``None`` where a loss was not finite."""
    skipped_steps: list[int] = field(default_factory=list)
    """0-based indices of the training steps the GradScaler skipped."""
    optimizer_steps: int = 0
    """``optimizer.step()`` calls, plus those a GradScaler skipped."""
    reached_step_limit: bool = False
    """True when the run was stopped at ``--steps``, False when the script ended (or crashed) before."""
    seconds_per_step: float | None = None
    """Wall-clock time per training step after the warm-up steps; None with too few steps."""
    peak_memory_bytes: int | None = None
    memory_source: str = ""
    """``"cuda max_memory_allocated"`` or ``"peak RSS"``: CPU numbers include the Python and torch baseline."""
    device: str | None = None
    """The device of the parameters the first optimizer stepped."""
    seed: int = 0
    step_seconds: list[float] = field(default_factory=list)
    """The wall-clock duration of each training step after the warm-up (the speed-up's timed windows)."""
    autocast: list[dict[str, Any]] = field(default_factory=list)
    """Each distinct autocast configuration entered: ``device_type``, ``dtype``, ``enabled``."""
    grad_scalers: int = 0
    """``torch.amp.GradScaler`` objects built during the run (a converted run builds one per optimizer at most)."""
    optimizers: int = 0
    """Distinct optimizers stepped during the run."""
    disabling_warnings: list[str] = field(default_factory=list)
    disabling_sites: list[dict[str, Any] | None] = field(default_factory=list)
    """Where each disabling warning was triggered in the script (``file``, ``line``, ``code``), or None."""
    double_scaled: dict[str, Any] | None = None
    """Where ``GradScaler.scale`` was first given a tensor it had itself returned (a loss scaled twice)."""
    guard: list[dict[str, Any]] = field(default_factory=list)
    """The runtime guard's breaches (``--guard``): rule, message, file, line, count."""
    error: dict[str, Any] | None = None
    """For a crash: ``type``, ``message`` and ``traceback_tail`` (list of lines)."""

    def write(self, path: str | os.PathLike[str]) -> None:
        write_records([self], path)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunRecord:
        return read_records(path)[0]


def write_records(records: list[RunRecord], path: str | os.PathLike[str]) -> None:
    """One JSON file with one record per seed."""
    data = [asdict(record) for record in records]
    Path(path).write_text(json.dumps(data, indent=1, allow_nan=False), encoding="utf-8")


def read_records(path: str | os.PathLike[str]) -> list[RunRecord]:
    return [RunRecord(**entry) for entry in json.loads(Path(path).read_text(encoding="utf-8"))]


class _StopTraining(BaseException):
    """Raised from the optimizer hook after ``--steps`` training steps; BaseException so scripts don't catch it."""


class TrainingRecorder:
    """Groups optimizer steps into training steps and keeps, per step, the losses, the time and the skip flag."""

    def __init__(self, torch: Any, *, steps: int, warmup: int) -> None:
        self._torch = torch
        self._step_limit = steps
        self._warmup = warmup
        self._progress_every = max(1, steps // 10)
        self._pending_losses: list[Any] = []  # backpropagated since the last optimizer step
        self._round: int | None = None  # optimizer steps per training step, once learnt
        self._open_optimizers: list[Any] = []  # optimizers stepped in the training step in progress
        self._open_losses: list[Any] = []
        self._step_losses: list[list[Any]] = []  # closed training steps
        self._step_times: list[float] = []
        self._optimizers_seen: list[Any] = []
        self.record = RunRecord(status="ok")

    # -- events from the hooks ---------------------------------------------------------------------------------

    def on_loss(self, loss: Any) -> None:
        self._pending_losses.append(loss.detach().to(self._torch.float32, copy=True))

    def on_optimizer_step(self, optimizer: Any) -> None:
        self.record.optimizer_steps += 1
        if not any(seen is optimizer for seen in self._optimizers_seen):
            self._optimizers_seen.append(optimizer)
            self.record.optimizers = len(self._optimizers_seen)
        if self.record.device is None:
            self.record.device = _parameter_device(optimizer)
        if self._round is None and self._open_optimizers and optimizer is self._open_optimizers[0]:
            self._round = len(self._open_optimizers)
            self._close_step()
        self._open_optimizers.append(optimizer)
        self._open_losses += self._pending_losses
        self._pending_losses = []
        if self._round is not None and len(self._open_optimizers) == self._round:
            self._close_step()

    def on_scale_backoff(self) -> None:
        """The GradScaler lowered its scale: the training step holding the last optimizer step was skipped."""
        index = len(self._step_losses) - (0 if self._open_optimizers else 1)
        if index >= 0 and index not in self.record.skipped_steps:
            self.record.skipped_steps.append(index)

    def on_grad_scaler(self) -> None:
        self.record.grad_scalers += 1

    def on_autocast(self, device_type: str, dtype: Any, enabled: bool) -> None:
        entry = {"device_type": device_type, "dtype": str(dtype).removeprefix("torch."), "enabled": bool(enabled)}
        if not any(all(known.get(key) == value for key, value in entry.items()) for known in self.record.autocast):
            entry["site"] = script_site()
            self.record.autocast.append(entry)

    def on_warning(self, message: str) -> None:
        if "Disabling" in message and message not in self.record.disabling_warnings:
            self.record.disabling_warnings.append(message)
            self.record.disabling_sites.append(script_site())

    def on_double_scale(self) -> None:
        if self.record.double_scaled is None:
            self.record.double_scaled = script_site() or {}

    # -- bookkeeping -------------------------------------------------------------------------------------------

    def _close_step(self) -> None:
        self._step_losses.append(self._open_losses)
        self._open_optimizers, self._open_losses = [], []
        done = len(self._step_losses)
        if done in (self._warmup, self._step_limit):
            self._synchronize()
        self._step_times.append(time.perf_counter())
        if done % self._progress_every == 0 or done == self._step_limit:
            print(f"{PROGRESS_PREFIX}{done}/{self._step_limit} seed {self.record.seed}", file=sys.__stderr__, flush=True)
        if done == self._step_limit:
            self.record.reached_step_limit = True
            raise _StopTraining

    def _synchronize(self) -> None:
        if self._torch.cuda.is_initialized():
            self._torch.cuda.synchronize()

    def finish(self, error: dict[str, Any] | None) -> RunRecord:
        """Close a step left open by the script's end, read the loss values and the memory peak."""
        if self._open_optimizers:
            self._step_losses.append(self._open_losses)
        record = self.record
        if error is not None:
            record.status, record.error = "crashed", error
        try:
            values = [[float(loss) for loss in losses] for losses in self._step_losses]
            record.losses = [_summed_loss(step) for step in values]
            record.loss_parts = [[value if math.isfinite(value) else None for value in step] for step in values]
        except RuntimeError as exc:  # the device itself failed (e.g. a CUDA error): no loss can be read back
            record.losses, record.loss_parts = [None] * len(self._step_losses), []
            record.status, record.error = "crashed", record.error or describe_exception(exc)
        measured = len(self._step_times) - self._warmup
        if measured > 0:
            record.seconds_per_step = (self._step_times[-1] - self._step_times[self._warmup - 1]) / measured
            times = self._step_times[self._warmup - 1 :]
            record.step_seconds = [later - earlier for earlier, later in zip(times, times[1:])]
        record.peak_memory_bytes, record.memory_source = self._peak_memory()
        return record

    def _peak_memory(self) -> tuple[int | None, str]:
        if self._torch.cuda.is_initialized():
            return int(self._torch.cuda.max_memory_allocated()), "cuda max_memory_allocated"
        try:
            import resource
        except ImportError:  # Windows
            return None, ""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return (peak if sys.platform == "darwin" else peak * 1024), "peak RSS"


class _CurrentRecorder:
    """The hooks are installed once; each seed's run records into its own recorder."""

    recorder: TrainingRecorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.recorder, name)


def install_hooks(torch: Any, recorder: TrainingRecorder) -> None:
    """Wrap the torch entry points listed in the module docstring so they report to ``recorder``."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    grad_scaler = torch.amp.GradScaler

    original_backward = torch.autograd.backward

    scaled_nodes: list[Any] = []  # the autograd nodes of the scaled losses not yet backpropagated

    def derived_from_scaled(tensor: Any) -> bool:
        # Computed from a scaled loss (`scaler.scale(loss) / n`): its value is scaled, and the loss it holds was
        # recorded already by `scale`.
        if not scaled_nodes or tensor.grad_fn is None:
            return False
        pending, seen = [tensor.grad_fn], 0
        while pending and seen < 64:
            node = pending.pop()
            seen += 1
            if any(node is scaled for scaled in scaled_nodes):
                return True
            pending += [parent for parent, _ in node.next_functions if parent is not None]
        return False

    def record_scalars(tensors: Any) -> None:
        for tensor in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
            if not isinstance(tensor, torch.Tensor) or tensor.numel() != 1:
                continue
            if not getattr(tensor, _SCALED_MARK, False) and not derived_from_scaled(tensor):
                recorder.on_loss(tensor)
        scaled_nodes.clear()

    @functools.wraps(original_backward)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        record_scalars(tensors)
        return original_backward(tensors, *args, **kwargs)

    original_grad = torch.autograd.grad

    @functools.wraps(original_grad)
    def grad(outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("create_graph", False):
            record_scalars(outputs)
        return original_grad(outputs, *args, **kwargs)

    original_scale = grad_scaler.scale

    @functools.wraps(original_scale)
    def scale(self: Any, outputs: Any) -> Any:
        scaled = original_scale(self, outputs)
        if isinstance(outputs, torch.Tensor) and outputs.numel() == 1 and self.is_enabled():
            if getattr(outputs, _SCALED_MARK, False) or derived_from_scaled(outputs):
                recorder.on_double_scale()  # not a loss: the loss inside it was recorded by the first scale()
            else:
                recorder.on_loss(outputs)
            setattr(scaled, _SCALED_MARK, True)
            if scaled.grad_fn is not None:
                scaled_nodes.append(scaled.grad_fn)
        return scaled

    original_step = grad_scaler.step

    @functools.wraps(original_step)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        steps_before = recorder.record.optimizer_steps
        result = original_step(self, optimizer, *args, **kwargs)
        if recorder.record.optimizer_steps == steps_before:  # inf/NaN gradients: optimizer.step() was skipped
            recorder.on_optimizer_step(optimizer)
        return result

    original_update = grad_scaler.update

    @functools.wraps(original_update)
    def update(self: Any, new_scale: Any = None) -> None:
        if new_scale is not None or not self.is_enabled():
            return original_update(self, new_scale)
        scale_before = self.get_scale()
        original_update(self, new_scale)
        if self.get_scale() < scale_before:
            recorder.on_scale_backoff()

    original_init = grad_scaler.__init__

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        recorder.on_grad_scaler()
        original_init(self, *args, **kwargs)

    original_enter = torch.amp.autocast.__enter__

    @functools.wraps(original_enter)
    def enter(self: Any) -> Any:
        recorder.on_autocast(self.device, self.fast_dtype, self._enabled)
        return original_enter(self)

    original_showwarning = warnings.showwarning

    @functools.wraps(original_showwarning)
    def showwarning(message: Any, *args: Any, **kwargs: Any) -> None:
        recorder.on_warning(str(message))
        original_showwarning(message, *args, **kwargs)

    torch.autograd.backward, torch.autograd.grad = backward, grad
    grad_scaler.scale, grad_scaler.step, grad_scaler.update, grad_scaler.__init__ = scale, step, update, init
    torch.amp.autocast.__enter__ = enter
    warnings.showwarning = showwarning
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: recorder.on_optimizer_step(optimizer))


def _parameter_device(optimizer: Any) -> str | None:
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            return str(parameter.device)
    return None


def _summed_loss(losses: list[float]) -> float | None:
    """One training step's loss: the sum of its backpropagated losses; None when not finite or none was seen."""
    total = sum(losses)
    return total if losses and math.isfinite(total) else None


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """The exception's type, message and last traceback lines: what a crash report shows.

    The bootstrap's own frames (``main``, runpy, the hook wrappers) are left out: the user reads their script's.
    """
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if not _is_bootstrap_frame(frame.filename)]
    text = "".join(traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc))
    lines = ["Traceback (most recent call last):", *text.rstrip().splitlines()]
    return {"type": type(exc).__name__, "message": str(exc), "traceback_tail": lines[-_TRACEBACK_TAIL_LINES:]}


def _is_bootstrap_frame(filename: str) -> bool:
    return filename in (__file__, runpy.__file__) or filename.startswith("<frozen runpy")


def _install_guard() -> tuple[Any, Any]:
    import amp_lint.guard as guard_module

    return guard_module, guard_module.install("record")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are integers separated by commas, got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("at least one seed")
    return seeds


def _parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    own, script_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m amp_lint.verify.bootstrap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", required=True, help="the program to run")
    parser.add_argument("--origin", help="the user's script it came from (default: --script): its folder, __file__")
    parser.add_argument("--module", action="append", default=[], metavar="NAME=PATH",
                        help="load local module NAME from PATH's code (repeatable)")  # fmt: skip
    parser.add_argument("--seeds", type=_seed_list, default=[0], help="comma-separated seeds, one run each")
    parser.add_argument("--steps", type=_positive_int, required=True, help="stop after this many training steps")
    parser.add_argument("--warmup", type=_positive_int, required=True, help="steps left out of the timing (>= 1)")
    parser.add_argument("--out", required=True, help="where to write the RunRecord JSON (a list, one per seed)")
    parser.add_argument("--guard", action="store_true", help="run amp_lint.guard (record mode) and keep its breaches")
    return parser.parse_args(own), script_args


def main(argv: list[str] | None = None) -> int:
    args, script_args = _parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # must precede CUDA initialisation
    modules = dict(entry.split("=", 1) for entry in args.module)

    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    # Filling every new tensor with NaN guards only against reading uninitialised memory, and its cost (per
    # tensor, memory-bound) would skew the fp32 vs AMP timing.
    torch.utils.deterministic.fill_uninitialized_memory = False
    records = []
    start_dir, start_path = os.getcwd(), list(sys.path)
    current = _CurrentRecorder()
    install_hooks(torch, current)  # type: ignore[arg-type]
    for seed in args.seeds:
        recorder = TrainingRecorder(torch, steps=args.steps, warmup=args.warmup)
        recorder.record.seed = seed
        current.recorder = recorder
        guard = _install_guard() if args.guard else None
        seed_everything(torch, seed)
        if torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()
        error = None
        try:
            run_script(args.script, args.origin or args.script, script_args, modules)
        except _StopTraining:
            pass
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = describe_exception(exc)
        except BaseException as exc:  # any failure of the script, even KeyboardInterrupt, is the result to report
            error = describe_exception(exc)
        finally:
            restore_seeders(torch)
            os.chdir(start_dir)
            sys.path[:] = start_path
        record = recorder.finish(error)
        if guard is not None:
            guard_module, report = guard
            guard_module.uninstall()
            record.guard = [violation.to_dict() for violation in report.violations]
        records.append(record)
        if record.status != "ok":
            break  # a crash is the result: the other seeds would crash alike
    write_records(records, args.out)
    return 0 if all(record.status == "ok" for record in records) else 1


if __name__ == "__main__":
    sys.exit(main())
