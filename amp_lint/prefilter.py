"""Decide cheaply whether a file can hold a finding of the selected rules, before parsing it with LibCST.

Every rule declares identifier patterns (`Rule.needs`) that its findings cannot exist without: a file
can hold a finding when, for at least one selected rule, every one of that rule's patterns matches.

1. On the raw text (microseconds per file): the text is a superset of the code's identifiers.
2. On the identifiers the code really uses, collected by `compile()` (C speed, about a tenth of a LibCST
   parse): names in strings, comments and docstrings no longer count. A file `compile()` rejects (newer
   syntax than this Python's, say) passes, so LibCST decides.

Neither step can drop a file that holds a finding, as long as `needs` hold for the rule's findings; a
test runs both over every rule's invalid examples.
"""

from __future__ import annotations

import re
import types
import warnings
from functools import lru_cache
from typing import Iterable, Iterator, Tuple

# Below this size LibCST parses fast enough that the second step is not worth its cost.
_SECOND_STEP_MIN_CHARS = 4_000


@lru_cache(maxsize=32)
def _compile(needs_per_rule: Tuple[Tuple[str, ...], ...]):
    return tuple(tuple(re.compile(pattern) for pattern in needs) for needs in needs_per_rule)


class Prefilter:
    def __init__(self, rules: Iterable[type]) -> None:
        needs = tuple(sorted({tuple(rule.needs) for rule in rules}))
        self._groups = _compile(needs)
        alternatives = sorted({n[0] for n in needs if n})
        self._any = re.compile("|".join(f"(?:{a})" for a in alternatives)) if alternatives else None
        self._always = any(not n for n in needs)

    def _matches(self, text: str) -> bool:
        if self._any is None or self._any.search(text) is None:
            return False
        return any(all(pattern.search(text) for pattern in group) for group in self._groups)

    def text_may_match(self, text: str) -> bool:
        """The first step alone (cheap enough for the main process to run over every file)."""
        return self._always or self._matches(text)

    def may_match(self, text: str) -> bool:
        if self._always:
            return True
        if not self._matches(text):
            return False
        if len(text) < _SECOND_STEP_MIN_CHARS:
            return True
        names = code_identifiers(text)
        return names is None or self._matches(names)


def code_identifiers(text: str):
    """The identifiers the code uses (names, attributes, imports, parameters), space-separated.

    None when `compile()` cannot read the file; the caller must then assume anything.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = compile(text, "<amp-lint>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    return " ".join(set(_names(code)))


def _names(code: types.CodeType) -> Iterator[str]:
    stack = [code]
    while stack:
        current = stack.pop()
        yield current.co_name
        yield from current.co_names
        yield from current.co_varnames
        yield from current.co_cellvars
        yield from current.co_freevars
        stack.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
