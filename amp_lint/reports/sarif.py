"""SARIF 2.1.0, the format code-scanning services (GitHub, Azure DevOps, IDEs) read."""

from __future__ import annotations

import os
import re
from pathlib import PurePath
from typing import Dict, List, Sequence

from amp_lint.diagnostics import Diagnostic, FileError, Location, Report, Severity, is_note
from amp_lint.files.locations import file_uri, folder_uri
from amp_lint.reports import RenderOptions

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

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

    from amp_lint.rules.urls import docs_base

    rule_index = {rule.code: index for index, rule in enumerate(rules)}
    driver = {"name": "amp-lint", "version": amp_lint.__version__, "rules": [_rule_descriptor(rule) for rule in rules]}
    if docs_base():  # only an address someone announced (`$AMP_LINT_DOCS_URL`): none is made up
        driver["informationUri"] = docs_base()
    run = {
        "tool": {"driver": driver},
        # Our columns count characters, not SARIF's default UTF-16 code units.
        "columnKind": "unicodeCodePoints",
        "results": [_result(d, rule_index) for d in report.diagnostics],
        "invocations": [_invocation(report.errors)],
    }
    # Paths below the working folder are relative to %SRCROOT%, which the log says is that folder; others
    # are absolute `file:` URIs (never `../`, which a reader resolves against a root it does not know).
    run["originalUriBaseIds"] = {"%SRCROOT%": {"uri": folder_uri(os.getcwd())}}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule_descriptor(rule: type) -> dict:
    from amp_lint.rules.urls import rule_url

    explanation = rule.explanation() or rule.summary
    descriptor = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": _what_it_does(explanation) or rule.summary},
        "help": {"text": explanation, "markdown": explanation},
        "defaultConfiguration": {"level": _LEVELS[rule.severity], "enabled": rule.default_enabled},
        "properties": {"fixApplicability": rule.fix_label()},
    }
    if rule_url(rule.code):
        descriptor["helpUri"] = rule_url(rule.code)
    return descriptor


def _what_it_does(explanation: str) -> str:
    match = re.search(r"^## What it does\n(.*?)(?=^## |\Z)", explanation, re.M | re.S)
    return match.group(1).strip() if match else ""


def _in_cell(text: str, cell, location: Location) -> str:
    return text if cell is None else f"{text} (cell {cell}, line {location.row}, column {location.column})"


def _result(diagnostic: Diagnostic, rule_index: Dict[str, int]) -> dict:
    # A notebook's rows count in its cells, not in the lines of its JSON: its regions are 1:1 (as GitHub
    # annotations are) and the message says the cell and the line; the fix, whose edits are rows of cells,
    # cannot be an artifact change of the JSON file and goes with its cells into the properties.
    cell = diagnostic.cell
    result = {
        "ruleId": diagnostic.code,
        "level": _LEVELS[diagnostic.severity],
        "message": {"text": _in_cell(diagnostic.message, cell, diagnostic.location)},
        "locations": [_location(diagnostic.filename, diagnostic.location, diagnostic.end_location, cell)],
    }
    if diagnostic.code in rule_index:
        result["ruleIndex"] = rule_index[diagnostic.code]
    if diagnostic.fix is not None and diagnostic.fix.edits and cell is None:
        result["fixes"] = [_fix(diagnostic)]
    if diagnostic.related:
        result["relatedLocations"] = [
            dict(
                _location(r.filename or diagnostic.filename, r.location, r.end_location, r.cell),
                id=number,
                message={"text": _in_cell(r.message, r.cell, r.location)},
            )
            for number, r in enumerate(diagnostic.related)
        ]
    if cell is not None:
        result["properties"] = {"cell": cell, "row": diagnostic.location.row, "column": diagnostic.location.column}
        if diagnostic.fix is not None and diagnostic.fix.edits:
            result["properties"]["fix"] = _cell_fix(diagnostic.fix)
    return result


def _cell_fix(fix) -> dict:
    return {
        "description": fix.message,
        "applicability": fix.applicability.value,
        "edits": [
            {"cell": edit.cell, "region": _region(edit.location, edit.end_location), "insertedText": edit.content}
            for edit in fix.edits
        ],
    }


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
    # A refused fix, or an iteration too large to analyse, is a note on a file that was checked, not a failure.
    invocation = {"executionSuccessful": all(is_note(error) for error in errors)}
    if errors:
        invocation["toolExecutionNotifications"] = [_notification(error) for error in errors]
    return invocation


def _notification(error: FileError) -> dict:
    physical_location = {"artifactLocation": _artifact_location(error.filename)}
    if error.location is not None and error.cell is None:
        physical_location["region"] = _region(error.location, error.location)
    location = {"physicalLocation": physical_location}
    level = "warning" if is_note(error) else "error"
    return {"level": level, "message": {"text": error.message}, "locations": [location]}


def _location(filename: str, start: Location, end: Location, cell=None) -> dict:
    if cell is not None:
        start = end = Location(1, 1)
    return {"physicalLocation": {"artifactLocation": _artifact_location(filename), "region": _region(start, end)}}


def _artifact_location(filename: str) -> dict:
    from urllib.parse import quote

    relative = os.path.relpath(os.path.abspath(filename))
    if os.path.isabs(filename) or relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return {"uri": file_uri(filename)}
    return {"uri": quote(PurePath(relative).as_posix()), "uriBaseId": "%SRCROOT%"}


def _region(start: Location, end: Location) -> dict:
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}
