"""The formats programs read: json, json-lines, github, gitlab, junit."""

from __future__ import annotations

from typing import Dict

from amp_lint.diagnostics import Diagnostic, FileError, Location, Report, Severity, is_fix_refusal, is_partial_analysis
from amp_lint.files.locations import repository_path
from amp_lint.reports import RenderOptions
from amp_lint.reports.text import row_column, rule_statistics
from amp_lint.rules.docs import rule_url

# --- json, json-lines --------------------------------------------------------------------------


def _location_dict(location: Location) -> Dict[str, int]:
    return {"row": location.row, "column": location.column}


def diagnostic_dict(diagnostic: Diagnostic) -> dict:
    """The JSON object of one diagnostic (the `json` and `json-lines` formats)."""
    fix = None
    if diagnostic.fix is not None:
        fix = {
            "applicability": diagnostic.fix.applicability.value,
            "message": diagnostic.fix.message,
            "edits": [
                _edit_dict(edit)
                for edit in diagnostic.fix.edits
            ],
        }
        if diagnostic.fix.files:  # a fix that changes other files too: every file's edits, applied together
            fix["other_files"] = [{"filename": path, "edits": [_edit_dict(e) for e in edits]} for path, edits in diagnostic.fix.files]
    return {
        "code": diagnostic.code,
        "message": diagnostic.message,
        "filename": diagnostic.filename,
        "location": _location_dict(diagnostic.location),
        "end_location": _location_dict(diagnostic.end_location),
        "fix": fix,
        "severity": diagnostic.severity.value,
        "confidence": diagnostic.confidence.value,
        "rule_name": diagnostic.rule_name,
        "url": rule_url(diagnostic.code),
        "help": f"Run `amp-lint rule {diagnostic.code}` for details",
        "noqa_row": diagnostic.location.row,
        "cell": diagnostic.cell,
        # The places the analysis went through (a helper call; with "filename", a place in another file).
        "related": [_related_dict(r) for r in diagnostic.related],
    }


def _edit_dict(edit) -> dict:
    out = {"content": edit.content, "location": _location_dict(edit.location), "end_location": _location_dict(edit.end_location)}
    if edit.cell is not None:
        out["cell"] = edit.cell  # a notebook: the rows count in this cell (one fix may edit several)
    return out


def _related_dict(related) -> dict:
    out = {
        "message": related.message,
        "location": _location_dict(related.location),
        "end_location": _location_dict(related.end_location),
    }
    if related.filename is not None:
        out["filename"] = related.filename
    if related.cell is not None:
        out["cell"] = related.cell
    return out


def error_code(error: FileError) -> str:
    """The code a file error is reported under in the machine formats (Ruff's `invalid-syntax` for one)."""
    message = error.message.split(": ", 1)[1] if error.cell is not None and ": " in error.message else error.message
    if message.startswith("syntax error"):
        return "invalid-syntax"
    if is_fix_refusal(error) or message.startswith("fixes not"):
        return "not-fixed"
    if is_partial_analysis(error):
        return "not-fully-analysed"
    return "file-error"


def error_dict(error: FileError) -> dict:
    """A file that could not be checked (or fixed), as a diagnostic of the `json` formats, as Ruff reports a
    syntax error: code `invalid-syntax`, `not-fixed` or `file-error`, no rule, no fix."""
    location = _location_dict(error.location or Location(1, 1))
    code = error_code(error)
    return {
        "code": code,
        "message": error.message,
        "filename": error.filename,
        "location": location,
        "end_location": location,
        "fix": None,
        "severity": "error",
        "confidence": "high",
        "rule_name": code,
        "url": None,
        "help": None,
        "noqa_row": None,
        "cell": error.cell,
        "related": [],
    }


def _records(report: Report) -> list:
    return [diagnostic_dict(d) for d in report.diagnostics] + [error_dict(e) for e in report.errors]


def render_json(report: Report, options: RenderOptions) -> str:
    import json

    return json.dumps(_records(report), indent=2, ensure_ascii=False) + "\n"


