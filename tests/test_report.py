"""Every output format, checked against what its reader expects."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from amp_lint.diagnostics import (
    Applicability,
    Confidence,
    Diagnostic,
    Edit,
    FileError,
    FixSummary,
    Location,
    Report,
    Severity,
)
from amp_lint.reports import FORMATS, RenderOptions, error_lines, render
from amp_lint.reports import sarif

ANSI = re.compile(r"\x1b\[")
SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"


class FakeBackwardRule:
    code = "AMP001"
    name = "backward-inside-autocast"
    summary = "`backward()` called inside an autocast region"
    severity = Severity.ERROR
    default_enabled = True
    fix_applicability = Applicability.SAFE

    @classmethod
    def explanation(cls) -> str:
        return (
            "## What it does\nChecks for `backward()` inside `torch.autocast`.\n\n"
            "## Why is this bad?\nThe backward pass runs in the forward's precision.\n\n"
            "## Example\n```python\nwith autocast():\n    loss.backward()\n```\n"
        )

    @classmethod
    def fix_label(cls) -> str:
        return "safe"


class FakeDeprecatedRule(FakeBackwardRule):
    code = "AMP070"
    name = "deprecated-cuda-autocast"
    summary = "`torch.cuda.amp.autocast` is deprecated"
    severity = Severity.WARNING
    fix_applicability = Applicability.UNSAFE

    @classmethod
    def fix_label(cls) -> str:
        return "unsafe"


FAKE_RULES = [FakeBackwardRule, FakeDeprecatedRule]


def backward_in_autocast(row: int = 12, filename: str = "train.py", **changes) -> Diagnostic:
    """A finding with a safe fix: `loss.backward()` at columns 9..24 of its line."""
    fields = dict(
        code="AMP001",
        message="`loss.backward()` inside an autocast region",
        filename=filename,
        location=Location(row, 9),
        end_location=Location(row, 24),
        severity=Severity.ERROR,
        rule_name="backward-inside-autocast",
        fix=FixSummary(
            Applicability.SAFE,
            "Move `backward()` out of the autocast region",
            (Edit(Location(row, 1), Location(row + 1, 1), ""),),
        ),
        source_line="        loss.backward()\n",
    )
    fields.update(changes)
    return Diagnostic(**fields)


def deprecated_autocast(row: int = 3, filename: str = "train.py", **changes) -> Diagnostic:
    """A finding with an unsafe fix that spans three lines."""
    fields = dict(
        code="AMP070",
        message="`torch.cuda.amp.autocast(...)` is deprecated",
        filename=filename,
        location=Location(row, 6),
        end_location=Location(row + 2, 2),
        severity=Severity.WARNING,
        rule_name="deprecated-cuda-autocast",
        confidence=Confidence.MEDIUM,
        fix=FixSummary(
            Applicability.UNSAFE,
            "Use `torch.autocast('cuda', ...)`",
            (Edit(Location(row, 6), Location(row, 30), "torch.autocast('cuda')"),),
        ),
        source_line="with torch.cuda.amp.autocast(\n",
    )
    fields.update(changes)
    return Diagnostic(**fields)


def unfixable(row: int = 40, filename: str = "model.py", **changes) -> Diagnostic:
    fields = dict(
        code="AMP020",
        message="`optimizer.step()` on scaled gradients",
        filename=filename,
        location=Location(row, 5),
        end_location=Location(row, 21),
        severity=Severity.INFO,
        rule_name="optimizer-step-on-scaled-grads",
        source_line="    optimizer.step()",
    )
    fields.update(changes)
    return Diagnostic(**fields)


def sample_report(**changes) -> Report:
    report = Report(
        diagnostics=[deprecated_autocast(), backward_in_autocast(), unfixable()],
        errors=[FileError("broken.py", "invalid syntax", Location(2, 7)), FileError("gone.py", "No such file")],
        files_checked=4,
    )
    for name, value in changes.items():
        setattr(report, name, value)
    return report


@pytest.fixture(autouse=True)
def fake_registry(monkeypatch):
    """SARIF lists the registry's rules; the tests use their own instead of the real ones."""
    monkeypatch.setattr(sarif, "registered_rules", lambda: list(FAKE_RULES))


