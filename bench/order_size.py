"""Line counts for issue 26's "the order rules are predicates over the protocol (a fraction of today's size)".

    python bench/order_size.py [ROOT]

- analysis: amp_lint/analysis/order*.py + protocol.py + typestate.py, all lines and code lines;
- rules: the order rules (AMP020-025, 030, 031, 040-043, 081) and rules/_helpers.py, code lines only:
  no docstrings, no VALID/INVALID examples, no fix builders (functions whose name says fix), no comments
  or blank lines (and, on a second line, the same with the fix builders counted).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ORDER_RULES = ("amp020", "amp021", "amp022", "amp023", "amp024", "amp025", "amp030", "amp031", "amp040", "amp041", "amp042", "amp043", "amp081")


def code_lines(path: Path, drop_examples: bool, keep_fixes: bool = False) -> int:
    text = path.read_text()
    tree = ast.parse(text)
    skip = set()

    def span(node):
        skip.update(range(node.lineno, node.end_lineno + 1))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            span(body[0])
        if drop_examples:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("valid", "invalid") for t in node.targets):
                span(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "fix" in node.name.lower() and not keep_fixes:
                span(node)
    count = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if number in skip or not stripped or stripped.startswith("#"):
            continue
        count += 1
    return count


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    analysis = sorted((root / "amp_lint/analysis").glob("order*.py")) + [root / "amp_lint/analysis/protocol.py", root / "amp_lint/analysis/typestate.py"]
    total = sum(len(p.read_text().splitlines()) for p in analysis)
    code = sum(code_lines(p, False) for p in analysis)
    print(f"analysis order*/protocol/typestate: {total} lines, {code} code lines")
    for p in analysis:
        print(f"  {p.name}: {len(p.read_text().splitlines())} lines, {code_lines(p, False)} code")
    rules = [p for p in sorted((root / "amp_lint/rules").glob("amp0*.py")) if p.name[:6] in ORDER_RULES]
    rules.append(root / "amp_lint/rules/_helpers.py")
    rcode = sum(code_lines(p, True) for p in rules)
    rtotal = sum(len(p.read_text().splitlines()) for p in rules)
    print(f"order rules + _helpers: {rtotal} lines, {rcode} code lines (no docs, examples, fix builders)")
    # The same with the functions named "fix" counted: an order rule's `fix` hook chooses among its fixes, which
    # the rule's `check` used to do (and was counted for).
    with_fixes = sum(code_lines(p, True, keep_fixes=True) for p in rules)
    print(f"  (with fix builders and fix hooks counted: {with_fixes} code lines)")
    for p in rules:
        print(f"  {p.name}: {code_lines(p, True)}")


if __name__ == "__main__":
    main()
