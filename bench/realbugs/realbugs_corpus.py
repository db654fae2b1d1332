"""The realbugs corpus: reading and checking the cases' headers (no amp-lint here).

A case is one Python file under `bugs/` (a reported AMP bug) or `correct/` (a correct shape that looks like a
mistake). Its header is the block of `#` comment lines at the top of the file, one `key: value` a line:

    # origin: <owner/name> | <reference> | <path in the project, or ->
    # also: <more references, free text>                      (optional, repeatable)
    # principle: <1-8>                                          (7 for every correct shape)
    # expect: <RULE[|RULE...]> line <N[,N...]>                  (repeatable; bugs only)
    # expect: none                                              (correct shapes only)
    # tempts: <RULE[, RULE...]>                                 (optional: rules this correct shape could trip)
    # summary: <one line, in our words>
    # upstream-fix: <what the upstream fix did>                 (optional)
    # fix-check: <Python regex the fixed file should match>     (optional)

`<reference>` is a GitHub issue or pull request URL as found, `code@<commit>` for a file read at that commit, or
`code-search` for a code-search hit that named the repository and path. An expectation is met when amp-lint reports
one of its rules at one of its lines (alternatives exist where two rules or two lines describe the same defect).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
KINDS = ("bugs", "correct")
KNOWN_KEYS = {"origin", "also", "principle", "expect", "tempts", "summary", "upstream-fix", "fix-check"}
REQUIRED_KEYS = ("origin", "principle", "expect", "summary")
PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
GITHUB_REFERENCE = re.compile(r"^https://github\.com/(?P<repo>[^/\s]+/[^/\s]+)/(?:issues|pull)/\d+$")
CODE_REFERENCE = re.compile(r"^code@[0-9a-f]{40}$|^code-search$")
EXPECTATION = re.compile(r"^(?P<rules>AMP\d{3}(?:\|AMP\d{3})*) line (?P<lines>\d+(?:,\d+)*)$")
RULE = re.compile(r"^AMP\d{3}$")


@dataclass(frozen=True)
class Expectation:
    """One finding a bug case must produce: any of `rules` at any of `lines`."""

    rules: Tuple[str, ...]
    lines: Tuple[int, ...]

    @property
    def label(self) -> str:
        return "|".join(self.rules) + " line " + ",".join(str(n) for n in self.lines)


@dataclass
class Case:
    path: Path
    kind: str  # "bugs" or "correct"
    project: str = ""
    reference: str = ""
    project_path: str = ""
    principle: int = 0
    expectations: List[Expectation] = field(default_factory=list)
    expects_none: bool = False
    tempts: Tuple[str, ...] = ()
    summary: str = ""
    upstream_fix: str = ""
    fix_check: Optional[str] = None
    also: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def is_bug(self) -> bool:
        return self.kind == "bugs"


def header_lines(text: str) -> List[Tuple[int, str]]:
    """The leading `#` lines of a file, numbered from 1."""
    header = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("#"):
            break
        header.append((number, line))
    return header


def parse_case(path: Path, kind: str) -> Case:
    case = Case(path=path, kind=kind)
    text = path.read_text(encoding="utf-8")
    for number, line in header_lines(text):
        key, sep, value = line[1:].strip().partition(":")
        key, value = key.strip(), value.strip()
        if not sep or key not in KNOWN_KEYS:
            case.errors.append(f"line {number}: not a `key: value` header line with a known key: {line!r}")
            continue
        if key == "origin":
            _read_origin(case, value, number)
        elif key == "also":
            case.also.append(value)
        elif key == "principle":
            case.principle = int(value) if value.isdigit() else -1
        elif key == "expect":
            _read_expectation(case, value, number)
        elif key == "tempts":
            case.tempts = tuple(rule.strip() for rule in value.split(","))
        elif key == "summary":
            case.summary = value
        elif key == "upstream-fix":
            case.upstream_fix = value
        elif key == "fix-check":
            case.fix_check = value
    _check_case(case, text)
    return case


def _read_origin(case: Case, value: str, number: int) -> None:
    parts = [part.strip() for part in value.split("|")]
    if len(parts) != 3:
        case.errors.append(f"line {number}: origin needs `project | reference | path`")
        return
    case.project, case.reference, case.project_path = parts


def _read_expectation(case: Case, value: str, number: int) -> None:
    if value == "none":
        case.expects_none = True
        return
    match = EXPECTATION.match(value)
    if not match:
        case.errors.append(f"line {number}: expectation {value!r} is not `RULE[|RULE] line N[,N]` or `none`")
        return
    rules = tuple(match.group("rules").split("|"))
    lines = tuple(int(n) for n in match.group("lines").split(","))
    case.expectations.append(Expectation(rules, lines))


def _check_case(case: Case, text: str) -> None:
    seen = {line[1:].split(":", 1)[0].strip() for _, line in header_lines(text)}
    for key in REQUIRED_KEYS:
        if key not in seen:
            case.errors.append(f"missing `{key}:` header line")
    if case.project and not PROJECT.match(case.project):
        case.errors.append(f"project {case.project!r} is not owner/name")
    github = GITHUB_REFERENCE.match(case.reference)
    if case.reference and not (github or CODE_REFERENCE.match(case.reference)):
        case.errors.append(f"reference {case.reference!r} is neither an issue/PR URL nor code@<commit> / code-search")
    if github and github.group("repo").lower() != case.project.lower():
        case.errors.append(f"reference {case.reference!r} is not in project {case.project!r}")
    if case.is_bug:
        if not 1 <= case.principle <= 8:
            case.errors.append(f"principle {case.principle} is not one of 1-8")
        if case.expects_none or not case.expectations:
            case.errors.append("a bug case needs at least one `expect: RULE line N`, not `none`")
        if not github:
            case.errors.append("a bug case needs an upstream issue or pull request URL as its reference")
    else:
        if case.principle != 7:
            case.errors.append("a correct shape belongs to principle 7")
        if not case.expects_none or case.expectations:
            case.errors.append("a correct shape says `expect: none` and nothing else")
    for rule in case.tempts:
        if not RULE.match(rule):
            case.errors.append(f"tempts names {rule!r}, not a rule code")
    if case.fix_check is not None:
        try:
            re.compile(case.fix_check)
        except re.error as error:
            case.errors.append(f"fix-check is not a regular expression: {error}")
    lines = text.splitlines()
    for expectation in case.expectations:
        for number in expectation.lines:
            if not 1 <= number <= len(lines) or not lines[number - 1].strip() or lines[number - 1].lstrip().startswith("#"):
                case.errors.append(f"expected line {number} is not a line of code in the file")
    try:
        ast.parse(text, filename=str(case.path))
    except SyntaxError as error:
        case.errors.append(f"does not parse: {error}")


def load_cases(root: Path = HERE, only: Optional[List[str]] = None) -> List[Case]:
    cases = []
    for kind in KINDS:
        for path in sorted((root / kind).glob("*.py")):
            if only and path.stem not in only:
                continue
            cases.append(parse_case(path, kind))
    return cases


def corpus_errors(cases: List[Case]) -> List[str]:
    errors = [f"{case.kind}/{case.path.name}: {error}" for case in cases for error in case.errors]
    names: Dict[str, int] = {}
    for case in cases:
        names[case.name] = names.get(case.name, 0) + 1
    errors.extend(f"case name {name!r} is used {count} times" for name, count in names.items() if count > 1)
    return errors
