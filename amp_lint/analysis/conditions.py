"""Branch conditions, normalised so that tests which decide the same thing are known to agree.

Like ty's visibility constraints: the control-flow graph labels every branch edge with an *atom*, a
normalised test and the way it went. `if amp:` and `if not amp:` are one test; `x is not None` and the
truthiness of `x` are one test; two `if self.use_amp:` blocks are one test. Two events under atoms that
contradict each other never run on one path. A test met once in a function cannot be related to any
other, so it is simply *unknown*: either way may happen.

Some tests are known to go both ways while the loop runs: a gradient-accumulation boundary
(`(i + 1) % accum == 0`) and an overflow check (`if not torch.isfinite(norm): continue`). Those are
*varying*: a path through either side of them is a real path, not an assumption.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, NamedTuple, Tuple

import libcst as cst

from amp_lint.analysis.syntax import code_of

# Tests that hold on some iterations and not on others, by design.
_VARYING_TEST = re.compile(
    r"%|accum|accumulat|sync_grad|micro|boundary|update_step|should_step|isfinite|isnan|isinf|found_inf|overflow|skip",
    re.IGNORECASE,
)


class Atom(NamedTuple):
    """One branch edge's condition: the normalised test and whether it holds on that edge."""

    key: str
    holds: bool


_CACHE: Dict[int, Tuple[cst.BaseExpression, Tuple[str, bool]]] = {}


def normalise(test: cst.BaseExpression) -> Tuple[str, bool]:
    """(key, polarity): `not x` -> (x, False); `x is None` -> (x, False); `x is not None` -> (x, True).

    Cached by node: the rules ask about the same tests many times.
    """
    cached = _CACHE.get(id(test))
    if cached is None or cached[0] is not test:
        cached = (test, _normalise(test))
        if len(_CACHE) > 10_000:
            _CACHE.clear()
        _CACHE[id(test)] = cached
    return cached[1]


def _normalise(test: cst.BaseExpression) -> Tuple[str, bool]:
    polarity = True
    while True:
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            polarity = not polarity
            test = test.expression
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            target = test.comparisons[0]
            comparator = target.comparator
            if isinstance(comparator, cst.Name) and comparator.value == "None":
                if isinstance(target.operator, cst.IsNot):
                    test = test.left
                    continue
                if isinstance(target.operator, cst.Is):
                    test = test.left
                    polarity = not polarity
                    continue
            if isinstance(comparator, cst.Name) and comparator.value in ("True", "False"):
                # `if use_amp is True` / `== False`
                if isinstance(target.operator, (cst.Is, cst.Equal)):
                    polarity = polarity == (comparator.value == "True")
                    test = test.left
                    continue
        break
    text = re.sub(r"\s+", "", code_of(test))
    # `(x)` and `x` are the same test.
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    return text, polarity


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def atom_of(test: cst.BaseExpression, taken: bool) -> Atom:
    """The atom of the edge that `taken` (True: the body) follows out of a test."""
    key, polarity = normalise(test)
    return Atom(key, polarity == taken)


def implied_atoms(test: cst.BaseExpression, taken: bool) -> Iterator[Atom]:
    """Every atom that holds where `test` came out `taken`: both sides of `a and b` when true, both of `a or
    b` (negated) when false, through `not`; the test's own atom otherwise. `enabled=amp and not use_deepspeed`
    is on only where `use_deepspeed` is false."""
    pending = [(test, taken)]  # a loop, not recursion: a chain of a thousand `and`s is no deeper
    while pending:
        node, way = pending.pop()
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            pending.append((node.expression, not way))
        elif isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And if way else cst.Or):
            pending += ((node.right, way), (node.left, way))
        else:
            yield atom_of(node, way)


def is_varying(key: str) -> bool:
    """A test that goes both ways while the loop runs (accumulation boundary, overflow check)."""
    return bool(_VARYING_TEST.search(key))


def contradicts(first: Atom, second: Atom) -> bool:
    return first.key == second.key and first.holds != second.holds


# A manual inf check: a test of the gradients' (or a norm's) finiteness.
_FINITE_WORD = re.compile(r"finite", re.IGNORECASE)
_NONFINITE_WORD = re.compile(r"inf\b|isinf|nan|overflow|found_inf", re.IGNORECASE)
FINITE, NONFINITE, OPAQUE = "finite", "not finite", "an inf check"


def finiteness(test: cst.BaseExpression, holds: bool) -> set:
    """What the branch edge of `test` that `holds` proves about finiteness: FINITE (the body of `if
    torch.isfinite(norm):`, the else of `if not isfinite(norm) or skip:`), NONFINITE (the body of
    `if not torch.isfinite(norm):`), OPAQUE (an inf check whose way this module does not read:
    `if found_inf.item() == 0:`); empty when the edge proves nothing (the body of `if norm is None or
    isfinite(norm):`)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return finiteness(test.expression, not holds)
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And)
        if conjunction == holds:  # every side holds (`a and b`) / fails (`not (a or b)`)
            return finiteness(test.left, holds) | finiteness(test.right, holds)
        return set()
    text = code_of(test)
    if isinstance(test, cst.Comparison):
        return {OPAQUE} if _FINITE_WORD.search(text) or _NONFINITE_WORD.search(text) else set()
    if _FINITE_WORD.search(text):
        return {FINITE if holds else NONFINITE}
    if _NONFINITE_WORD.search(text):
        return {NONFINITE if holds else FINITE}
    return set()
