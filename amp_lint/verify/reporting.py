"""What ``amp-lint verify`` writes for the user: the per-step loss CSV, the plot (with matplotlib) and the text
report."""

from __future__ import annotations

import csv
import importlib.util
import math
import statistics
from pathlib import Path

from amp_lint.verify.results import EXIT_CODES, ScriptResult, VerifyReport

#: Printed (as a report note) when the plot cannot be drawn.
MATPLOTLIB_MISSING = "No loss plots: they need matplotlib (pip install matplotlib); the CSVs are written."


def importlib_missing(name: str) -> bool:
    return importlib.util.find_spec(name) is None


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, difference) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    means = {}
    for name, records, style in (("fp32", result.fp32, "-"), ("AMP", result.amp, "--")):
        series = [[math.nan if loss is None else loss for loss in record.losses] for record in records]
        if not series:
            continue
        length = min(len(s) for s in series)
        mean = [statistics.fmean(s[t] for s in series) for t in range(length)]
        low = [min(s[t] for s in series) for t in range(length)]
        high = [max(s[t] for s in series) for t in range(length)]
        line = curves.plot(mean, style, label=f"{name} (mean of {len(series)} seeds)")[0]
        curves.fill_between(range(length), low, high, color=line.get_color(), alpha=0.2)
        means[name] = mean
    if "fp32" in means and "AMP" in means:
        length = min(len(means["fp32"]), len(means["AMP"]))
        difference.plot([means["AMP"][t] - means["fp32"][t] for t in range(length)], color="black")
        difference.axhline(0, color="grey", linewidth=0.5)
    for axes in (curves, difference):
        axes.axvline(warmup, color="grey", linestyle=":", linewidth=0.8)
    curves.set(ylabel="loss", title=f"{result.script.name}: {result.status}")
    curves.legend()
    difference.set(xlabel="training step", ylabel="AMP - fp32")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


# --- the text report --------------------------------------------------------------------------------------------


def format_text(report: VerifyReport) -> str:
    """The verdict table, then why each script got its verdict, then the notes and where the files are."""
    header = ["script", "device/dtype", "steps x seeds", "gap", "spread", "largest gap", "parted at", "speed-up",
              "verdict"]  # fmt: skip
    names = display_names([result.script for result in report.results])
    rows = [header] + [[name, *_table_row(result, report)[1:]] for name, result in zip(names, report.results)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for name, result in zip(names, report.results):
        details = [f"  - {reason}" for reason in result.reasons]
        details += [f"  ! {warning}" for warning in result.warnings]
        if result.crash:
            details.append("  " + result.crash.replace("\n", "\n  "))
        if result.converted_modules:
            details.append(f"  converted modules: {', '.join(result.converted_modules)}")
        if result.amp_source != "amp-lint's conversion":
            details.append(f"  AMP version: {result.amp_source}")
        if details:
            lines += ["", f"{name}: {result.status} (exit {EXIT_CODES[result.status]})", *details]
    if report.output_dir is not None:
        lines += ["", f"Per-step losses (CSV) and plots: {report.output_dir}"]
    if report.notes:
        lines.append("")
        lines += [f"Note: {note}" for note in report.notes]
    return "\n".join(lines)


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
    steps = min((len(r.losses) for r in result.amp), default=0) if result.amp else 0
    speed = "-"
    if result.speedup is not None:
        speed = f"{result.speedup:.2f}x"
        if result.speedup_range is not None:
            speed += f" ({result.speedup_range[0]:.2f}-{result.speedup_range[1]:.2f})"
    return [
        result.script.name,
        f"{device}/{enabled[0] if enabled else report.dtype}",
        f"{steps} x {len(result.amp)}" if result.amp else "-",
        _format(judgement.gap if judgement else None, ".1%"),
        _format(judgement.spread if judgement else None, ".1%"),
        f"{judgement.largest_gap:.1%} @{judgement.largest_gap_step}" if judgement else "-",
        str(judgement.parted_at) if judgement and judgement.parted_at is not None else "-",
        speed,
        result.status,
    ]


def _format(value: float | None, spec: str) -> str:
    return "-" if value is None else f"{value:{spec}}"
