"""The formats people read: full, concise, grouped, pylint, and the --statistics table."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from amp_lint.diagnostics import Applicability, Diagnostic, FileError, Location, Report, is_partial_analysis
from amp_lint.reports import RenderOptions


@dataclass(frozen=True)
class RuleStatistic:
    code: str
    name: str
    count: int
    fixable: bool


# --- shared pieces -----------------------------------------------------------------------------


def style(text: str, options: RenderOptions, **click_style) -> str:
    """`click.style(text, ...)` when colour is on, the plain text otherwise."""
    if not options.color:
        return text
    import click

    return click.style(text, **click_style)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def is_fixable(diagnostic: Diagnostic, options: RenderOptions) -> bool:
    """Whether this run's settings would apply the diagnostic's fix."""
    if diagnostic.fix is None:
        return False
    return diagnostic.fix.applicability == Applicability.SAFE or options.unsafe_fixes


def fix_counts(report: Report, options: RenderOptions) -> Tuple[int, int]:
    """(findings --fix would fix, findings only --unsafe-fixes would fix)."""
    fixable = sum(is_fixable(d, options) for d in report.diagnostics)
    if options.unsafe_fixes:
        return fixable, 0
    unsafe = sum(d.fix is not None and d.fix.applicability == Applicability.UNSAFE for d in report.diagnostics)
    # The checker may drop unsafe fixes from the findings and count them in the report instead.
    return fixable, max(unsafe, report.unsafe_fixable)


def rule_statistics(report: Report, options: RenderOptions) -> List[RuleStatistic]:
    """One entry per rule code, most frequent first, then by code."""
    counts = Counter(d.code for d in report.diagnostics)
    names = {d.code: d.rule_name for d in report.diagnostics}
    fixable = {d.code for d in report.diagnostics if is_fixable(d, options)}
    ordered = sorted(counts, key=lambda code: (-counts[code], code))
    return [RuleStatistic(code, names[code], counts[code], code in fixable) for code in ordered]


def row_column(location: Location, cell: Optional[int] = None) -> str:
    """`row:col`, or `cell N:row:col` inside a notebook."""
    cell_part = f"cell {cell}:" if cell is not None else ""
    return f"{cell_part}{location.row}:{location.column}"


def _styled_position(diagnostic: Diagnostic, options: RenderOptions) -> str:
    """`path:row:col:` with the path in bold."""
    where = row_column(diagnostic.location, diagnostic.cell)
    return f"{style(diagnostic.filename, options, bold=True)}:{where}:"


def headline(diagnostic: Diagnostic, options: RenderOptions) -> str:
    """`path:row:col: CODE [*] message`."""
    code = style(diagnostic.code, options, fg="red", bold=True)
    return f"{_styled_position(diagnostic, options)} {code} {_fix_marker(diagnostic, options)}{diagnostic.message}"


def _fix_marker(diagnostic: Diagnostic, options: RenderOptions) -> str:
    return style("[*]", options, fg="cyan") + " " if is_fixable(diagnostic, options) else ""


def error_line(error: FileError, options: RenderOptions) -> str:
    """`path[:row:col]: error: message` (`warning:` for a file checked with part of its analysis skipped)."""
    if error.location is None:
        where = error.filename
    else:
        where = f"{error.filename}:{row_column(error.location)}"
    label = style("warning", options, fg="yellow", bold=True) if is_partial_analysis(error) else style("error", options, fg="red", bold=True)
    return f"{style(where, options, bold=True)}: {label}: {error.message}"


def _with_newline(lines: List[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


# --- summary -----------------------------------------------------------------------------------


def summary_lines(report: Report, options: RenderOptions) -> List[str]:
    if options.quiet:
        return []
    # As Ruff counts `invalid-syntax`: a file that could not be checked is an error found too.
    remaining = len(report.diagnostics) + len(report.failures)
    lines = []
    if options.fix_mode and report.fixed_count:
        lines.append(f"Fixed {plural(report.fixed_count, 'error')} ({remaining} remaining).")
        if options.show_fixes:
            lines += _fixed_listing(report)
    elif remaining:
        lines.append(f"Found {plural(remaining, 'error')}.")
    below = _below_fail_on(report, options.fail_on)
    if below:
        lines.append(f"{plural(below, 'finding')} below fail-on = \"{options.fail_on}\" (shown, not failing the run).")
    lines += _fixable_lines(report, options)
    if not remaining and not report.errors and not report.fixed_count:
        lines.append("All checks passed!")
    return lines


_RANK = {"info": 0, "warning": 1, "error": 2}


def _below_fail_on(report: Report, fail_on: str) -> int:
    return sum(1 for d in report.diagnostics if _RANK[d.severity.value] < _RANK.get(fail_on, 0))


def _fixable_lines(report: Report, options: RenderOptions) -> List[str]:
    fixable, hidden = fix_counts(report, options)
    lines = []
    if fixable:
        lines.append(f"[*] {fixable} fixable with --fix.")
    if hidden:
        lines.append(f"{hidden} more with --unsafe-fixes." if fixable else f"{hidden} fixable with --unsafe-fixes.")
    return lines


def would_fix_line(report: Report) -> str:
    """The line after `--diff`'s diffs, as Ruff's: `Would fix 2 errors.`"""
    count = report.fixed_count
    line = f"Would fix {plural(count, 'error')}." if count else "Would fix the files above."
    if report.unsafe_fixable:
        line += f" ({report.unsafe_fixable} more with --unsafe-fixes.)"
    return line


def _fixed_listing(report: Report) -> List[str]:
    lines = []
    for filename in sorted(report.fixed):
        lines.append(f"- {filename}:")
        for code, count in sorted(report.fixed[filename].items()):
            lines.append(f"    {count} x {code}")
    return lines


# --- formats -----------------------------------------------------------------------------------


def render_full(report: Report, options: RenderOptions) -> str:
    lines: List[str] = []
    for diagnostic in report.diagnostics:
        lines.append(headline(diagnostic, options))
        lines += _snippet(diagnostic, options)
        lines.append("")
    lines += [error_line(error, options) for error in report.errors]
    summary = summary_lines(report, options)
    if report.errors and summary:
        lines.append("")
    return _with_newline(lines + summary)


def _snippet(diagnostic: Diagnostic, options: RenderOptions) -> List[str]:
    """The source line with a gutter, `^^^` under the range, and the fix's help line."""
    source = diagnostic.source_line.rstrip("\r\n")
    if not source:
        return _help_lines(diagnostic, options)
    row = str(diagnostic.location.row)
    gutter = style(" " * len(row) + " |", options, fg="blue", bold=True)
    numbered = style(f"{row} |", options, fg="blue", bold=True)
    start, end = _marker_columns(diagnostic, source)
    # Copy the tabs of the source line so the marker lines up however the terminal expands them.
    indent = "".join(char if char == "\t" else " " for char in source[: start - 1])
    marker = style("^" * (end - start), options, fg="red", bold=True)
    code = style(diagnostic.code, options, fg="red", bold=True)
    lines = [gutter, f"{numbered} {source}", f"{gutter} {indent}{marker} {code}", gutter]
    return lines + _help_lines(diagnostic, options)


