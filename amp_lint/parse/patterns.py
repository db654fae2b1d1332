"""The rules' `needs` patterns, made fast to search: each compiled once and only when first searched, each
alternative rewritten to start with its literal word (`literal_first`), and the literal words any match
contains (`literal_hints`), which the prefilter looks for with plain substring searches first.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import List, Tuple


class _LazyPattern:
    """A pattern compiled when first searched: most texts are decided by the literal hints alone, and a
    short run (pre-commit: five files) would otherwise compile every rule's patterns (140 of them)."""

    __slots__ = ("source", "_compiled")

    def __init__(self, source: str) -> None:
        self.source = source
        self._compiled = None

    def search(self, text: str):
        if self._compiled is None:
            self._compiled = re.compile(self.source)
        return self._compiled.search(text)


@lru_cache(maxsize=32)
def compile_needs(needs_per_rule: Tuple[Tuple[str, ...], ...]):
    lazy: dict = {}  # one object per pattern: the prefilter remembers a pattern's answer per text
    return tuple(
        tuple((lazy.setdefault(pattern, _LazyPattern(literal_first(pattern))), literal_hints(pattern)) for pattern in needs)
        for needs in needs_per_rule
    )


# An alternative that starts with fixed-width, non-literal atoms (`\b`, `[Ss]`) and then a literal word.
_LEADING_ATOMS_THEN_WORD = re.compile(r"^((?:\\b|\[[^\]\\]*\])+)(\w+)(.*)$", re.S)


def literal_first(pattern: str) -> str:
    r"""The same pattern, rewritten so that each alternative starts with its literal word.

    Python's regex engine skips ahead with a fast substring search only when a pattern starts with a
    literal; `\bautocast\b` is tried at every position of the text instead. `autocast(?<=\bautocast)\b`
    matches exactly where the original does (the lookbehind re-checks the leading atoms) and searches
    torch's 46 MB 30x faster. Alternatives of other shapes are kept as they are.
    """
    alternatives = []
    for alternative in _top_level_alternatives(pattern):
        match = _LEADING_ATOMS_THEN_WORD.match(alternative)
        if match:
            atoms, word, rest = match.groups()
            alternative = f"{word}(?<={atoms}{word}){rest}"
        alternatives.append(alternative)
    return "|".join(alternatives)


def literal_hints(pattern: str) -> Tuple[str, ...]:
    """Substrings one of which any match of `pattern` contains (`[Ss]caler` -> "caler").

    `str.__contains__` runs at memory speed; Python's regex engine crawls over an alternation of
    patterns without a literal prefix. The hints reject almost every file before any regex runs.
    """
    hints: List[str] = []
    for alternative in _top_level_alternatives(pattern):
        if "(" in alternative or "|" in alternative:
            alternative = re.sub(r"\([^()]*\)[?*]?", " ", alternative)  # a group may match anything
        hint = _longest_run(alternative)
        if not hint:
            return ()  # no literal part: the regex alone decides
        spelled = [_longest_run(spelling) for spelling in _spellings(alternative)]
        # `custom_[fb]wd`: "custom_fwd" or "custom_bwd" rather than "custom_", which is in a tenth of torch's
        # files. Each letter a word gains makes it rarer; a spelling that gains fewer than three costs a scan
        # more than it saves (`[Ss]caler`: "caler" stays).
        if spelled and min(len(word) for word in spelled) >= len(hint) + _LETTERS_WORTH_A_SCAN:
            hints.extend(word for word in spelled if word not in hints)
        else:
            hints.append(hint)
    return tuple(hints)


_LETTERS_WORTH_A_SCAN = 3
_SMALL_CLASS = re.compile(r"\[([A-Za-z0-9_]{1,2})\]")  # `[fb]`: two letters, no range, no negation


def _longest_run(alternative: str) -> str:
    plain = re.sub(r"\\b|\[[^\]]*\]|\\.|[()?*+^$.]", " ", alternative)
    return max(plain.split(), key=len, default="")


def _spellings(alternative: str) -> List[str]:
    """The alternative with each class of one or two letters replaced by each of its letters, at most four
    spellings (`custom_[fb]wd` -> `custom_fwd`, `custom_bwd`); [] when it has no such class. A class followed
    by a repetition (`[fb]?`, `[fb]*`, `[fb]{2}`) is not spelled out: it may match no letter or many."""
    classes = list(_SMALL_CLASS.finditer(alternative))
    if not classes or len(classes) > 2 or any(alternative[m.end() : m.end() + 1] in ("?", "*", "+", "{") for m in classes):
        return []
    spellings = [""]
    position = 0
    for match in classes:
        spellings = [s + alternative[position : match.start()] + letter for s in spellings for letter in match.group(1)]
        position = match.end()
    return [s + alternative[position:] for s in spellings]


def _top_level_alternatives(pattern: str):
    """`a|b(c|d)` -> ["a", "b(c|d)"]: split on `|` outside groups and character classes."""
    parts, depth, current, escaped, in_class = [], 0, "", False, False
    for char in pattern:
        if escaped:
            current += char
            escaped = False
            continue
        if char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif not in_class and char == "(":
            depth += 1
        elif not in_class and char == ")":
            depth -= 1
        elif not in_class and depth == 0 and char == "|":
            parts.append(current)
            current = ""
            continue
        current += char
    parts.append(current)
    return parts
