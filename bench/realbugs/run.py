"""Run amp-lint over the realbugs corpus and report what it finds, what it misses and what it flags wrongly.

    python bench/realbugs/run.py [--amp-lint-python PY] [--only NAME,...] [--output FILE] [--no-write] [--skip-fixes]

Each case (bench/realbugs/README.md) is checked as it stands, with amp-lint's default rules, once as the
defaults show findings and once with `--show-assumed` (findings that rest on an assumption). A bug case is
found when every one of its expectations is met: one of the expected rules at one of the expected lines. A
correct shape is silent when amp-lint reports nothing on it. The tables go per principle and per rule; every
miss and every false positive is listed. For the bug cases whose expected rule has a fix, copies are fixed
with `--fix` and with `--fix --unsafe-fixes`: does the fixed file parse, is the expected finding gone, and
does the fixed text match the upstream fix where the case states it (`fix-check:`).

Writes bench/results/realbugs.md (unless --no-write). Exit status 0 when it ran (whatever the recall), 2 when
the corpus is malformed or amp-lint did not run.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import realbugs_corpus as corpus  # noqa: E402
import realbugs_report as report  # noqa: E402

RESULTS = HERE.parent / "results" / "realbugs.md"


class AmpLintFailed(Exception):
    pass


def _amp_lint_records(python: str, args: Sequence[str], paths: Sequence[Path], jobs: int) -> List[dict]:
    """Every JSON record amp-lint prints for `paths` (no configuration, no cache), tool errors included."""
    command = [python, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--exit-zero",
               "--output-format", "json", "-j", str(jobs), *args, *map(str, paths)]
    run = subprocess.run(command, capture_output=True, text=True)
    try:
        return json.loads(run.stdout or "[]")
    except ValueError:
        raise AmpLintFailed(f"amp-lint exited {run.returncode}: {run.stderr.strip()[-800:]}")


def amp_lint(python: str, args: Sequence[str], paths: Sequence[Path], jobs: int) -> List[dict]:
    """amp-lint's findings (rule codes only) for `paths`."""
    return [r for r in _amp_lint_records(python, args, paths, jobs) if r["code"].startswith("AMP")]


def rule_table(python: str) -> Dict[str, dict]:
    run = subprocess.run([python, "-m", "amp_lint", "rules", "--output-format", "json"], capture_output=True, text=True)
    try:
        return {rule["code"]: rule for rule in json.loads(run.stdout)}
    except ValueError:
        raise AmpLintFailed(f"`amp-lint rules` exited {run.returncode}: {run.stderr.strip()[-800:]}")


def by_file(findings: List[dict]) -> Dict[str, List[dict]]:
    grouped: Dict[str, List[dict]] = defaultdict(list)
    for finding in findings:
        grouped[Path(finding["filename"]).resolve().as_posix()].append(finding)
    return grouped


def met(expectation: corpus.Expectation, findings: List[dict]) -> bool:
    return any(f["code"] in expectation.rules and f["location"]["row"] in expectation.lines for f in findings)


def judge(cases: List[corpus.Case], shown: Dict[str, List[dict]], assumed: Dict[str, List[dict]],
          rules: Dict[str, dict]) -> List[dict]:
    """One verdict per case: expectations met by default / only with --show-assumed / missed; extra findings."""
    verdicts = []
    for case in cases:
        key = case.path.resolve().as_posix()
        default_findings, assumed_findings = shown.get(key, []), assumed.get(key, [])
        verdict = {"case": case, "default": default_findings, "assumed": assumed_findings, "expectations": []}
        for expectation in case.expectations:
            if met(expectation, default_findings):
                status = "found"
            elif met(expectation, assumed_findings):
                status = "assumed"
            elif not any(rules.get(rule, {}).get("default_enabled") for rule in expectation.rules):
                status = "rule off"
            else:
                status = "missed"
            verdict["expectations"].append((expectation, status))
        verdict["extra"] = [f for f in default_findings if not expected_finding(case, f)]
        verdicts.append(verdict)
    return verdicts


