"""Rule documentation in the editor: the pages that ship in the package, links to them, hover on a code.

The pages (`rule_pages/<CODE>.md`, package data) are the rule pages of `docs/rules/`, generated from the rule
classes by `python -m amp_lint.rules.docs`; a test keeps the copy in step. A diagnostic's link
(`codeDescription.href`) is the hosted page when `$AMP_LINT_DOCS_URL` is set, else the page inside the installed
package: it works from a wheel, not only from a source checkout. Hover shows the page of the rule whose
diagnostic is under the cursor, or whose code is under the cursor in a `# noqa: AMP…` comment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, List, Optional, Sequence

PAGES = Path(__file__).resolve().with_name("rule_pages")
_CODE = re.compile(r"\bAMP\d{3}\b", re.IGNORECASE)
_NOQA_COMMENT = re.compile(r"#\s*(?:amp-lint\s*:\s*)?noqa\b.*$", re.IGNORECASE)


def rule_href(code: str) -> Optional[str]:
    base = os.environ.get("AMP_LINT_DOCS_URL", "").rstrip("/")
    if base:
        return f"{base}/{code.upper()}.md"
    page = PAGES / f"{code.upper()}.md"
    return page.as_uri() if page.is_file() else None


def rule_markdown(code: str) -> Optional[str]:
    """The rule's page (Markdown); None for a code that names no rule."""
    code = code.upper()
    page = PAGES / f"{code}.md"
    if page.is_file():
        return page.read_text(encoding="utf-8")
    from amp_lint import rules as registry

    if code not in registry.all_codes():
        return None
    from amp_lint.rules.docs import rule_page

    return rule_page(registry.rule_by_code(code))


def codes_at(line: str, position, diagnostics: Sequence, units: Callable[[str], int]) -> List[str]:
    """The rule codes at `position` (LSP, 0-based): of the diagnostics whose range holds it, and the code
    under it in a `# noqa` comment of `line`."""
    codes: List[str] = []
    here = (position.line, position.character)
    for diagnostic in diagnostics:
        start, end = diagnostic.range.start, diagnostic.range.end
        if diagnostic.code and (start.line, start.character) <= here <= (end.line, end.character):
            codes.append(str(diagnostic.code))
    comment = _NOQA_COMMENT.search(line)
    if comment is not None:
        for match in _CODE.finditer(line, comment.start()):
            if units(line[: match.start()]) <= position.character <= units(line[: match.end()]):
                codes.append(match.group(0).upper())
    return list(dict.fromkeys(codes))
