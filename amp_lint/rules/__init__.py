"""Stage 6, rules: the rule API (`base`) and the registry, every rule class in code order. Adding a rule is
one file; `python -m amp_lint.rules.docs` then adds it to the table (`_table.py`), the README and the docs.
A rule is a predicate over the analysis model; it builds fixes with `amp_lint.fixes.builder` and never walks
the tree itself.

May import: `amp_lint.conversion`, `amp_lint.fixes`, `amp_lint.analysis`, `amp_lint.parse`, `amp_lint.files`,
`amp_lint.diagnostics`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, List, Type

from amp_lint.rules._table import RULES, RuleEntry

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.rules.base import Rule

# `RULES` (rules/_table.py) lists every rule with what the engine reads before any file is parsed: its
# code, whether it is on by default, and the identifier patterns of the prefilter. It is generated from
# the rule classes by `python -m amp_lint.rules.docs` (a test fails while it is stale), so that a run
# whose files the prefilter rules out never imports the rules, or LibCST (a third of a pre-commit run's
# time). The classes themselves are imported on first use: `ALL_RULES`, `RULES_BY_CODE`, `rule_by_code`.


def all_codes() -> List[str]:
    return [entry.code for entry in RULES]


def default_codes() -> List[str]:
    return [entry.code for entry in RULES if entry.default_enabled]


def preview_codes() -> List[str]:
    """The rules that run only in preview mode (`--preview`)."""
    return [entry.code for entry in RULES if entry.preview]


def entries(codes) -> List[RuleEntry]:
    """The table's entries for `codes`, in code order (what `Prefilter` needs, without the classes)."""
    wanted = set(codes)
    return [entry for entry in RULES if entry.code in wanted]


def rule_by_code(code: str) -> "Type[Rule]":
    return _load()[1][code.upper()]


def discover() -> "List[Type[Rule]]":
    """Every rule class of this package, in code order, found by importing its `ampNNN_*` modules (what the
    table is generated from)."""
    import pkgutil

    from amp_lint.rules.base import Rule

    found = []
    for module_info in pkgutil.iter_modules(__path__):
        if not module_info.name.startswith("amp"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value.__module__ == module.__name__ and hasattr(value, "code"):
                found.append(value)
    return sorted(found, key=lambda rule: rule.code)


_LOADED: list = []


def _load():
    if not _LOADED:
        classes = [getattr(importlib.import_module(f"{__name__}.{entry.module}"), entry.class_name) for entry in RULES]
        _LOADED.extend([classes, {rule.code: rule for rule in classes}])
    return _LOADED


def __getattr__(name: str):
    if name == "ALL_RULES":
        return _load()[0]
    if name == "RULES_BY_CODE":
        return _load()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