def text(report: Report, output_format: str = "full", **options) -> str:
    return render(report, output_format, RenderOptions(**options))


# --- all formats -------------------------------------------------------------------------------


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        text(Report(), "xml")


@pytest.mark.parametrize("output_format", FORMATS)
def test_no_ansi_codes_without_color(output_format):
    output = text(sample_report(), output_format, show_fixes=True, fix_mode=True)
    assert not ANSI.search(output)


@pytest.mark.parametrize("output_format", FORMATS)
def test_output_ends_with_one_newline(output_format):
    output = text(sample_report(), output_format)
    assert output.endswith("\n") and not output.endswith("\n\n")


@pytest.mark.parametrize("output_format", ["full", "concise", "grouped"])
def test_color_styles_text_formats(output_format):
    assert ANSI.search(text(sample_report(), output_format, color=True))


# --- full --------------------------------------------------------------------------------------


def test_full_shows_source_line_and_marker_under_the_range():
    lines = text(Report(diagnostics=[backward_in_autocast()])).splitlines()
    assert lines[:6] == [
        "train.py:12:9: AMP001 [*] `loss.backward()` inside an autocast region",
        "   |",
        "12 |         loss.backward()",
        "   |         ^^^^^^^^^^^^^^^ AMP001",
        "   |",
        "   = help: Move `backward()` out of the autocast region",
    ]
    source, marker = lines[2], lines[3]
    assert marker.index("^") == source.index("loss")
    assert marker.count("^") == len("loss.backward()")


def test_full_marks_a_multiline_range_to_the_end_of_its_first_line():
    lines = text(Report(diagnostics=[deprecated_autocast()])).splitlines()
    source, marker = lines[2], lines[3]
    assert source == "3 | with torch.cuda.amp.autocast("
    assert marker == "  |      ^^^^^^^^^^^^^^^^^^^^^^^^ AMP070"
    assert marker.rindex("^") == len(source) - 1


def test_full_marker_follows_tabs_in_the_source_line():
    diagnostic = unfixable(source_line="\toptimizer.step()", location=Location(40, 2), end_location=Location(40, 18))
    lines = text(Report(diagnostics=[diagnostic])).splitlines()
    assert lines[3] == "   | \t^^^^^^^^^^^^^^^^ AMP020"


def test_full_summary_counts_findings_and_fixes():
    output = text(sample_report())  # 3 findings and 2 files that could not be checked, counted as Ruff counts them
    assert output.endswith("Found 5 errors.\n[*] 1 fixable with --fix.\n1 more with --unsafe-fixes.\n")


def test_unsafe_fixes_count_as_fixable_when_enabled():
    output = text(sample_report(), unsafe_fixes=True)
    assert "train.py:3:6: AMP070 [*] " in output
    assert "[*] 2 fixable with --fix." in output
    assert "--unsafe-fixes" not in output


def test_unsafe_fix_shows_no_marker_when_unsafe_fixes_are_off():
    output = text(Report(diagnostics=[deprecated_autocast()]))
    assert "train.py:3:6: AMP070 `torch" in output
    assert output.endswith("Found 1 error.\n1 fixable with --unsafe-fixes.\n")


def test_hidden_unsafe_fixes_counted_by_the_checker_are_reported():
    output = text(Report(diagnostics=[unfixable()], unsafe_fixable=2))
    assert output.endswith("Found 1 error.\n2 fixable with --unsafe-fixes.\n")


def test_file_errors_are_listed_before_the_summary():
    output = text(sample_report())
    assert "broken.py:2:7: error: invalid syntax\ngone.py: error: No such file\n\nFound 5 errors." in output


