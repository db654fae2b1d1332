"""Where each rule's documentation lives: one scheme, used by every output that links to a rule.

The pages are `docs/rules/<CODE>.md` of this repository, generated from the rule classes by
`python -m amp_lint.rules.docs`; the page name is the code, so it never changes. `$AMP_LINT_DOCS_URL` is the
address where you host them (`https://<your host>/amp-lint/blob/<commit>/docs/rules`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

DOCS_FOLDER = "docs/rules"
_CHECKOUT_DOCS = Path(__file__).resolve().parents[2] / DOCS_FOLDER


def _hosted_base() -> str:
    return os.environ.get("AMP_LINT_DOCS_URL", "").rstrip("/")


def rule_url(code: str) -> str:
    """The stable address of a rule's page for reports (JSON `url`): the hosted page when
    `$AMP_LINT_DOCS_URL` is set, else its path in this repository (`docs/rules/AMP010.md`)."""
    return f"{_hosted_base() or DOCS_FOLDER}/{code.upper()}.md"


def rule_uri(code: str) -> Optional[str]:
    """An absolute URI an editor can open (LSP `codeDescription.href`): the hosted page, else the page in
    the checkout amp-lint runs from (`file://...`), else None (an installed wheel carries no docs)."""
    base = _hosted_base()
    if base:
        return f"{base}/{code.upper()}.md"
    page = _CHECKOUT_DOCS / f"{code.upper()}.md"
    return page.as_uri() if page.is_file() else None
