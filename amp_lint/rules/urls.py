"""Where each rule's documentation lives, for every output that links to a rule.

The pages are generated from the rule classes by `python -m amp_lint.rules.docs`: `docs/rules/<CODE>.md` in a
checkout, and the same pages inside the package (`amp_lint/server/rule_pages/<CODE>.md`, package data), so an
installed wheel has them too; `amp-lint rule CODE` prints a rule's page offline. A report links to a page only
at an address someone announced: `$AMP_LINT_DOCS_URL`, where you host the `docs/rules` folder (such as
`https://<your host>/amp-lint/blob/<commit>/docs/rules`). Without it a finding's JSON `url` is null (as Ruff's
is for a finding without a page) and SARIF has no `helpUri`: the `help` field says `amp-lint rule CODE`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

DOCS_FOLDER = "docs/rules"
SHIPPED_PAGES = Path(__file__).resolve().parents[1] / "server" / "rule_pages"  # package data: in every install


def docs_base() -> Optional[str]:
    """`$AMP_LINT_DOCS_URL` without its trailing slash; None when it is not set."""
    return os.environ.get("AMP_LINT_DOCS_URL", "").strip().rstrip("/") or None


def rule_url(code: str) -> Optional[str]:
    """The address of a rule's page for reports (JSON `url`, SARIF `helpUri`): under `$AMP_LINT_DOCS_URL`;
    None when it is not set (no address is made up)."""
    base = docs_base()
    return f"{base}/{code.upper()}.md" if base else None


def rule_uri(code: str) -> Optional[str]:
    """An absolute URI an editor can open: the hosted page, else the page shipped in the installed package
    (`file://...`), else None."""
    hosted = rule_url(code)
    if hosted:
        return hosted
    page = SHIPPED_PAGES / f"{code.upper()}.md"
    return page.as_uri() if page.is_file() else None
