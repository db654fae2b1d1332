"""`amp-lint rule CODE` and `amp-lint rules`: one rule's explanation, and the list of rules, as text or JSON."""

from __future__ import annotations

import json
from typing import Iterable


def _fix_words(rule) -> str:
    if rule.fix_applicability is None:
        return "none"
    if rule.fix_applicability.value == "safe":
        return "safe (applied by --fix)"
    return "unsafe (applied by --fix --unsafe-fixes)"


def rule_record(rule) -> dict:
    from amp_lint.rules.docs import rule_url

    return {
        "code": rule.code,
        "name": rule.name,
        "summary": rule.summary,
        "severity": rule.severity.value,
        "default_enabled": rule.default_enabled and not rule.preview,
        "preview": rule.preview,
        "fix": rule.fix_label(),
        "url": rule_url(rule.code),
        "explanation": rule.explanation(),
    }


def rule_text(rule) -> str:
    if rule.preview:
        default = "no: a preview rule, it runs only with --preview (or `preview = true`)"
    else:
        default = "yes" if rule.default_enabled else "no (select it with --select " + rule.code + ")"
    return (
        f"# {rule.name} ({rule.code})\n\n{rule.summary}.\n\nSeverity: {rule.severity.value}\n"
        f"On by default: {default}\nFix: {_fix_words(rule)}\n\n{rule.explanation()}\n"
    )


def rule_json(rule) -> str:
    return json.dumps(rule_record(rule), indent=2) + "\n"


def rules_text(rules: Iterable) -> str:
    rows = [("code", "name", "default", "fix", "severity", "summary")]
    for rule in rules:
        rows.append(
            (rule.code, rule.name, _default_word(rule), rule.fix_label(), rule.severity.value, rule.summary)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths)) + "  " + row[5] + "\n" for row in rows)


def _default_word(rule) -> str:
    """"on", "off", or "preview": a preview rule runs only with `--preview`, whatever the default selection
    says (as `--show-settings` lists it, issue 44 item 10)."""
    if rule.preview:
        return "preview"
    return "on" if rule.default_enabled else "off"


def rules_json(rules: Iterable) -> str:
    return json.dumps([rule_record(rule) for rule in rules], indent=2) + "\n"