def test_clean_run_says_all_checks_passed():
    assert text(Report(files_checked=3)) == "All checks passed!\n"
    assert text(Report(files_checked=3), quiet=True) == ""


def test_only_file_errors_is_not_a_pass():
    output = text(Report(errors=[FileError("gone.py", "No such file")]))
    assert output == "gone.py: error: No such file\n\nFound 1 error.\n"  # counted, as Ruff's E902 (issue 44.16)


def test_quiet_prints_findings_without_summary():
    output = text(sample_report(), quiet=True)
    assert "train.py:12:9: AMP001" in output
    assert "Found" not in output and "fixable" not in output


def test_fix_mode_reports_what_was_fixed():
    report = sample_report(fixed={"train.py": {"AMP071": 1, "AMP001": 2}, "a.py": {"AMP001": 1}})
    output = text(report, fix_mode=True)
    assert "Fixed 4 errors (5 remaining).\n" in output
    assert "Found" not in output
    assert "- a.py:" not in output


def test_fix_mode_with_show_fixes_lists_fixes_per_file():
    report = Report(fixed={"train.py": {"AMP071": 1, "AMP001": 2}, "a.py": {"AMP001": 1}})
    output = text(report, fix_mode=True, show_fixes=True)
    assert output == (
        "Fixed 4 errors (0 remaining).\n"
        "- a.py:\n"
        "    1 x AMP001\n"
        "- train.py:\n"
        "    2 x AMP001\n"
        "    1 x AMP071\n"
    )


def test_fix_mode_without_fixes_reads_like_a_check():
    assert text(Report(diagnostics=[unfixable()]), fix_mode=True).endswith("Found 1 error.\n")
    assert text(Report(), fix_mode=True) == "All checks passed!\n"


def test_notebook_findings_name_their_cell():
    output = text(Report(diagnostics=[backward_in_autocast(filename="nb.ipynb", cell=2, row=3)]), "concise")
    assert output.startswith("nb.ipynb:cell 2:3:9: AMP001 [*] ")


# --- concise, grouped, pylint ------------------------------------------------------------------


def test_concise_is_one_line_per_finding_then_errors_and_summary():
    assert text(sample_report(), "concise").splitlines() == [
        "train.py:3:6: AMP070 `torch.cuda.amp.autocast(...)` is deprecated",
        "train.py:12:9: AMP001 [*] `loss.backward()` inside an autocast region",
        "model.py:40:5: AMP020 `optimizer.step()` on scaled gradients",
        "broken.py:2:7: error: invalid syntax",
        "gone.py: error: No such file",
        "Found 5 errors.",
        "[*] 1 fixable with --fix.",
        "1 more with --unsafe-fixes.",
    ]


def test_grouped_puts_findings_under_their_file():
    report = Report(diagnostics=[deprecated_autocast(), unfixable(), backward_in_autocast()])
    lines = text(report, "grouped").splitlines()
    assert lines[:7] == [
        "train.py:",
        "  3:6 AMP070 `torch.cuda.amp.autocast(...)` is deprecated",
        "  12:9 AMP001 [*] `loss.backward()` inside an autocast region",
        "",
        "model.py:",
        "  40:5 AMP020 `optimizer.step()` on scaled gradients",
        "",
    ]


def test_pylint_format():
    assert text(sample_report(), "pylint").splitlines() == [
        "train.py:3: [AMP070] `torch.cuda.amp.autocast(...)` is deprecated",
        "train.py:12: [AMP001] `loss.backward()` inside an autocast region",
        "model.py:40: [AMP020] `optimizer.step()` on scaled gradients",
    ]


def test_error_lines_for_machine_formats():
    assert error_lines(sample_report()) == ["broken.py:2:7: error: invalid syntax", "gone.py: error: No such file"]


# --- statistics --------------------------------------------------------------------------------


def statistics_report() -> Report:
    diagnostics = [unfixable(row=r) for r in (1, 2)] + [backward_in_autocast(row=r) for r in (5, 6)]
    return Report(diagnostics=diagnostics + [deprecated_autocast()])


