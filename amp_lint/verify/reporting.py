"""What ``amp-lint verify`` writes for the user: the per-step loss CSV, the plot (with matplotlib) and the text
report."""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

from amp_lint.verify.results import EXIT_CODES, NOT_EQUIVALENT, Judgement, ScriptResult, VerifyReport

#: Printed (as a report note) when the plot cannot be drawn.
MATPLOTLIB_MISSING = "No loss plots: they need matplotlib (pip install matplotlib); the CSVs are written."


def importlib_missing(name: str) -> bool:
    return importlib.util.find_spec(name) is None


def ignored_by_git(folder: Path) -> None:
    """Make ``folder`` (verify's default output folder, in the user's tree) with a ``.gitignore`` of ``*`` inside,
    as ``.ruff_cache`` and ``.pytest_cache`` have: its files never show up as untracked."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ignore = folder / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Written by amp-lint verify: its results are not for version control.\n*\n", encoding="utf-8")
    except OSError:
        pass  # the files themselves say what went wrong when they are written


def write_result_files(result: ScriptResult, folder: Path, warmup: int) -> list[str]:
    """``losses.csv`` (one column per side and seed) and, with matplotlib, ``losses.png``; returns the paths."""
    runs = [(f"fp32_seed{r.seed}", r) for r in result.fp32] + [(f"amp_seed{r.seed}", r) for r in result.amp]
    if not runs:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "losses.csv"
    length = max(len(record.losses) for _, record in runs)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", *(name for name, _ in runs)])
        for step in range(length):
            row = [record.losses[step] if step < len(record.losses) else None for _, record in runs]
            writer.writerow([step, *("" if value is None else f"{value:.7g}" for value in row)])
    written = [str(path)]
    if not importlib_missing("matplotlib"):
        written.append(str(_plot(result, folder / "losses.png", warmup)))
    return written


def _plot(result: ScriptResult, path: Path, warmup: int) -> Path:
    """Top: every run's raw loss (thin) and the smoothed seed-mean curves the verdict was reached on (thick).
    Bottom: the judged gap (AMP - fp32, same seeds, smoothed) and the allowed band around zero."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, difference) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    colors = {"fp32": "tab:blue", "AMP": "tab:orange"}
    for name, records in (("fp32", result.fp32), ("AMP", result.amp)):
        for index, record in enumerate(records):
            raw = [math.nan if loss is None else loss for loss in record.losses]
            curves.plot(raw, color=colors[name], alpha=0.25, linewidth=0.7,
                        label=f"{name}, each seed (raw)" if index == 0 else None)  # fmt: skip
    judged = result.curves
    if judged is not None:
        curves.plot(judged.steps, judged.fp32, color=colors["fp32"], linewidth=2, label="fp32, judged (smoothed mean)")
        curves.plot(judged.steps, judged.amp, "--", color=colors["AMP"], linewidth=2, label="AMP, judged (smoothed mean)")
        gap = [amp - fp32 for fp32, amp in zip(judged.fp32, judged.amp)]
        difference.plot(judged.steps, gap, color="black", label="AMP - fp32 (paired)")
        difference.fill_between(judged.steps, [-b for b in judged.band], judged.band, color="grey", alpha=0.3,
                                label="allowed band")  # fmt: skip
        difference.legend(fontsize="small")
    difference.axhline(0, color="grey", linewidth=0.5)
    for axes in (curves, difference):
        axes.axvline(warmup, color="grey", linestyle=":", linewidth=0.8)
    curves.set(ylabel="loss", title=f"{result.script.name}: {result.status}")
    curves.legend(fontsize="small")
    difference.set(xlabel="training step", ylabel="AMP - fp32")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


# --- the text report --------------------------------------------------------------------------------------------