def _marker_columns(diagnostic: Diagnostic, source: str) -> Tuple[int, int]:
    """1-based [start, end) columns to underline: the range, or up to the end of its first line."""
    start = min(diagnostic.location.column, len(source) + 1)
    if diagnostic.end_location.row == diagnostic.location.row:
        end = min(diagnostic.end_location.column, len(source) + 1)
    else:
        end = len(source) + 1
    return start, max(end, start + 1)


def _help_lines(diagnostic: Diagnostic, options: RenderOptions) -> List[str]:
    if diagnostic.fix is None:
        return []
    pad = " " * len(str(diagnostic.location.row))
    return [f"{pad} {style('= help', options, bold=True)}: {diagnostic.fix.message}"]


def render_concise(report: Report, options: RenderOptions) -> str:
    lines = [headline(diagnostic, options) for diagnostic in report.diagnostics]
    lines += [error_line(error, options) for error in report.errors]
    return _with_newline(lines + summary_lines(report, options))


def render_grouped(report: Report, options: RenderOptions) -> str:
    by_file: Dict[str, List[Diagnostic]] = {}
    for diagnostic in report.diagnostics:
        by_file.setdefault(diagnostic.filename, []).append(diagnostic)
    lines: List[str] = []
    for filename, diagnostics in by_file.items():
        lines.append(style(filename, options, bold=True, underline=True) + ":")
        for diagnostic in diagnostics:
            where = row_column(diagnostic.location, diagnostic.cell)
            code = style(diagnostic.code, options, fg="red", bold=True)
            lines.append(f"  {where} {code} {_fix_marker(diagnostic, options)}{diagnostic.message}")
        lines.append("")
    lines += [error_line(error, options) for error in report.errors]
    return _with_newline(lines + summary_lines(report, options))


def render_pylint(report: Report, options: RenderOptions) -> str:
    lines = [f"{d.filename}:{d.location.row}: [{d.code}] {d.message}" for d in report.diagnostics]
    return _with_newline(lines)


def render_statistics(report: Report, options: RenderOptions) -> str:
    """Ruff's table: count, code, fixable marker and rule name, most frequent first."""
    statistics = rule_statistics(report, options)
    lines = []
    if statistics:
        count_width = max(len(str(s.count)) for s in statistics)
        code_width = max(len(s.code) for s in statistics)
        any_fixable = any(s.fixable for s in statistics)
        for statistic in statistics:
            marker = ("[*] " if statistic.fixable else "[ ] ") if any_fixable else ""
            lines.append(f"{statistic.count:>{count_width}}\t{statistic.code:<{code_width}}\t{marker}{statistic.name}")
    return _with_newline(lines + summary_lines(report, options))