def test_statistics_table_sorted_by_count_then_code():
    lines = text(statistics_report(), statistics=True).splitlines()
    assert lines[:3] == [
        "2\tAMP001\t[*] backward-inside-autocast",
        "2\tAMP020\t[ ] optimizer-step-on-scaled-grads",
        "1\tAMP070\t[ ] deprecated-cuda-autocast",
    ]
    assert "Found 5 errors." in lines


def test_statistics_as_json():
    statistics = json.loads(text(statistics_report(), "json", statistics=True))
    assert statistics[0] == {"code": "AMP001", "name": "backward-inside-autocast", "count": 2, "fixable": True}
    assert [s["code"] for s in statistics] == ["AMP001", "AMP020", "AMP070"]


def test_statistics_refused_for_formats_without_a_table():
    with pytest.raises(ValueError, match="--statistics"):
        text(statistics_report(), "sarif", statistics=True)


# --- json, json-lines --------------------------------------------------------------------------


def diagnostic_from_json(item: dict) -> Diagnostic:
    """What a consumer of the json format can rebuild (the source line is not part of the format)."""

    def location(data):
        return Location(data["row"], data["column"])

    fix = item["fix"]
    return Diagnostic(
        code=item["code"],
        message=item["message"],
        filename=item["filename"],
        location=location(item["location"]),
        end_location=location(item["end_location"]),
        severity=Severity(item["severity"]),
        rule_name=item["rule_name"],
        confidence=Confidence(item["confidence"]),
        fix=fix
        and FixSummary(
            Applicability(fix["applicability"]),
            fix["message"],
            tuple(Edit(location(e["location"]), location(e["end_location"]), e["content"]) for e in fix["edits"]),
        ),
        cell=item["cell"],
    )


def test_json_round_trips_every_diagnostic():
    report = sample_report()
    report.diagnostics.append(backward_in_autocast(filename="nb.ipynb", cell=4))
    items = json.loads(text(report, "json"))
    rebuilt = [diagnostic_from_json(item) for item in items[: len(report.diagnostics)]]
    assert rebuilt == [dataclasses.replace(d, source_line="") for d in report.diagnostics]
    assert [item["filename"] for item in items[len(report.diagnostics) :]] == [e.filename for e in report.errors]


def test_json_fields():
    item = json.loads(text(Report(diagnostics=[backward_in_autocast()]), "json"))[0]
    assert item["url"] is None  # no address unless $AMP_LINT_DOCS_URL announces one (issue 44.15)
    assert item["help"] == "Run `amp-lint rule AMP001` for details"
    assert item["noqa_row"] == 12
    assert item["cell"] is None
    assert item["fix"]["edits"][0] == {
        "content": "",
        "location": {"row": 12, "column": 1},
        "end_location": {"row": 13, "column": 1},
    }
    assert json.loads(text(Report(diagnostics=[unfixable()]), "json"))[0]["fix"] is None


def test_json_reports_file_errors_as_records():
    # As Ruff's `invalid-syntax` (issue 28, item 5): a file that could not be checked is a record too.
    [record] = json.loads(text(Report(errors=[FileError("gone.py", "No such file")]), "json"))
    assert record["code"] == "file-error" and record["filename"] == "gone.py" and record["fix"] is None
    assert record["location"] == {"row": 1, "column": 1}


def test_json_lines_has_one_compact_object_per_line():
    report = sample_report()
    lines = text(report, "json-lines").splitlines()
    assert [json.loads(line) for line in lines] == json.loads(text(report, "json"))
    assert all("\n" not in line and ": " not in line[:20] for line in lines)
    assert text(Report(), "json-lines") == ""


# --- github ------------------------------------------------------------------------------------