def render_json_lines(report: Report, options: RenderOptions) -> str:
    import json

    return "".join(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n" for record in _records(report))


def render_json_statistics(report: Report, options: RenderOptions) -> str:
    import json

    statistics = [
        {"code": s.code, "name": s.name, "count": s.count, "fixable": s.fixable}
        for s in rule_statistics(report, options)
    ]
    return json.dumps(statistics, indent=2) + "\n"


# --- github ------------------------------------------------------------------------------------

_GITHUB_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_github_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_github_property(text: str) -> str:
    return _escape_github_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: Report, options: RenderOptions) -> str:
    """GitHub Actions workflow commands, which become annotations on the pull request."""
    lines = []
    for d in report.diagnostics:
        # GitHub places an annotation by the path from the repository root, at a line of the file: a
        # notebook's cell rows are no lines of its JSON, so its annotations go to 1:1 (as Ruff's) and the
        # message says the cell.
        start, end = (Location(1, 1), Location(1, 1)) if d.cell is not None else (d.location, d.end_location)
        properties = {
            "file": repository_path(d.filename),
            "line": start.row,
            "col": start.column,
            "endLine": end.row,
            "endColumn": end.column,
            "title": f"amp-lint ({d.code})",
        }
        joined = ",".join(f"{key}={_escape_github_property(str(value))}" for key, value in properties.items())
        # GitHub shows only the message, so it repeats where the finding is, as Ruff does.
        message = f"{d.filename}:{row_column(d.location, d.cell)}: {d.code} {d.message}"
        lines.append(f"::{_GITHUB_LEVELS[d.severity]} {joined}::{_escape_github_data(message)}")
    for error in report.errors:
        # A file that could not be read or parsed fails the job: it must show on the pull request too.
        properties = {"file": repository_path(error.filename)}
        if error.location is not None and error.cell is None:
            properties.update(line=error.location.row, col=error.location.column)
        properties["title"] = "amp-lint (file error)"
        joined = ",".join(f"{key}={_escape_github_property(str(value))}" for key, value in properties.items())
        where = f":{error.location.row}:{error.location.column}" if error.location is not None else ""
        level = "warning" if is_partial_analysis(error) else "error"
        lines.append(f"::{level} {joined}::{_escape_github_data(f'{error.filename}{where}: {level}: {error.message}')}")
    return "".join(line + "\n" for line in lines)


# --- gitlab ------------------------------------------------------------------------------------

_GITLAB_SEVERITIES = {Severity.INFO: "info", Severity.WARNING: "minor", Severity.ERROR: "major"}


def _fingerprint(diagnostic: Diagnostic, occurrence: int) -> str:
    """A hash that survives lines moving: GitLab matches findings across commits by it."""
    import hashlib

    parts = (diagnostic.code, diagnostic.filename, diagnostic.message, diagnostic.source_line.strip(), str(occurrence))
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def _gitlab_lines(diagnostic: Diagnostic) -> dict:
    if diagnostic.cell is not None:  # a notebook's cell rows are no lines of its JSON: line 1, as Ruff
        return {"begin": 1, "end": 1}
    return {"begin": diagnostic.location.row, "end": diagnostic.end_location.row}


def render_gitlab(report: Report, options: RenderOptions) -> str:
    """GitLab Code Quality report (a JSON list of issues)."""
    import json

    issues = []
    # Identical findings in one file (same code, message and line text) need distinct fingerprints.
    seen: Dict[tuple, int] = {}
    for d in report.diagnostics:
        identity = (d.code, d.filename, d.message, d.source_line.strip())
        occurrence = seen.get(identity, 0)
        seen[identity] = occurrence + 1
        issues.append(
            {
                "description": f"{d.code}: {d.message}" + (f" (cell {d.cell}, line {d.location.row})" if d.cell is not None else ""),
                "check_name": d.code,
                "fingerprint": _fingerprint(d, occurrence),
                "severity": _GITLAB_SEVERITIES[d.severity],
                "location": {"path": repository_path(d.filename), "lines": _gitlab_lines(d)},
            }
        )
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"


# --- junit -------------------------------------------------------------------------------------


def render_junit(report: Report, options: RenderOptions) -> str:
    """JUnit XML: a test suite per file, a failing test case per finding, an error per unreadable file."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="amp-lint")
    suites: Dict[str, ET.Element] = {}

    def suite_for(filename: str) -> ET.Element:
        if filename not in suites:
            suites[filename] = ET.SubElement(root, "testsuite", name=filename)
        return suites[filename]

    for d in report.diagnostics:
        where = row_column(d.location, d.cell)
        case = ET.SubElement(suite_for(d.filename), "testcase", name=f"{d.code} {where}", classname=d.filename)
        failure = ET.SubElement(case, "failure", message=d.message, type=d.code)
        failure.text = f"{d.filename}:{where}: {d.code} {d.message}"
    for error in report.errors:
        case = ET.SubElement(suite_for(error.filename), "testcase", name="check", classname=error.filename)
        # A file checked with part of its analysis skipped: that part is a skipped test, not an error.
        ET.SubElement(case, "skipped" if is_partial_analysis(error) else "error", message=error.message)
    if not len(root):
        # Some CI readers reject a report without test cases; a clean run is one passing case.
        suite = ET.SubElement(root, "testsuite", name="amp-lint")
        ET.SubElement(suite, "testcase", name="No errors found", classname="amp-lint")
    for element in [root, *root]:
        _set_counts(element)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _set_counts(element) -> None:
    """The `tests`, `failures` and `errors` attributes readers use for their totals."""
    element.set("tests", str(sum(1 for _ in element.iter("testcase"))))
    element.set("failures", str(sum(1 for _ in element.iter("failure"))))
    element.set("errors", str(sum(1 for _ in element.iter("error"))))
    skipped = sum(1 for _ in element.iter("skipped"))
    if skipped:
        element.set("skipped", str(skipped))
