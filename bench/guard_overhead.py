"""What amp_lint.guard costs per training step: a small model on CPU, with and without the guard, interleaved.

    python bench/guard_overhead.py [--rounds 10] [--steps 50] [--threads 1]

The step is the canonical AMP step (zero_grad, autocast forward, scaled backward, unscale_, clip_grad_norm_,
step, update) of a 3-layer MLP (256 wide, batch 64, AdamW) in float16 CPU autocast. Each round times --steps steps
unguarded, then --steps guarded (mode warn), then guarded with .grad reads checked, in CPU time of this process
(one thread); the figure is the median over rounds of each round's guarded/unguarded ratio. Because a busy machine's noise can exceed the guard's cost, the
guard's own cost is also measured on a one-layer model (ABBA order), in microseconds per step, and the limit is
checked on that cost as a share of the small model's step. Prints
the per-step times and the overhead; exits 1 when the default guard costs 2% or more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import amp_lint.guard as guard  # noqa: E402

LIMIT = 0.02


def make_step(device: str = "cpu", width: int | None = 256):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    ) if width else torch.nn.Sequential(torch.nn.Linear(128, 10))
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device)
    x, y = torch.randn(64, 128, device=device), torch.randint(0, 10, (64,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    return step


def timed(step, steps: int, device: str = "cpu") -> float:
    """CPU seconds per step of this process (one thread): other processes on a busy machine do not count. On CUDA,
    wall-clock seconds, the device synchronised before and after."""
    if device == "cuda":
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    step = make_step(args.device)
    timed(step, args.steps, args.device)  # warm up (allocator, autocast caches)
    plain, guarded, reads = [], [], []
    for _ in range(args.rounds):
        plain.append(timed(step, args.steps, args.device))
        guard.install("warn")
        guarded.append(timed(step, args.steps, args.device))
        guard.install("warn", grad_reads=True)
        reads.append(timed(step, args.steps, args.device))
        report = guard.uninstall()
        assert report is not None and not report.violations, report and report.summary()
    # The guard's own cost, in absolute terms: the same step on a 4-1 linear model, where it is a large share of
    # the step and the machine's noise a small one (ABBA order within each round).
    tiny = make_step(args.device, width=None)
    tiny_plain, tiny_guarded = [], []
    for _ in range(args.rounds):
        tiny_plain.append(timed(tiny, args.steps * 10, args.device))
        guard.install("warn")
        tiny_guarded.append(timed(tiny, args.steps * 10, args.device))
        tiny_guarded.append(timed(tiny, args.steps * 10, args.device))
        guard.uninstall()
        tiny_plain.append(timed(tiny, args.steps * 10, args.device))
    cost = statistics.median(tiny_guarded) - statistics.median(tiny_plain)
    ratio = statistics.median(g / p for g, p in zip(guarded, plain)) - 1
    ratio_reads = statistics.median(r / p for r, p in zip(reads, plain)) - 1
    print(f"torch {torch.__version__}, {args.device}, {args.threads} thread(s), {args.rounds} rounds x {args.steps} steps")
    print(f"unguarded step:            {statistics.median(plain) * 1e3:.3f} ms (median)")
    print(f"guarded step (warn):       {statistics.median(guarded) * 1e3:.3f} ms; overhead {ratio:+.2%} (median of rounds)")
    print(f"guarded, .grad reads too:  {statistics.median(reads) * 1e3:.3f} ms; overhead {ratio_reads:+.2%}")
    share = cost / statistics.median(plain)
    print(f"the guard's own cost (tiny model, ABBA): {cost * 1e6:.1f} us per step = {share:+.2%} of the small step")
    print(f"limit: {LIMIT:.0%} for the default guard: {'ok' if share < LIMIT else 'OVER'} (the interleaved ratio "
          "above includes the machine's noise)")
    return 0 if share < LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
