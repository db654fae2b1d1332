"""Judging two sides' runs: the verdict from the paired loss curves (seed i's AMP run against seed i's fp32 run),
whether AMP really ran, how many GradScalers a run built, and the speed-up from timed windows."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_lint.verify.bootstrap import RunRecord
from amp_lint.verify.results import (
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_EQUIVALENT,
    NOT_RUN,
    JudgedCurves,
    Judgement,
    ScriptResult,
)

#: Fewer compared steps (after the warm-up) than this: the comparison says nothing.
MIN_COMPARED_STEPS = 10
#: The smallest noise, relative to the fp32 loss, per AMP dtype: its unit roundoff (2^-11 for float16, 2^-8 for
#: bfloat16). A right conversion that keeps seed i's AMP run on seed i's fp32 run differs from it by rounding; the
#: band is --tolerance times this at least (0.15% of the loss for float16, 1.2% for bfloat16 at the default 3).
ROUNDING = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
#: fp32 must fall by more than twice its own noise, at least this fraction of its loss, to have learnt.
LEARN_FLOOR = 0.01
#: AMP steps with a non-finite loss (after the GradScaler's first calibration steps) tolerated, as a fraction.
MAX_NONFINITE_FRACTION = 0.1
#: Timed windows per run for the speed-up.
SPEED_WINDOWS = 5
#: A speed-up whose quartile range spans more than this factor (high / low) is said to vary widely.
WIDE_SPEEDUP_RANGE = 1.5


def judge(result: ScriptResult, *, warmup: int, tolerance: float, dtype: str, own_amp: bool = False) -> None:
    """Set ``result``'s verdict from its completed runs (several seeds per side, the same seeds on both).

    Both sides run with the same seeds, so they are compared **pairwise**: after the warm-up, each run's loss curve is
    smoothed (moving average over a tenth of the compared steps), and seed *i*'s AMP curve is subtracted from seed
    *i*'s fp32 curve. The mean of these paired differences over the seeds is the gap; its noise is their
    seed-to-seed standard error, ``sd(paired differences) / sqrt(n)``, counted only as far as the pairs have come
    apart (``sd(paired differences) / (sqrt(2) x fp32's seed-to-seed sd)``, at most 1: pairs as far apart as two
    seeds), and at least the AMP dtype's rounding (:data:`ROUNDING`) of the fp32 loss and the pairs' step-to-step
    jitter (how much each pair's difference moves from one step to the next, over sqrt(smoothing x seeds)). A right conversion's paired
    differences are rounding: tiny while the runs stay together, and of either sign once a chaotic run (a GAN)
    drifts apart, which the weighted standard error then admits. A wrong one (clipping before ``unscale_``) keeps
    the pairs together and moves every seed the same way. The sides are *not equivalent* when the mean gap over the
    compared curve exceeds ``tolerance`` times the mean noise (the allowed band), when the AMP run scaled an already scaled value, or when
    the AMP loss is non-finite in more than :data:`MAX_NONFINITE_FRACTION` of the steps. Otherwise they are
    *equivalent*, unless the evidence is too thin: *inconclusive* when fewer than :data:`MIN_COMPARED_STEPS` steps
    follow the warm-up, or when the fp32 curve did not fall beyond its own seed-to-seed noise (agreeing curves that
    do not learn say nothing). *Not run* when AMP never really ran (no enabled autocast, autocast on another device
    than the parameters', or AMP switching itself off) or no training step was recorded at all.
    """
    reasons = result.reasons
    fp32, amp = _paired(result.fp32, result.amp)
    fp32_length = min(len(record.losses) for record in result.fp32)
    # No fp32 step at all (training in subprocesses, like mnist_hogwild) explains an AMP side without autocast too.
    not_run = _amp_did_not_run(result.amp, dtype, own_amp) if fp32_length else []
    if not_run:
        result.status, reasons[:] = NOT_RUN, not_run
        return
    double = next((record for record in result.amp if record.double_scaled), None)
    if double is not None:
        result.status = NOT_EQUIVALENT
        reasons.append(
            f"a scaled value where a loss is expected: `scaler.scale()` was given a tensor it had already scaled "
            f"({_site_text(double.double_scaled)}), so the loss and its gradients are scaled twice (the scale "
            "squared) and the steps overflow; scale the loss once"
        )
        return
    length = min(len(record.losses) for record in [*result.fp32, *result.amp])
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
    fp32_nonfinite = max(sum(1 for loss in record.losses[:length] if loss is None) for record in result.fp32)
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
        for record in result.amp
    ]
    if max(nonfinite) > MAX_NONFINITE_FRACTION * length:
        result.status = NOT_EQUIVALENT
        reasons.append(f"the AMP loss is non-finite in {max(nonfinite)} of {length} steps (one seed)")
        return
    window = max(1, compared // 10)
    parts = _losses_per_step(result.fp32 + result.amp, length)
    judged_on = (
        f"the sum of the {parts} losses backpropagated in each training step" if parts and parts > 1
        else "the loss backpropagated in each training step"
    )  # fmt: skip
    total = _compare([record.losses for record in fp32], [record.losses for record in amp], amp,
                     warmup=warmup, length=length, window=window, tolerance=tolerance, floor=ROUNDING[dtype])  # fmt: skip
    if total is None:
        fp32_broken = any(_smooth(_filled(record.losses[:length]), warmup, window) is None for record in fp32)
        result.status = INCONCLUSIVE if fp32_broken else NOT_EQUIVALENT
        reasons.append(
            "the fp32 run's own loss is not finite: nothing to compare with" if fp32_broken
            else "the AMP run's loss is not finite"
        )  # fmt: skip
        return
    start, end = total.fp32_mean[0], total.fp32_mean[-1]
    result.judgement = Judgement(
        compared_steps=compared,
        smoothing=window,
        gap=total.mean_gap / total.scale,
        spread=statistics.fmean(total.spread) / total.scale,
        allowed=total.allowed / total.scale,
        largest_gap=abs(total.gap[total.largest]) / total.scale,
        largest_gap_step=total.steps[total.largest],
        parted_at=total.steps[total.parted] if total.parted is not None else None,
        fp32_drop=(start - end) / abs(start) if start else 0.0,
        paired_spread=statistics.fmean(total.paired_sd) / total.scale,
        chaos=statistics.fmean(total.chaos),
        skipped_steps=[len(record.skipped_steps) for record in result.amp],
        judged_on=judged_on,
    )
    result.curves = JudgedCurves(total.steps, total.fp32_mean, total.amp_mean, total.band)
    if total.mean_gap > total.allowed:
        result.status = NOT_EQUIVALENT
        reasons.append(_beyond_the_band("the AMP curve", total, tolerance, dtype))
        return
    learn_noise = [max(total.spread[t] * math.sqrt(2 / len(fp32)), LEARN_FLOOR * abs(total.fp32_mean[t]))
                   for t in range(len(total.steps))]  # fmt: skip
    edge = max(1, len(total.steps) // 10)
    if start - end > 2 * statistics.fmean(learn_noise[:edge] + learn_noise[-edge:]):
        result.status = EQUIVALENT
        return
    if parts and parts > 1:
        # Several losses per step whose sum did not fall: an adversarial pair (a GAN's losses chase each other,
        # their sum need not fall). Each loss's trajectory is judged against its fp32 twin instead. The sum is
        # within its band, so a loss beyond its own band is not conclusive (a GAN's discriminator drifts).
        result.judgement.judged_on = (
            f"each of the {parts} losses backpropagated in each training step, against its fp32 twin (their sum "
            "did not fall: an adversarial pair)"
        )
        for index in range(parts):
            twin = _compare([_part(record, index) for record in fp32], [_part(record, index) for record in amp], amp,
                            warmup=warmup, length=length, window=window, tolerance=tolerance, floor=ROUNDING[dtype])  # fmt: skip
            name = f"loss {index + 1} of {parts} (the {_ordinal(index + 1)} backpropagated in a step)"
            if twin is None or twin.mean_gap > twin.allowed:
                result.status = INCONCLUSIVE
                apart = _beyond_the_band("its AMP curve", twin, tolerance, dtype) if twin else "not finite"
                reasons.append(f"{name}: {apart}, while the sum of the losses is within its band: not conclusive")
                return
        result.status = EQUIVALENT
        return
    result.status = INCONCLUSIVE
    reasons.append(
        f"fp32 itself did not learn: its loss ({judged_on}) went from {start:.4g} to {end:.4g} after the "
        "warm-up, within its own noise; agreeing curves that do not fall say nothing (train longer: --steps)"
    )


@dataclass
class _Comparison:
    """One loss's smoothed curves, seed-mean, and the paired gap against its band, at each compared point."""

    steps: list[int]
    fp32_mean: list[float]
    amp_mean: list[float]
    gap: list[float]
    noise: list[float]
    lag: list[float]
    spread: list[float]
    paired_sd: list[float]
    chaos: list[float]
    band: list[float]
    mean_gap: float
    allowed: float
    scale: float
    largest: int
    parted: int | None


def _compare(
    fp32_losses: Sequence[Sequence[float | None]],
    amp_losses: Sequence[Sequence[float | None]],
    amp: Sequence[RunRecord],
    *,
    warmup: int,
    length: int,
    window: int,
    tolerance: float,
    floor: float,
) -> _Comparison | None:
    """The paired comparison of :func:`judge` for one loss series per run (seed i's AMP series against seed i's fp32
    series); None when a smoothed curve has a missing value."""
    fp32_curves = [_smooth(_filled(losses[:length]), warmup, window) for losses in fp32_losses]
    amp_curves = [_smooth(_filled(losses[:length]), warmup, window) for losses in amp_losses]
    if any(curve is None for curve in fp32_curves + amp_curves):
        return None
    points = len(fp32_curves[0])
    seeds = len(fp32_curves)
    steps = list(range(warmup + window - 1, warmup + window - 1 + points))  # the step each smoothed point ends at
    fp32_mean = [statistics.fmean(curve[t] for curve in fp32_curves) for t in range(points)]
    amp_mean = [statistics.fmean(curve[t] for curve in amp_curves) for t in range(points)]
    paired = [[a[t] - f[t] for f, a in zip(fp32_curves, amp_curves)] for t in range(points)]
    gap = [statistics.fmean(differences) for differences in paired]
    paired_sd = [statistics.stdev(d) if seeds > 1 else 0.0 for d in paired]
    spread = [statistics.stdev(curve[t] for curve in fp32_curves) if seeds > 1 else 0.0 for t in range(points)]
    # Chaos: how far the pairs have come apart, from 0 (seed i's AMP run still tracks seed i's fp32 run) to 1 (as
    # far apart as two different seeds). Only that part of the paired differences' spread is drift that a right
    # conversion may show; a wrong one keeps the pairs together and moves them all one way.
    chaos = [min(1.0, paired_sd[t] / (math.sqrt(2) * spread[t])) if spread[t] > 0 else 1.0 for t in range(points)]
    # Jitter: how much each pair's difference moves from one step to the next (raw losses, after the warm-up). Once
    # a right conversion's weights have drifted from fp32's by rounding, each batch meets the two models a little
    # differently, and the paired difference jitters by that much, of either sign, from step to step; averaged over
    # the smoothing window and the seeds, that jitter is noise the gap shows too. (The seed-to-seed spread above is
    # no measure of it when the batch losses themselves differ widely between seeds: the chaos weight then calls
    # drifted pairs "together", and a real conversion fails on rounding; a wrong one that moves every step the same
    # way has a smooth paired difference and keeps a small jitter.)
    jitter = statistics.fmean(_jitter(f, a, warmup, length) for f, a in zip(fp32_losses, amp_losses)) / math.sqrt(window * seeds)
    noise = [max(paired_sd[t] / math.sqrt(seeds) * chaos[t], floor * abs(fp32_mean[t]), jitter) for t in range(points)]
    # A step the GradScaler skipped applied no update, so that AMP run lags its fp32 run by the steps skipped so
    # far: the band also admits what fp32's own curve moves in that many steps (a GAN that skips 3 steps while its
    # scale calibrates is 3 steps behind, all along; a wrong conversion that skips nothing gets no such room).
    # The lag is read on fp32's whole smoothed curve, warm-up included: at the first compared points a run that
    # skipped k steps is where fp32 was k steps before, in the warm-up, which the compared curve does not hold
    # (read there, the first k points had no room at all).
    whole = [_smooth(_filled(losses[:length]), 0, window) for losses in fp32_losses]
    lag = [statistics.fmean(_lagged(curve, record, t, steps[t]) if full is None else _lagged(full, record, warmup + t, steps[t])
                            for full, curve, record in zip(whole, fp32_curves, amp))
           for t in range(points)]  # fmt: skip
    band = [tolerance * noise[t] + lag[t] for t in range(points)]
    return _Comparison(
        steps=steps,
        fp32_mean=fp32_mean,
        amp_mean=amp_mean,
        gap=gap,
        noise=noise,
        lag=lag,
        spread=spread,
        paired_sd=paired_sd,
        chaos=chaos,
        band=band,
        mean_gap=statistics.fmean(abs(value) for value in gap),
        allowed=tolerance * statistics.fmean(noise) + statistics.fmean(lag),
        scale=statistics.fmean(abs(value) for value in fp32_mean) or 1.0,
        largest=max(range(points), key=lambda t: abs(gap[t])),
        parted=next((t for t in range(points) if abs(gap[t]) > band[t]), None),
    )


def _beyond_the_band(what: str, compared: _Comparison, tolerance: float, dtype: str) -> str:
    where = f", the curves part at step {compared.steps[compared.parted]}" if compared.parted is not None else ""
    direction = "above" if statistics.fmean(compared.gap) > 0 else "below"
    return (
        f"{what} is {compared.mean_gap / compared.scale:.1%} {direction} the fp32 curve of the same seed on average, "
        f"beyond the allowed band of {compared.allowed / compared.scale:.2%} ({tolerance:g} x the drift of the paired "
        f"runs, at least {dtype}'s rounding{where})"
    )


def _losses_per_step(records: Sequence[RunRecord], length: int) -> int | None:
    """How many losses every training step of every run backpropagated, when that is one number (else None)."""
    counts = {len(step) for record in records for step in record.loss_parts[:length]}
    complete = all(len(record.loss_parts) >= length for record in records)
    return counts.pop() if complete and len(counts) == 1 else None


def _part(record: RunRecord, index: int) -> list[float | None]:
    return [step[index] for step in record.loss_parts]


def _ordinal(number: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(number, f"{number}th")


def _paired(fp32: Sequence[RunRecord], amp: Sequence[RunRecord]) -> tuple[list[RunRecord], list[RunRecord]]:
    """The runs of the seeds both sides have, in seed order, fp32 and AMP side by side."""
    if len({record.seed for record in fp32}) < len(fp32) or len({record.seed for record in amp}) < len(amp):
        return list(fp32), list(amp)  # seeds not told apart (records made by hand): in run order
    amp_by_seed = {record.seed: record for record in amp}
    pairs = [(record, amp_by_seed[record.seed]) for record in sorted(fp32, key=lambda r: r.seed) if record.seed in amp_by_seed]
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def _at(site: dict[str, Any] | None) -> str:
    """`` at train.py:42 (`the line`)``, or nothing when the place is unknown."""
    if not site:
        return ""
    code = f" (`{site['code']}`)" if site.get("code") else ""
    return f" at {Path(site['file']).name}:{site['line']}{code}"


def _site_text(site: dict[str, Any] | None) -> str:
    """``train.py:42: `scaler.scale(loss)``` for a call site the bootstrap recorded."""
    if not site:
        return "where it was called is unknown"
    text = f"{Path(site['file']).name}:{site['line']}"
    return f"{text}: `{site['code']}`" if site.get("code") else text


def _amp_did_not_run(amp: Sequence[RunRecord], dtype: str, own_amp: bool) -> list[str]:
    """Why AMP did not really run, each reason naming the line that set it up (the converted line, for a
    conversion): the code that asked for a device the run does not have is the code to fix."""
    reasons = []
    record = amp[0]
    enabled = [entry for entry in record.autocast if entry["enabled"]]
    parameters = (record.device or "").split(":")[0]
    if not enabled:
        disabled = [entry for entry in record.autocast if not entry["enabled"]]
        where = "; ".join(f"autocast for {entry['device_type']} was off{_at(entry.get('site'))}" for entry in disabled)
        reasons.append(
            "AMP did not run: the AMP script never entered an enabled autocast region" + (f" ({where})" if where else "")
        )
    elif parameters and all(entry["device_type"] != parameters for entry in enabled):
        used = "; ".join(f"{entry['device_type']}{_at(entry.get('site'))}" for entry in enabled)
        reasons.append(
            f"AMP did not run: autocast was entered for {used}, but the parameters are on {parameters}, "
            "so everything ran in fp32"
        )
    elif not own_amp and all(entry["dtype"] != dtype for entry in enabled):
        used = ", ".join(sorted({entry["dtype"] for entry in enabled}))
        reasons.append(f"AMP did not run as asked: autocast ran with {used}, not {dtype}")
    sites = record.disabling_sites + [None] * (len(record.disabling_warnings) - len(record.disabling_sites))
    reasons += [
        f"AMP did not run: it switched itself off{_at(site)}: {warning.splitlines()[0]}"
        for warning, site in zip(record.disabling_warnings, sites)
    ]
    return reasons


def _lagged(curve: Sequence[float], record: RunRecord, index: int, step: int) -> float:
    """How much the smoothed fp32 ``curve`` moves between its point ``index`` (training step ``step``) and the point as
    many steps earlier as the AMP run ``record`` had skipped by then (0 when it skipped none)."""
    behind = sum(1 for skipped in record.skipped_steps if skipped <= step)
    return abs(curve[index] - curve[max(0, index - behind)])


def _calibration(record: RunRecord) -> int:
    """How many steps a GradScaler skipped right at the start, while it lowered its initial scale."""
    calibrating = 0
    while calibrating in record.skipped_steps:
        calibrating += 1
    return calibrating


def _jitter(fp32: Sequence[float | None], amp: Sequence[float | None], warmup: int, length: int) -> float:
    """The step-to-step jitter of one pair's difference (AMP - fp32 loss of the same seed and step), after the
    warm-up: the standard deviation of its first differences over sqrt(2), in loss units (0 with too few steps)."""
    paired = [a - f for f, a in zip(_filled(fp32[:length])[warmup:], _filled(amp[:length])[warmup:])
              if f is not None and a is not None]  # fmt: skip
    moves = [later - earlier for earlier, later in zip(paired, paired[1:])]
    return statistics.pstdev(moves) / math.sqrt(2) if len(moves) > 1 else 0.0


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


def merge_guard_reports(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """The guard's breaches over every AMP run, one per rule and place, with their counts added up."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        for violation in record.guard:
            key = (violation["rule"], violation["file"], violation["line"])
            if key in merged:
                merged[key]["count"] += violation["count"]
            else:
                merged[key] = dict(violation)
    return list(merged.values())


def explain_with_guard(result: ScriptResult) -> None:
    """The guard's breaches say why an AMP run went wrong: they lead the reasons of a verdict that is not
    equivalent (curves apart, a crash); beside any other verdict they are warnings, which do not change it."""
    lines = [
        f"the runtime guard saw {entry['rule']} at {Path(entry['file']).name if entry['file'] else '?'}:{entry['line']}"
        f" ({entry['count']}x): {entry['message']}"
        for entry in result.guard
    ]
    if not lines:
        return
    if result.status == NOT_EQUIVALENT:
        result.reasons[:0] = lines
    else:
        result.warnings += lines


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
        low, high = fp32_q[0] / amp_q[2], fp32_q[2] / amp_q[0]
        result.speedup_range = (low, high)
        if high > WIDE_SPEEDUP_RANGE * low:
            result.speedup_varied = True
            result.warnings.append(
                f"the speed-up varied widely between timed windows ({low:.2f}x to {high:.2f}x): the machine was "
                "busy or the runs were too short, so {:.2f}x is not a reliable figure; measure on an idle machine "
                "with more --steps".format(result.speedup)
            )


def _windows(records: Sequence[RunRecord]) -> list[float]:
    """Mean seconds per step of :data:`SPEED_WINDOWS` consecutive windows of each run, after the warm-up."""
    windows = []
    for record in records:
        times = record.step_seconds
        size = max(1, len(times) // SPEED_WINDOWS)
        for start in range(0, len(times) - size + 1, size):
            windows.append(statistics.fmean(times[start : start + size]))
    return windows