def expected_finding(case: corpus.Case, finding: dict) -> bool:
    return any(finding["code"] in e.rules and finding["location"]["row"] in e.lines for e in case.expectations)


def fixable(case: corpus.Case, rules: Dict[str, dict]) -> bool:
    return any(rules.get(rule, {}).get("fix") in ("safe", "unsafe") for e in case.expectations for rule in e.rules)


def fix_checks(python: str, cases: List[corpus.Case], rules: Dict[str, dict], jobs: int) -> List[dict]:
    """Fix copies of the fixable bug cases (safe, then unsafe) and judge each fixed file."""
    chosen = [case for case in cases if case.is_bug and fixable(case, rules)]
    results = {case.name: {"case": case} for case in chosen}
    if not chosen:
        return []
    for mode, extra in (("safe", ["--fix"]), ("unsafe", ["--fix", "--unsafe-fixes"])):
        with tempfile.TemporaryDirectory(prefix="realbugs-fix-") as folder:
            copies = []
            for case in chosen:
                copy = Path(folder) / case.path.name
                shutil.copyfile(case.path, copy)
                copies.append(copy)
            refusals = _refusals(_amp_lint_records(python, extra, copies, jobs))
            after = by_file(amp_lint(python, [], copies, jobs))
            for case, copy in zip(chosen, copies):
                results[case.name][mode] = _judge_fix(case, copy, after.get(copy.resolve().as_posix(), []),
                                                      refusals.get(copy.name, []))
    return list(results.values())


def _refusals(records: List[dict]) -> Dict[str, List[str]]:
    """The fixes amp-lint refused (its `not-fixed` records), by file name."""
    refused: Dict[str, List[str]] = defaultdict(list)
    for record in records:
        if record["code"] == "not-fixed":
            message = re.sub(r"(?:/[^\s/:]+)+/([^\s/:]+\.py)", r"\1", record["message"])
            refused[Path(record["filename"]).name].append(message)
    return refused


def _judge_fix(case: corpus.Case, copy: Path, findings_after: List[dict], refusals: List[str]) -> dict:
    before, after = case.path.read_text(encoding="utf-8"), copy.read_text(encoding="utf-8")
    try:
        ast.parse(after)
        parses = True
    except SyntaxError:
        parses = False
    expected_rules = {rule for e in case.expectations for rule in e.rules}
    gone = not any(f["code"] in expected_rules for f in findings_after)
    if case.fix_check is None:
        upstream = "not stated"
    else:
        code = "\n".join(line for line in after.splitlines() if not line.lstrip().startswith("#"))
        upstream = "yes" if re.search(case.fix_check, code) else "no"
    return {"changed": before != after, "parses": parses, "gone": gone, "upstream": upstream, "refusals": refusals}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--amp-lint-python", default=sys.executable, help="the Python whose amp_lint runs")
    parser.add_argument("--cases", type=Path, default=HERE, help="the corpus folder (bugs/ and correct/)")
    parser.add_argument("--only", default="", help="comma-separated case names (file stems) to run")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--no-write", action="store_true", help="print the report, write no file")
    parser.add_argument("--skip-fixes", action="store_true", help="do not run the --fix checks")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    only = [name for name in args.only.split(",") if name] or None
    cases = corpus.load_cases(args.cases, only)
    errors = corpus.corpus_errors(cases)
    if errors or not cases:
        print("\n".join(errors) or "no cases", file=sys.stderr)
        return 2
    try:
        rules = rule_table(args.amp_lint_python)
        paths = [case.path for case in cases]
        shown = by_file(amp_lint(args.amp_lint_python, [], paths, args.jobs))
        assumed = by_file(amp_lint(args.amp_lint_python, ["--show-assumed"], paths, args.jobs))
        fixes = [] if args.skip_fixes else fix_checks(args.amp_lint_python, cases, rules, args.jobs)
    except AmpLintFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    verdicts = judge(cases, shown, assumed, rules)
    text = report.render(verdicts, fixes, rules)
    print(text)
    if not args.no_write:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
