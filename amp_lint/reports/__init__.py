"""Stage 8, reports. Output formats: each one is a pure function from a `Report` to text.

`render` picks the format. The text formats (`full`, `concise`, `grouped`) include file errors and a
summary; the machine formats carry only what their consumer reads, so the command line prints
`error_lines(report)` to stderr for them.

May import: `amp_lint.rules` (for rule metadata) and every stage below it; never the engine.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import List

from amp_lint.diagnostics import Report
from amp_lint.files.settings import OUTPUT_FORMATS as FORMATS

# Formats meant for people: they show file errors and a summary themselves.
TEXT_FORMATS = ("full", "concise", "grouped")

# Format name -> (module in this package, function taking (report, options)).
_RENDERERS = {
    "full": ("text", "render_full"),
    "concise": ("text", "render_concise"),
    "grouped": ("text", "render_grouped"),
    "pylint": ("text", "render_pylint"),
    "json": ("machine", "render_json"),
    "json-lines": ("machine", "render_json_lines"),
    "github": ("machine", "render_github"),
    "gitlab": ("machine", "render_gitlab"),
    "junit": ("machine", "render_junit"),
    "sarif": ("sarif", "render_sarif"),
}


@dataclass
class RenderOptions:
    color: bool = False
    show_fixes: bool = False
    statistics: bool = False
    unsafe_fixes: bool = False  # whether --unsafe-fixes was on
    fix_mode: bool = False  # whether --fix ran
    quiet: bool = False
    fail_on: str = "info"  # the lowest severity that fails the run (the summary says what does not)


def render(report: Report, output_format: str, options: RenderOptions) -> str:
    """The report in `output_format`; ends with a newline unless empty.

    With `options.statistics`, a count per rule instead of the findings: a table for the text formats,
    a JSON list for `json`; other formats raise ValueError.
    """
    if output_format not in FORMATS:
        raise ValueError(f"unknown output format {output_format!r} (expected one of: {', '.join(FORMATS)})")
    from amp_lint.reports.printable import printable_report

    report = printable_report(report)
    if options.statistics:
        return _render_statistics(report, output_format, options)
    module_name, function_name = _RENDERERS[output_format]
    # Imported on demand: most runs need one format, and the hook's start-up time counts.
    module = importlib.import_module(f"{__name__}.{module_name}")
    return getattr(module, function_name)(report, options)


def error_lines(report: Report) -> List[str]:
    """One `path[:row:col]: error: message` line per file that could not be checked."""
    from amp_lint.reports.printable import printable_report
    from amp_lint.reports.text import error_line

    return [error_line(error, RenderOptions()) for error in printable_report(report).errors]


def _render_statistics(report: Report, output_format: str, options: RenderOptions) -> str:
    if output_format in TEXT_FORMATS:
        from amp_lint.reports.text import render_statistics

        return render_statistics(report, options)
    if output_format == "json":
        from amp_lint.reports.machine import render_json_statistics

        return render_json_statistics(report, options)
    raise ValueError(f"--statistics is not supported with output format {output_format!r}")


def color_wanted(choice: str, environ, isatty: bool) -> bool:
    """`--color` first; then NO_COLOR (any non-empty value) over every request for colour, as in Ruff 0.17;
    then FORCE_COLOR (non-empty; `0` or `false` turn colour off, as in Node's tools) and CLICOLOR_FORCE
    (non-empty, not `0`); `CLICOLOR=0` turns colour off; then whether the output is a terminal."""
    if choice in ("always", "never"):
        return choice == "always"
    if environ.get("NO_COLOR"):
        return False
    force = environ.get("FORCE_COLOR", "")
    if force:
        return force.strip().lower() not in ("0", "false")
    if environ.get("CLICOLOR_FORCE", "0") != "0":
        return True
    if environ.get("CLICOLOR") == "0":
        return False
    return isatty