def test_github_annotation_properties_in_order():
    assert text(Report(diagnostics=[backward_in_autocast()]), "github") == (
        "::error file=train.py,line=12,col=9,endLine=12,endColumn=24,title=amp-lint (AMP001)"
        "::train.py:12:9: AMP001 `loss.backward()` inside an autocast region\n"
    )


def test_github_level_follows_severity():
    report = sample_report()
    lines = text(report, "github").splitlines()
    # One annotation per finding, then one ::error per file that could not be checked.
    expected = ["::warning", "::error", "::notice"] + ["::error"] * len(report.errors)
    assert [line.split(" ", 1)[0] for line in lines] == expected


def test_github_escapes_data_and_properties():
    diagnostic = unfixable(filename="C:/odd,name%.py", message="100% wrong\r\nsecond: line, here")
    line = text(Report(diagnostics=[diagnostic]), "github").rstrip("\n")
    assert "\n" not in line and "\r" not in line
    properties, message = line[len("::notice ") :].split("::", 1)
    assert properties.startswith("file=C%3A/odd%2Cname%25.py,line=40,")
    assert message == "C:/odd,name%25.py:40:5: AMP020 100%25 wrong%0D%0Asecond: line, here"


# --- sarif -------------------------------------------------------------------------------------


def sarif_log(report: Report) -> dict:
    return json.loads(text(report, "sarif"))


def validate_sarif(log: dict) -> None:
    import jsonschema

    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    # The schema's references are all internal (#/definitions/...): nothing is fetched.
    validator_class = jsonschema.validators.validator_for(schema)
    assert validator_class is jsonschema.Draft4Validator
    validator_class(schema, format_checker=validator_class.FORMAT_CHECKER).validate(log)


def test_sarif_is_valid_against_the_schema():
    validate_sarif(sarif_log(sample_report()))


def test_sarif_of_a_clean_run_is_valid():
    log = sarif_log(Report())
    validate_sarif(log)
    assert log["runs"][0]["results"] == []
    assert log["runs"][0]["invocations"] == [{"executionSuccessful": True}]


def test_sarif_lists_every_rule_with_its_documentation():
    driver = sarif_log(Report())["runs"][0]["tool"]["driver"]
    import amp_lint

    assert driver["name"] == "amp-lint"
    assert driver["version"] == amp_lint.__version__
    first = driver["rules"][0]
    assert [rule["id"] for rule in driver["rules"]] == ["AMP001", "AMP070"]
    assert first["name"] == "backward-inside-autocast"
    assert first["shortDescription"]["text"] == FakeBackwardRule.summary
    assert first["fullDescription"]["text"] == "Checks for `backward()` inside `torch.autocast`."
    assert first["help"]["markdown"] == FakeBackwardRule.explanation()
    assert first["defaultConfiguration"]["level"] == "error"
    assert driver["rules"][1]["properties"]["fixApplicability"] == "unsafe"


def test_sarif_results_point_at_their_rule_and_region():
    results = sarif_log(sample_report())["runs"][0]["results"]
    rules = sarif_log(Report())["runs"][0]["tool"]["driver"]["rules"]
    by_rule = {result["ruleId"]: result for result in results}
    backward = by_rule["AMP001"]
    assert rules[backward["ruleIndex"]]["id"] == "AMP001"
    assert backward["level"] == "error"
    assert by_rule["AMP070"]["level"] == "warning"
    assert by_rule["AMP020"]["level"] == "note"
    assert "ruleIndex" not in by_rule["AMP020"]  # not in the (fake) registry
    location = backward["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 12, "startColumn": 9, "endLine": 12, "endColumn": 24}


def test_sarif_fixes_carry_the_edits():
    results = sarif_log(sample_report())["runs"][0]["results"]
    (fix,) = next(r for r in results if r["ruleId"] == "AMP070")["fixes"]
    assert fix["description"]["text"] == "Use `torch.autocast('cuda', ...)`"
    (change,) = fix["artifactChanges"]
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 3, "startColumn": 6, "endLine": 3, "endColumn": 30},
            "insertedContent": {"text": "torch.autocast('cuda')"},
        }
    ]
    assert "fixes" not in next(r for r in results if r["ruleId"] == "AMP020")


