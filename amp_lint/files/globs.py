"""Glob matching in time linear in the path, whatever the pattern (the `exclude` and `per-file-ignores` globs).

A glob translated to a regular expression and run by Python's backtracking `re` takes exponential time on
a pattern with several stars that almost matches (`*a*a*a*a*a*a*a*ab` against a long path: 19 s for six
stars, minutes for eight), and a project's own configuration would then stall every run. So a glob is
translated to a regular expression only where backtracking stays linear: no `{a,b}` alternatives and at
most one unbounded part (`*`, `**`, `**/`), which `re` tries at each of the path's positions once.
Every other glob runs on a small automaton (Thompson's construction), simulated over sets of states, with
the sets it reaches remembered (a lazy DFA): each character of a path costs one step, whatever the glob.

The syntax is globset's, as Ruff uses it: `*` and `?` cross `/`, `**/` is zero or more folders, `[...]`
(`[!...]`, `[^...]`), `{a,b}` and `\\` escapes work; an unclosed `[` or `{` is a literal character.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, FrozenSet, List, Sequence, Tuple

# A parsed glob: a sequence of tokens.
#   ("char", c)  ("any",)  ("class", compiled one-character regex)  ("star",)  ("folders",): `**/`
#   ("alt", [token sequences])
Token = Tuple
Matcher = Callable[[str], bool]

_CACHE_LIMIT = 50_000  # remembered (state set, character) steps of one automaton, at most


def parse(pattern: str) -> List[Token]:
    tokens: List[Token] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if before_ok and after < n and pattern[after] == "/":
                    tokens.append(("folders",))  # `**/`: zero or more folders
                    i = after + 1
                    continue
                i = after
            else:
                i += 1
            tokens.append(("star",))
        elif char == "?":
            tokens.append(("any",))
            i += 1
        elif char == "[":
            end = pattern.find("]", i + 2 if pattern.startswith(("[!", "[^"), i) else i + 1)
            if end == -1:
                tokens.append(("char", char))
                i += 1
                continue
            body = pattern[i + 1 : end]
            negated = body[:1] in ("!", "^")
            if negated:
                body = body[1:]
            body = body.replace("\\", "\\\\").replace("^", "\\^")
            tokens.append(("class", f"[{'^' if negated else ''}{body}]"))
            i = end + 1
        elif char == "{":
            end = pattern.find("}", i)
            if end == -1:
                tokens.append(("char", char))
                i += 1
                continue
            tokens.append(("alt", [parse(part) for part in pattern[i + 1 : end].split(",")]))
            i = end + 1
        elif char == "\\" and i + 1 < n:
            tokens.append(("char", pattern[i + 1]))
            i += 2
        else:
            tokens.append(("char", char))
            i += 1
    return tokens


def _regex(tokens: Sequence[Token]) -> str:
    out = []
    for token in tokens:
        kind = token[0]
        if kind == "char":
            out.append(re.escape(token[1]))
        elif kind == "any":
            out.append(".")
        elif kind == "class":
            out.append(token[1])
        elif kind == "star":
            out.append(".*")
        elif kind == "folders":
            out.append("(?:.*/)?")
        else:
            out.append("(?:" + "|".join(_regex(part) for part in token[1]) + ")")
    return "".join(out)


def regex_is_linear(tokens: Sequence[Token]) -> bool:
    """Does `re` match this glob without exponential backtracking? No alternatives, at most one star."""
    if any(token[0] == "alt" for token in tokens):
        return False
    return sum(token[0] in ("star", "folders") for token in tokens) <= 1


def compile_globs(patterns: Sequence[str]) -> Matcher:
    """A test of whether any of `patterns` matches a whole string, in time linear in the string."""
    parsed = [parse(pattern) for pattern in patterns]
    simple = [tokens for tokens in parsed if regex_is_linear(tokens)]
    others = [tokens for tokens in parsed if not regex_is_linear(tokens)]
    tests: List[Matcher] = []
    if simple:
        # Each alternative has at most one star: `re` tries each in turn, at most once per position.
        compiled = re.compile("|".join(f"(?:{_regex(tokens)})" for tokens in simple), re.DOTALL)
        tests.append(lambda text: compiled.fullmatch(text) is not None)
    if others:
        tests.append(_Automaton(others).matches)
    if not tests:
        return lambda text: False
    if len(tests) == 1:
        return tests[0]
    first, second = tests
    return lambda text: first(text) or second(text)


class _Automaton:
    """Thompson's construction over glob tokens, simulated over state sets that are remembered."""

    def __init__(self, globs: Sequence[Sequence[Token]]) -> None:
        # Per state: ("eps", [next states]) | ("step", test, next) | ("accept",)
        self._states: List[Tuple] = [("accept",)]
        self._classes: Dict[str, Callable] = {}
        start = self._new(("eps", [self._sequence(tokens, 0) for tokens in globs]))
        self._start = self._closure([start])
        self._steps: Dict[Tuple[FrozenSet[int], str], FrozenSet[int]] = {}

    def _new(self, state: Tuple) -> int:
        self._states.append(state)
        return len(self._states) - 1

    def _sequence(self, tokens: Sequence[Token], then: int) -> int:
        """The state that matches `tokens` and goes on to `then` (built from the end, backwards)."""
        for token in reversed(tokens):
            then = self._token(token, then)
        return then

    def _token(self, token: Token, then: int) -> int:
        kind = token[0]
        if kind == "char":
            return self._new(("step", token[1], then))
        if kind == "any":
            return self._new(("step", None, then))
        if kind == "class":
            test = self._classes.setdefault(token[1], re.compile(token[1], re.DOTALL).fullmatch)
            return self._new(("step", test, then))
        if kind == "star":
            return self._loop(then)
        if kind == "folders":  # zero or more folders: nothing, or anything that ends with `/`
            slash = self._new(("step", "/", then))
            return self._new(("eps", [then, self._loop(slash)]))
        return self._new(("eps", [self._sequence(part, then) for part in token[1]]))

    def _loop(self, then: int) -> int:
        """Any characters, then `then`: a state that steps on any character back to itself."""
        loop = self._new(("eps", [then]))
        step = self._new(("step", None, loop))
        self._states[loop] = ("eps", [then, step])
        return loop

    def _closure(self, states) -> FrozenSet[int]:
        seen = set()
        stack = list(states)
        while stack:
            state = stack.pop()
            if state in seen:
                continue
            seen.add(state)
            if self._states[state][0] == "eps":
                stack.extend(self._states[state][1])
        return frozenset(seen)

    def _step(self, current: FrozenSet[int], char: str) -> FrozenSet[int]:
        following = []
        for state in current:
            node = self._states[state]
            if node[0] != "step":
                continue
            test = node[1]
            if test is None or (test == char if isinstance(test, str) else test(char) is not None):
                following.append(node[2])
        return self._closure(following)

    def matches(self, text: str) -> bool:
        current = self._start
        steps = self._steps
        for char in text:
            key = (current, char)
            following = steps.get(key)
            if following is None:
                if len(steps) >= _CACHE_LIMIT:
                    steps.clear()
                following = steps[key] = self._step(current, char)
            if not following:
                return False
            current = following
        return 0 in current  # state 0 accepts

