"""Dump the findings of every snippet the tests and the rule examples hold, plus seeded generated programs,
so that a refactor of the analysis can be compared byte for byte (issue 26: the order rules as predicates
over the protocol must not change what is found).

    python bench/order_identity.py OUT.json [--programs N]

Snippets: every rule's VALID/INVALID examples, every string literal in tests/*.py that parses as Python
and mentions a scaler or autocast, every .py under tests/ data folders. Each is checked with every rule
selected, `--show-assumed` and preview on; the findings (code, line, column, message, fix applicability
and edits) are written as JSON.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

import os  # noqa: E402

# AMP_LINT_SNIPPET_ROOT: take the tests' snippets from another checkout (the baseline's), so that tests
# added since do not change the set compared.
ROOT = Path(os.environ.get("AMP_LINT_SNIPPET_ROOT") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT / "tests"))

from amp_lint.engine.checker import Checker  # noqa: E402
from amp_lint.rules import ALL_RULES  # noqa: E402

CODES = frozenset(rule.code for rule in ALL_RULES)
WORDS = ("scaler", "GradScaler", "autocast", "unscale_")


def snippets():
    for rule in ALL_RULES:
        for i, code in enumerate(rule.valid):
            yield f"{rule.code}-valid-{i}", textwrap.dedent(code)
        for i, example in enumerate(rule.invalid):
            yield f"{rule.code}-invalid-{i}", textwrap.dedent(example.code)
    for path in sorted((ROOT / "tests").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(ROOT)
        if "tests/test_" not in str(rel) and "snippets" not in path.name and "amp_programs" not in path.name:
            if any(w in text for w in WORDS):
                yield f"{rel}", text
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        seen = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in seen:
                seen.add(node.value)
                source = textwrap.dedent(node.value)
                if not any(w in source for w in WORDS) or "\n" not in source:
                    continue
                try:
                    ast.parse(source)
                except SyntaxError:
                    continue
                yield f"{rel}:{node.lineno}", source


def programs(count: int):
    if count <= 0:
        return
    from hypothesis import HealthCheck, given, seed, settings

    import amp_programs

    found = []

    @seed(26)
    @settings(max_examples=count, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(amp_programs.programs())
    def collect(program):
        found.append(program.source)

    collect()
    for i, source in enumerate(found):
        yield f"program-{i}", source


def findings(source: str):
    out = []
    for show in (False, True):
        checker = Checker(CODES, rule_options={"preview": True}, show_assumed=show, with_edits=True)
        result = checker.check(source, "snippet.py")
        out.extend([show, d.code, repr(d)] for d in result.diagnostics)
        out.append([show, "errors", [e.message for e in result.errors]])
    return out


def main() -> None:
    target = sys.argv[1]
    count = int(sys.argv[sys.argv.index("--programs") + 1]) if "--programs" in sys.argv else 0
    dump = {}
    for name, source in list(snippets()) + list(programs(count)):
        key = name
        n = 1
        while key in dump:
            n += 1
            key = f"{name}#{n}"
        dump[key] = findings(source)
    Path(target).write_text(json.dumps(dump, indent=0, sort_keys=True, default=str))
    total = sum(1 for v in dump.values() for f in v if f[1] != "errors")
    print(f"{len(dump)} snippets, {total} findings")


if __name__ == "__main__":
    main()