def test_sarif_reports_file_errors_as_notifications():
    (invocation,) = sarif_log(sample_report())["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    messages = [n["message"]["text"] for n in invocation["toolExecutionNotifications"]]
    assert messages == ["invalid syntax", "No such file"]


def test_sarif_uses_file_uris_for_absolute_paths(tmp_path):
    path = tmp_path / "my dir" / "train.py"
    log = sarif_log(Report(diagnostics=[backward_in_autocast(filename=str(path))]))
    validate_sarif(log)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == path.as_uri()
    assert "%20" in uri


def test_sarif_with_the_real_registry_is_valid():
    try:
        from amp_lint.rules import ALL_RULES
    except ImportError:
        pytest.skip("the rule registry does not import")
    validate_sarif(sarif.sarif_log(sample_report(), ALL_RULES))


# --- junit -------------------------------------------------------------------------------------


def test_junit_has_a_suite_per_file_and_a_failure_per_finding():
    root = ET.fromstring(text(sample_report(), "junit"))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("5", "3", "2")
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert list(suites) == ["train.py", "model.py", "broken.py", "gone.py"]
    assert suites["train.py"].get("failures") == "2"
    failures = [case.find("failure") for case in suites["train.py"].iter("testcase")]
    assert [f.get("type") for f in failures] == ["AMP070", "AMP001"]
    assert failures[1].get("message") == "`loss.backward()` inside an autocast region"
    assert suites["gone.py"].find("testcase/error").get("message") == "No such file"


def test_junit_escapes_markup():
    message = 'a < b && "c" > d'
    root = ET.fromstring(text(Report(diagnostics=[unfixable(message=message, filename="x&y.py")]), "junit"))
    failure = root.find("testsuite/testcase/failure")
    assert failure.get("message") == message
    assert failure.text.endswith(message)
    assert root.find("testsuite").get("name") == "x&y.py"


def test_junit_clean_run_is_one_passing_case():
    root = ET.fromstring(text(Report(), "junit"))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "0", "0")
    assert root.find("testsuite/testcase").get("name") == "No errors found"


# --- gitlab ------------------------------------------------------------------------------------


def gitlab_issues(*diagnostics) -> list:
    return json.loads(text(Report(diagnostics=list(diagnostics)), "gitlab"))


def test_gitlab_code_quality_fields():
    issue = gitlab_issues(backward_in_autocast())[0]
    assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
    assert issue["check_name"] == "AMP001"
    assert "`loss.backward()` inside an autocast region" in issue["description"]
    assert issue["location"] == {"path": "train.py", "lines": {"begin": 12, "end": 12}}


def test_gitlab_severities():
    issues = gitlab_issues(unfixable(), deprecated_autocast(), backward_in_autocast())
    assert [issue["severity"] for issue in issues] == ["info", "minor", "major"]


def test_gitlab_fingerprint_survives_a_line_shift():
    before = gitlab_issues(backward_in_autocast(row=12))[0]["fingerprint"]
    after = gitlab_issues(backward_in_autocast(row=30))[0]["fingerprint"]
    assert before == after


def test_gitlab_fingerprint_changes_with_the_finding():
    fingerprints = {
        gitlab_issues(diagnostic)[0]["fingerprint"]
        for diagnostic in (
            backward_in_autocast(),
            backward_in_autocast(filename="other.py"),
            backward_in_autocast(message="another message"),
            backward_in_autocast(source_line="        total.backward()"),
            unfixable(),
        )
    }
    assert len(fingerprints) == 5


def test_gitlab_fingerprints_are_unique_for_identical_findings():
    issues = gitlab_issues(backward_in_autocast(row=12), backward_in_autocast(row=20))
    assert issues[0]["fingerprint"] != issues[1]["fingerprint"]
