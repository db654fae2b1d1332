"""Where each rule's documentation lives: one URL scheme, used by every output that links to a rule."""

from __future__ import annotations

DOCS_BASE = "https://github.com/amp-lint/amp-lint/blob/main/docs/rules"


def rule_url(code: str) -> str:
    """The page that documents rule `code` (`AMP010` -> .../docs/rules/AMP010.md)."""
    return f"{DOCS_BASE}/{code.upper()}.md"
