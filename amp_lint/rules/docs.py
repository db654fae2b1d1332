"""Generate the README's rules table from the rule registry.

`python -m amp_lint.rules.docs` rewrites the table between the markers in README.md;
`python -m amp_lint.rules.docs --check` exits 1 when the README is out of date (a test runs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

START = "<!-- rules-table:start -->"
END = "<!-- rules-table:end -->"


def rules_table() -> str:
    from amp_lint.rules import ALL_RULES

    lines = [
        "| code | name | summary | severity | default | fix |",
        "|---|---|---|---|---|---|",
    ]
    for rule in ALL_RULES:
        lines.append(
            f"| {rule.code} | `{rule.name}` | {rule.summary} | {rule.severity.value} | "
            f"{'on' if rule.default_enabled else 'off'} | {rule.fix_label()} |"
        )
    return "\n".join(lines)


def updated_readme(text: str) -> str:
    start = text.index(START) + len(START)
    end = text.index(END)
    return text[:start] + "\n" + rules_table() + "\n" + text[end:]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    readme = Path(__file__).resolve().parents[2] / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = updated_readme(text)
    if "--check" in argv:
        if new != text:
            print("README.md's rules table is out of date: run `python -m amp_lint.rules.docs`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
