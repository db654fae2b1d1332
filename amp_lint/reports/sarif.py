"""SARIF 2.1.0, the format code-scanning services (GitHub, Azure DevOps, IDEs) read."""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Dict, List, Sequence

from amp_lint.diagnostics import Diagnostic, FileError, Location, Report, Severity
from amp_lint.reports import RenderOptions

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI = "https://github.com/amp-lint/amp-lint"

_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def registered_rules() -> List[type]:
    from amp_lint.rules import ALL_RULES

    return list(ALL_RULES)


def render_sarif(report: Report, options: RenderOptions) -> str:
    import json

    return json.dumps(sarif_log(report, registered_rules()), indent=2, ensure_ascii=False) + "\n"


def sarif_log(report: Report, rules: Sequence[type]) -> dict:
    """One SARIF log with one run; `rules` are the rule classes the tool knows (all of them, like Ruff)."""
    import amp_lint

    rule_index = {rule.code: index for index, rule in enumerate(rules)}
    run = {
        "tool": {
            "driver": {
                "name": "amp-lint",
                "informationUri": INFORMATION_URI,
                "version": amp_lint.__version__,
                "rules": [_rule_descriptor(rule) for rule in rules],
            }
        },
        # Our columns count characters, not SARIF's default UTF-16 code units.
        "columnKind": "unicodeCodePoints",
        "results": [_result(d, rule_index) for d in report.diagnostics],
        "invocations": [_invocation(report.errors)],
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule_descriptor(rule: type) -> dict:
    explanation = rule.explanation() or rule.summary
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": _what_it_does(explanation) or rule.summary},
        "help": {"text": explanation, "markdown": explanation},
        "defaultConfiguration": {"level": _LEVELS[rule.severity], "enabled": rule.default_enabled},
        "properties": {"fixApplicability": rule.fix_label()},
    }


def _what_it_does(explanation: str) -> str:
    match = re.search(r"^## What it does\n(.*?)(?=^## |\Z)", explanation, re.M | re.S)
    return match.group(1).strip() if match else ""


def _result(diagnostic: Diagnostic, rule_index: Dict[str, int]) -> dict:
    result = {
        "ruleId": diagnostic.code,
        "level": _LEVELS[diagnostic.severity],
        "message": {"text": diagnostic.message},
        "locations": [_location(diagnostic.filename, diagnostic.location, diagnostic.end_location)],
    }
    if diagnostic.code in rule_index:
        result["ruleIndex"] = rule_index[diagnostic.code]
    if diagnostic.fix is not None and diagnostic.fix.edits:
        result["fixes"] = [_fix(diagnostic)]
    if diagnostic.related:
        result["relatedLocations"] = [
            dict(
                _location(r.filename or diagnostic.filename, r.location, r.end_location),
                id=number,
                message={"text": r.message},
            )
            for number, r in enumerate(diagnostic.related)
        ]
    if diagnostic.cell is not None:
        result["properties"] = {"cell": diagnostic.cell}
    return result


def _fix(diagnostic: Diagnostic) -> dict:
    fix = diagnostic.fix
    replacements = [
        {"deletedRegion": _region(edit.location, edit.end_location), "insertedContent": {"text": edit.content}}
        for edit in fix.edits
    ]
    change = {"artifactLocation": _artifact_location(diagnostic.filename), "replacements": replacements}
    return {
        "description": {"text": fix.message},
        "artifactChanges": [change],
        "properties": {"applicability": fix.applicability.value},
    }


def _invocation(errors: Sequence[FileError]) -> dict:
    invocation = {"executionSuccessful": not errors}
    if errors:
        invocation["toolExecutionNotifications"] = [_notification(error) for error in errors]
    return invocation


def _notification(error: FileError) -> dict:
    physical_location = {"artifactLocation": _artifact_location(error.filename)}
    if error.location is not None:
        physical_location["region"] = _region(error.location, error.location)
    location = {"physicalLocation": physical_location}
    return {"level": "error", "message": {"text": error.message}, "locations": [location]}


def _location(filename: str, start: Location, end: Location) -> dict:
    return {"physicalLocation": {"artifactLocation": _artifact_location(filename), "region": _region(start, end)}}


def _artifact_location(filename: str) -> dict:
    from urllib.parse import quote

    path = PurePath(filename)
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": quote(path.as_posix()), "uriBaseId": "%SRCROOT%"}


def _region(start: Location, end: Location) -> dict:
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}
