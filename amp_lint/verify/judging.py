"""Judging two sides' runs: the verdict from the loss curves against fp32's own seed-to-seed spread, whether AMP
really ran, how many GradScalers a run built, and the speed-up from timed windows."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from amp_lint.verify.bootstrap import RunRecord
from amp_lint.verify.results import (
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_EQUIVALENT,
    NOT_RUN,
    Judgement,
    ScriptResult,
)

#: Fewer compared steps (after the warm-up) than this: the comparison says nothing.
MIN_COMPARED_STEPS = 10
#: The smallest noise band, relative to the fp32 loss: seeds that do not change the run (a script that ignores
#: them, a deterministic data set and initialisation) still leave float16 rounding room.
NOISE_FLOOR = 0.01
#: AMP steps with a non-finite loss (after the GradScaler's first calibration steps) tolerated, as a fraction.
MAX_NONFINITE_FRACTION = 0.1
#: Timed windows per run for the speed-up.
SPEED_WINDOWS = 5


def judge(result: ScriptResult, *, warmup: int, tolerance: float, dtype: str, own_amp: bool = False) -> None:
    """Set ``result``'s verdict from its completed runs (several seeds per side).

    After the warm-up, each run's loss curve is smoothed (moving average over a tenth of the compared steps); the
    gap between the AMP and fp32 seed-mean curves is compared with the noise of a difference of two seed means,
    ``spread x sqrt(1/n_fp32 + 1/n_amp)`` where spread is the fp32 curves' seed-to-seed standard deviation at each
    step (at least :data:`NOISE_FLOOR` of the fp32 loss). The sides are *not equivalent* when the mean gap over the
    whole compared curve exceeds ``tolerance`` times the mean noise, or when the AMP loss is non-finite in more than
    :data:`MAX_NONFINITE_FRACTION` of the steps. Otherwise they are *equivalent*, unless the evidence is too thin:
    *inconclusive* when fewer than :data:`MIN_COMPARED_STEPS` steps follow the warm-up, or when the fp32 curve did
    not fall beyond its own noise (agreeing curves that do not learn say nothing). *Not run* when AMP never really
    ran (no enabled autocast, autocast on another device than the parameters', or AMP switching itself off) or no
    training step was recorded at all.
    """
    reasons = result.reasons
    fp32, amp = result.fp32, result.amp
    fp32_length = min(len(record.losses) for record in fp32)
    # No fp32 step at all (training in subprocesses, like mnist_hogwild) explains an AMP side without autocast too.
    not_run = _amp_did_not_run(amp, dtype, own_amp) if fp32_length else []
    if not_run:
        result.status, reasons[:] = NOT_RUN, not_run
        return
    length = min(len(record.losses) for record in [*fp32, *amp])
    if length == 0:
        side = "fp32" if fp32_length == 0 else "AMP"
        result.status = NOT_RUN
        reasons.append(
            f"the {side} run recorded no training step: the script ended before its first optimizer step "
            "(or trains in subprocesses, which verify does not follow)"
        )
        return
    compared = length - warmup
    if compared < MIN_COMPARED_STEPS:
        result.status = INCONCLUSIVE
        reasons.append(
            f"too few steps: {length} recorded, {max(compared, 0)} after the warm-up of {warmup} "
            f"(at least {MIN_COMPARED_STEPS} are needed)"
        )
        return
    fp32_nonfinite = max(sum(1 for loss in record.losses[:length] if loss is None) for record in fp32)
    if fp32_nonfinite > MAX_NONFINITE_FRACTION * length:
        # Judged before AMP's: an AMP run as broken as fp32's says nothing about the conversion.
        result.status = INCONCLUSIVE
        reasons.append(
            f"the fp32 run's own loss is non-finite in {fp32_nonfinite} of {length} steps (one seed): "
            "nothing to compare with"
        )
        return
    nonfinite = [
        sum(1 for step, loss in enumerate(record.losses[:length]) if loss is None and step >= _calibration(record))
        for record in amp
    ]
    if max(nonfinite) > MAX_NONFINITE_FRACTION * length:
        result.status = NOT_EQUIVALENT
        reasons.append(f"the AMP loss is non-finite in {max(nonfinite)} of {length} steps (one seed)")
        return
    window = max(1, compared // 10)
    fp32_curves = [_smooth(_filled(record.losses[:length]), warmup, window) for record in fp32]
    amp_curves = [_smooth(_filled(record.losses[:length]), warmup, window) for record in amp]
    if any(curve is None for curve in fp32_curves):
        result.status = INCONCLUSIVE
        reasons.append("the fp32 run's own loss is not finite: nothing to compare with")
        return
    if any(curve is None for curve in amp_curves):
        result.status = NOT_EQUIVALENT
        reasons.append("the AMP run's loss is not finite")
        return
    points = len(fp32_curves[0])
    fp32_mean = [statistics.fmean(curve[t] for curve in fp32_curves) for t in range(points)]
    amp_mean = [statistics.fmean(curve[t] for curve in amp_curves) for t in range(points)]
    factor = math.sqrt(1 / len(fp32_curves) + 1 / len(amp_curves))
    spread = [statistics.stdev(curve[t] for curve in fp32_curves) if len(fp32_curves) > 1 else 0.0 for t in range(points)]
    noise = [max(spread[t] * factor, NOISE_FLOOR * abs(fp32_mean[t])) for t in range(points)]
    gap = [amp_mean[t] - fp32_mean[t] for t in range(points)]
    scale = statistics.fmean(abs(value) for value in fp32_mean) or 1.0
    mean_gap = statistics.fmean(abs(value) for value in gap)
    allowed = tolerance * statistics.fmean(noise)
    largest = max(range(points), key=lambda t: abs(gap[t]))
    parted = next((t for t in range(points) if abs(gap[t]) > tolerance * noise[t]), None)
    first_step = warmup + window - 1  # the step the first smoothed point ends at
    start, end = fp32_mean[0], fp32_mean[-1]
    result.judgement = Judgement(
        compared_steps=compared,
        smoothing=window,
        gap=mean_gap / scale,
        spread=statistics.fmean(spread) / scale,
        allowed=allowed / scale,
        largest_gap=abs(gap[largest]) / scale,
        largest_gap_step=first_step + largest,
        parted_at=first_step + parted if parted is not None else None,
        fp32_drop=(start - end) / abs(start) if start else 0.0,
    )
    if mean_gap > allowed:
        result.status = NOT_EQUIVALENT
        where = f", the curves part at step {first_step + parted}" if parted is not None else ""
        reasons.append(
            f"the AMP curve is {mean_gap / scale:.1%} away from fp32's on average, beyond the noise "
            f"({allowed / scale:.1%}: {tolerance:g} x fp32's seed-to-seed spread{where})"
        )
        return
    if start - end <= 2 * statistics.fmean(noise[: max(1, points // 10)] + noise[-max(1, points // 10) :]):
        result.status = INCONCLUSIVE
        reasons.append(
            f"fp32 itself did not learn: its loss went from {start:.4g} to {end:.4g} after the warm-up, within its "
            "own noise; agreeing curves that do not fall say nothing (train longer: --steps)"
        )
        return
    result.status = EQUIVALENT


def _amp_did_not_run(amp: Sequence[RunRecord], dtype: str, own_amp: bool) -> list[str]:
    reasons = []
    record = amp[0]
    enabled = [entry for entry in record.autocast if entry["enabled"]]
    parameters = (record.device or "").split(":")[0]
    if not enabled:
        reasons.append("AMP did not run: the AMP script never entered an enabled autocast region")
    elif parameters and all(entry["device_type"] != parameters for entry in enabled):
        used = ", ".join(sorted({entry["device_type"] for entry in enabled}))
        reasons.append(
            f"AMP did not run: autocast was entered for {used}, but the parameters are on {parameters}, "
            "so everything ran in fp32"
        )
    elif not own_amp and all(entry["dtype"] != dtype for entry in enabled):
        used = ", ".join(sorted({entry["dtype"] for entry in enabled}))
        reasons.append(f"AMP did not run as asked: autocast ran with {used}, not {dtype}")
    reasons += [f"AMP did not run: it switched itself off: {warning.splitlines()[0]}" for warning in record.disabling_warnings]
    return reasons


def _calibration(record: RunRecord) -> int:
    """How many steps a GradScaler skipped right at the start, while it lowered its initial scale."""
    calibrating = 0
    while calibrating in record.skipped_steps:
        calibrating += 1
    return calibrating


def _filled(losses: Sequence[float | None]) -> list[float | None]:
    """Non-finite losses (skipped steps) replaced by the previous finite one; None until the first finite one."""
    filled: list[float | None] = []
    last = None
    for loss in losses:
        last = loss if loss is not None else last
        filled.append(last)
    return filled


def _smooth(losses: Sequence[float | None], warmup: int, window: int) -> list[float] | None:
    """Trailing moving averages over ``window`` steps, for the steps after the warm-up; None if a value is missing."""
    values = list(losses)
    if any(value is None for value in values[warmup:]):
        return None
    tail = [float(value) for value in values[warmup:]]  # type: ignore[arg-type]
    return [statistics.fmean(tail[t - window + 1 : t + 1]) for t in range(window - 1, len(tail))]


def scaler_warnings(result: ScriptResult) -> list[str]:
    """A run that built more GradScalers than it stepped optimizers re-creates one during the run (per epoch, per
    call of a step function): each new one starts again at scale 65536 and forgets what it learnt."""
    warnings = []
    for record in result.amp[:1]:
        if record.grad_scalers > max(1, record.optimizers):
            warnings.append(
                f"{record.grad_scalers} GradScalers were built in one AMP run (seed {record.seed}) that steps "
                f"{record.optimizers} optimizer(s): a scaler is re-created during the run and starts again at "
                "scale 65536 each time; create it once, beside its optimizer"
            )
    return warnings


# --- speed ------------------------------------------------------------------------------------------------------


def measure_speed(result: ScriptResult) -> None:
    fp32 = _windows(result.fp32)
    amp = _windows(result.amp)
    if not fp32 or not amp:
        return
    result.speedup = statistics.median(fp32) / statistics.median(amp)
    if len(fp32) >= 2 and len(amp) >= 2:
        fp32_q = statistics.quantiles(fp32, n=4)
        amp_q = statistics.quantiles(amp, n=4)
        result.speedup_range = (fp32_q[0] / amp_q[2], fp32_q[2] / amp_q[0])


def _windows(records: Sequence[RunRecord]) -> list[float]:
    """Mean seconds per step of :data:`SPEED_WINDOWS` consecutive windows of each run, after the warm-up."""
    windows = []
    for record in records:
        times = record.step_seconds
        size = max(1, len(times) // SPEED_WINDOWS)
        for start in range(0, len(times) - size + 1, size):
            windows.append(statistics.fmean(times[start : start + size]))
    return windows
