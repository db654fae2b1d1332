"""Decide cheaply, from the raw text, whether a file can hold a finding of the selected rules.

Every rule declares the identifier patterns (`Rule.needs`) its findings cannot exist without: a file
passes when, for at least one selected rule, all of that rule's patterns occur in the text. The text of
a file is a superset of its code, so this never drops a true finding (a test runs it over every rule's
invalid examples). Files that fail it are never parsed.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Tuple


@lru_cache(maxsize=32)
def _compile(needs_per_rule: Tuple[Tuple[str, ...], ...]):
    groups = []
    for needs in needs_per_rule:
        groups.append(tuple(re.compile(pattern) for pattern in needs))
    return tuple(groups)


class Prefilter:
    def __init__(self, rules: Iterable[type]) -> None:
        needs = tuple(sorted({tuple(rule.needs) for rule in rules}))
        self._groups = _compile(needs)
        # One pattern for the first, cheapest pass: any rule's first need.
        alternatives = sorted({n[0] for n in needs if n})
        self._any = re.compile("|".join(f"(?:{a})" for a in alternatives)) if alternatives else None
        self._always = any(not n for n in needs)

    def may_match(self, text: str) -> bool:
        if self._always:
            return True
        if self._any is None or self._any.search(text) is None:
            return False
        return any(all(pattern.search(text) for pattern in group) for group in self._groups)
