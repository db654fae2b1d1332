"""The formats programs read: json, json-lines, github, gitlab, junit."""

from __future__ import annotations

from typing import Dict

from amp_lint.diagnostics import Diagnostic, Location, Report, Severity
from amp_lint.reports import RenderOptions
from amp_lint.reports.text import rule_statistics
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
                {
                    "content": edit.content,
                    "location": _location_dict(edit.location),
                    "end_location": _location_dict(edit.end_location),
                }
                for edit in diagnostic.fix.edits
            ],
        }
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


def _related_dict(related) -> dict:
    out = {
        "message": related.message,
        "location": _location_dict(related.location),
        "end_location": _location_dict(related.end_location),
    }
    if related.filename is not None:
        out["filename"] = related.filename
    return out


def render_json(report: Report, options: RenderOptions) -> str:
    import json

    return json.dumps([diagnostic_dict(d) for d in report.diagnostics], indent=2, ensure_ascii=False) + "\n"


def render_json_lines(report: Report, options: RenderOptions) -> str:
    import json

    return "".join(
        json.dumps(diagnostic_dict(d), ensure_ascii=False, separators=(",", ":")) + "\n" for d in report.diagnostics
    )


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
        properties = {
            "file": d.filename,
            "line": d.location.row,
            "col": d.location.column,
            "endLine": d.end_location.row,
            "endColumn": d.end_location.column,
            "title": f"amp-lint ({d.code})",
        }
        joined = ",".join(f"{key}={_escape_github_property(str(value))}" for key, value in properties.items())
        # GitHub shows only the message, so it repeats where the finding is, as Ruff does.
        message = f"{d.filename}:{d.location.row}:{d.location.column}: {d.code} {d.message}"
        lines.append(f"::{_GITHUB_LEVELS[d.severity]} {joined}::{_escape_github_data(message)}")
    for error in report.errors:
        # A file that could not be read or parsed fails the job: it must show on the pull request too.
        properties = {"file": error.filename}
        if error.location is not None:
            properties.update(line=error.location.row, col=error.location.column)
        properties["title"] = "amp-lint (file error)"
        joined = ",".join(f"{key}={_escape_github_property(str(value))}" for key, value in properties.items())
        where = f":{error.location.row}:{error.location.column}" if error.location is not None else ""
        lines.append(f"::error {joined}::{_escape_github_data(f'{error.filename}{where}: error: {error.message}')}")
    return "".join(line + "\n" for line in lines)


# --- gitlab ------------------------------------------------------------------------------------

_GITLAB_SEVERITIES = {Severity.INFO: "info", Severity.WARNING: "minor", Severity.ERROR: "major"}


def _fingerprint(diagnostic: Diagnostic, occurrence: int) -> str:
    """A hash that survives lines moving: GitLab matches findings across commits by it."""
    import hashlib

    parts = (diagnostic.code, diagnostic.filename, diagnostic.message, diagnostic.source_line.strip(), str(occurrence))
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


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
                "description": f"{d.code}: {d.message}",
                "check_name": d.code,
                "fingerprint": _fingerprint(d, occurrence),
                "severity": _GITLAB_SEVERITIES[d.severity],
                "location": {"path": d.filename, "lines": {"begin": d.location.row, "end": d.end_location.row}},
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
        where = f"{d.location.row}:{d.location.column}"
        case = ET.SubElement(suite_for(d.filename), "testcase", name=f"{d.code} {where}", classname=d.filename)
        failure = ET.SubElement(case, "failure", message=d.message, type=d.code)
        failure.text = f"{d.filename}:{where}: {d.code} {d.message}"
    for error in report.errors:
        case = ET.SubElement(suite_for(error.filename), "testcase", name="check", classname=error.filename)
        ET.SubElement(case, "error", message=error.message)
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