def format_text(report: VerifyReport) -> str:
    """The verdict table, then why each script got its verdict, then the notes and where the files are."""
    header = ["script", "device/dtype", "steps x seeds", "gap", "allowed", "fp32 fell", "skipped", "parted at",
              "speed-up", "verdict"]  # fmt: skip
    names = display_names([result.script for result in report.results])
    rows = [header] + [[name, *_table_row(result, report)[1:]] for name, result in zip(names, report.results)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for name, result in zip(names, report.results):
        details = [f"  - {reason}" for reason in result.reasons]
        if result.judgement is not None and result.judgement.judged_on != Judgement.judged_on:
            details.append(f"  judged on: {result.judgement.judged_on}")
        details += [f"  ! {warning}" for warning in result.warnings]
        if result.crash:
            details.append("  " + result.crash.replace("\n", "\n  "))
        if result.converted_modules:
            details.append(f"  converted modules: {', '.join(result.converted_modules)}")
        if result.amp_source != "amp-lint's conversion":
            details.append(f"  AMP version: {result.amp_source}")
        if details:
            lines += ["", f"{name}: {result.status} (exit {EXIT_CODES[result.status]})", *details]
    lines += ["", _LEGEND.format(tolerance=report.tolerance)]
    if report.output_dir is not None:
        lines += ["", f"Per-step losses (CSV) and plots: {report.output_dir}"]
    if report.notes:
        lines.append("")
        lines += [f"Note: {note}" for note in report.notes]
    return "\n".join(lines)


_LEGEND = (
    "gap: AMP minus fp32 of the same seed, smoothed, averaged over the seeds, then over the steps after the warm-up "
    "(relative to the fp32 loss); allowed: the band it must stay within ({tolerance:g} x the seed-to-seed error of "
    "those paired differences, as far as the pairs came apart, at least the AMP dtype's rounding and the pairs' "
    "step-to-step jitter, plus fp32's own movement over the steps AMP skipped); fp32 fell: how "
    "much fp32's own loss fell over those steps; "
    "skipped: steps the GradScaler skipped (overflow) in each AMP run. The verdict is judged on the mean gap against "
    "the allowed band; parted at (shown for a script that is not equivalent): the first step the smoothed gap "
    "leaves the band."
)


def display_names(scripts: list[Path]) -> list[str]:
    """Each script's file name, with as many parent folders as it takes to tell scripts of one name apart
    (`vae/main.py`, `dcgan/main.py`)."""
    names = []
    for script in scripts:
        depth = 1
        while depth < len(script.parts):
            name = "/".join(script.parts[-depth:])
            if sum(1 for other in scripts if "/".join(other.parts[-depth:]) == name) <= 1:
                break
            depth += 1
        names.append("/".join(script.parts[-depth:]))
    return names


def _table_row(result: ScriptResult, report: VerifyReport) -> list[str]:
    amp = result.amp[0] if result.amp else None
    device = (amp.device if amp and amp.device else report.device).split(":")[0]
    enabled = [entry["dtype"] for entry in amp.autocast if entry["enabled"]] if amp else []
    judgement = result.judgement
    agreed = result.status != NOT_EQUIVALENT
    steps = min((len(r.losses) for r in result.amp), default=0) if result.amp else 0
    speed = "-"
    if result.speedup is not None:
        speed = f"{result.speedup:.2f}x"
        if result.speedup_range is not None:
            speed += f" ({result.speedup_range[0]:.2f}-{result.speedup_range[1]:.2f})"
        if result.speedup_varied:
            speed += " varied"
    return [
        result.script.name,
        f"{device}/{enabled[0] if enabled else report.dtype}",
        f"{steps} x {len(result.amp)}" if result.amp else "-",
        _format(judgement.gap if judgement else None, ".1%"),
        _format(judgement.allowed if judgement else None, ".1%"),
        _format(judgement.fp32_drop if judgement else None, ".0%"),
        "/".join(str(n) for n in judgement.skipped_steps) if judgement and judgement.skipped_steps else "-",
        # The verdict is judged on the mean gap; where the curves part is shown only when that gap is beyond the
        # band (beside "equivalent", one step's excursion out of the band read as a contradiction).
        str(judgement.parted_at) if judgement and judgement.parted_at is not None and not agreed else "-",
        speed,
        result.status,
    ]


def _format(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"
