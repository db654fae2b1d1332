"""Is a fix good? The findings of the code before it and after it, compared.

A fixed file is analysed again (with the selected rules and the default ones) before it is written. The
fix is good when the findings it fixed are gone and no finding appears that was not there before, and the
small path check of `amp_lint.fixes.verify_fix` finds no new double scale, unscale, step or update.
Findings are compared by rule, enclosing function and message shape (the message with its numbers left
out), never by line: a fix moves lines. A finding whose message changed because the code it quotes
changed is matched, second, by rule and function alone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.fixes.undefined_names import new_undefined_names
from amp_lint.fixes.verify_fix import new_hazards
from amp_lint.rules.base import Finding

# (rule code, enclosing function, message shape)
FindingKey = Tuple[str, str, str]

_NUMBER = re.compile(r"\d+")

# Deprecated spellings that behave like the modern ones. A fix may write one where the file already uses
# that spelling (AMP061 pairs `@torch.cuda.amp.custom_fwd` with `@torch.cuda.amp.custom_bwd`, the spelling
# of its partner): a new finding of such a rule is no regression when the file already had one.
SPELLING_ONLY = frozenset({"AMP070", "AMP071", "AMP072", "AMP073", "AMP074"})


def finding_key(finding: Finding, parents: Mapping[int, cst.CSTNode]) -> FindingKey:
    return (finding.rule.code, enclosing_function(finding, parents), _NUMBER.sub("#", " ".join(finding.message.split())))


def enclosing_function(finding: Finding, parents: Mapping[int, cst.CSTNode]) -> str:
    """The qualified name of the function (or class body) around the finding; "" at module level."""
    names: List[str] = []
    parent = parents.get(id(finding.node))
    while parent is not None:
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            names.append(parent.name.value)
        parent = parents.get(id(parent))
    if names:
        return ".".join(reversed(names))
    return finding.context


def regression(
    before: Sequence[FindingKey], after: Sequence[FindingKey], fixed: Iterable[FindingKey], rule_names: Mapping[str, str]
) -> Optional[str]:
    """Why the findings `after` a fix are worse than `before` it, or None when they are not.

    `fixed` are the keys of the findings the fix was for: they must be gone; every other finding of `after`
    must be one of `before`.
    """
    survivors = _counts(before)
    fixed_counts = _counts(fixed)
    for key, count in fixed_counts.items():
        survivors[key] -= min(count, survivors[key])
    unmatched: List[FindingKey] = []
    for key in after:
        if survivors[key] > 0:
            survivors[key] -= 1
        else:
            unmatched.append(key)
    if not unmatched:
        return None
    # Second: a finding whose message quotes code that the fix changed, matched by rule and function.
    loose: Dict[Tuple[str, str], int] = defaultdict(int)
    for (code, function, _), count in survivors.items():
        loose[(code, function)] += count
    left: List[FindingKey] = []
    spellings_before = {key[0] for key in before if key[0] in SPELLING_ONLY}
    still: List[FindingKey] = []
    for key in unmatched:
        if fixed_counts.get(key):
            still.append(key)
        elif loose[key[:2]] > 0:
            loose[key[:2]] -= 1
        elif key[0] not in spellings_before:
            left.append(key)
    if left:  # a new finding says more about what went wrong than the old one left
        code, function, message = left[0]
        where = f" in {function}()" if function else ""
        return f"the fixed code has a new {code} ({rule_names.get(code, code)}){where}: {message}"
    if still:
        return f"the {still[0][0]} finding is still there after the fix"
    return None


def hazard_regression(before_code: str, after_code: str) -> Optional[str]:
    """Why the fixed code is worse: a name it reads that nothing binds (NameError), or GradScaler's call
    order (scale, unscale_, step, update); None when it is not."""
    unbound = new_undefined_names(before_code, after_code)
    if unbound:
        return f"the fixed code reads `{unbound[0]}`, which nothing binds there"
    added = new_hazards(before_code, after_code)
    if not added:
        return None
    return f"the fixed code {added[0].describe()}"


def _counts(keys: Iterable[FindingKey]) -> Dict[FindingKey, int]:
    counts: Dict[FindingKey, int] = defaultdict(int)
    for key in keys:
        counts[key] += 1
    return counts
