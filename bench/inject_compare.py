"""Deciding what a mutant's check means: caught or missed, which other findings changed, how a fix ended.

Standard library only. Findings are amp-lint's JSON records; "default" findings are the ones amp-lint
reports without `--show-assumed` (confidence "high").
"""

from __future__ import annotations

import ast
import difflib
import json
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import inject_ops
from inject_ops import Mutant, function_span

FIX_CLASSES = ("restored", "fixed otherwise", "refused", "not fixed", "broken")
NEAR = 6  # lines either side of a module-level site that count as "at the site"


def parse_findings(stdout: str) -> Optional[List[dict]]:
    try:
        records = json.loads(stdout)
    except ValueError:
        return None
    return records if isinstance(records, list) else None


def row(record: dict) -> int:
    return int((record.get("location") or {}).get("row") or 0)


def is_default(record: dict) -> bool:
    return record.get("confidence", "high") == "high"


def line_map(old: str, new: str) -> Callable[[int], int]:
    """Maps a line of `new` to the line of `old` it came from (an inserted line: the one before it)."""
    a, b = old.splitlines(), new.splitlines()
    table: Dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k in range(j2 - j1):
            table[j1 + k + 1] = (i1 + k + 1) if tag in ("equal", "replace") and i1 + k < i2 else max(i1, 1)
    return lambda line: table.get(line, line)


def _span(text: str, function: str, line: int) -> Tuple[int, int]:
    """The lines of the function `function` that holds `line`: a name defined twice (in an `if` and its `else`)
    has two spans, and the site is in one of them."""
    span = function_span(text, function)
    if span and not span[0] <= line <= span[1]:
        try:
            module = inject_ops.Module(text)
        except (SyntaxError, ValueError, RecursionError):
            return span
        held = [(min([n.lineno] + [d.lineno for d in n.decorator_list]), n.end_lineno) for n, name in module.qualname.items()
                if name == function and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= n.end_lineno]
        span = held[0] if held else span
    return span or (line - NEAR, line + NEAR)


def _count(records: Sequence[dict], codes: Sequence[str], span: Tuple[int, int], default_only: bool) -> int:
    return sum(
        1 for r in records
        if r.get("code") in codes and span[0] <= row(r) <= span[1] and (is_default(r) or not default_only)
    )


def judge_catch(mutant: Mutant, original: str, before: Sequence[dict], after: Sequence[dict]) -> dict:
    """caught: a default finding of an expected rule in the site's function that the original did not have;
    assumed: only with --show-assumed; elsewhere: a new one of an expected rule somewhere else in the file."""
    codes = mutant.expected
    span_after = _span(mutant.text, mutant.function, mutant.mutant_line)
    span_before = _span(original, mutant.function, mutant.line)
    if mutant.operator in inject_ops.WHOLE_FILE:
        span_after = span_before = (1, 10**9)
    caught = _count(after, codes, span_after, True) > _count(before, codes, span_before, True)
    assumed = not caught and _count(after, codes, span_after, False) > _count(before, codes, span_before, False)
    whole = (1, 10**9)
    elsewhere = not caught and _count(after, codes, whole, True) > _count(before, codes, whole, True)
    to_original = line_map(original, mutant.text)
    old = Counter((r["code"], row(r)) for r in before if is_default(r))
    new = Counter((r["code"], to_original(row(r))) for r in after if is_default(r))
    added = [f"+{c}@{n}" for (c, n), k in sorted((new - old).items()) for _ in range(k)]
    removed = [f"-{c}@{n}" for (c, n), k in sorted((old - new).items()) for _ in range(k)]
    if caught:  # the catch itself is not "another finding that changed"
        in_site = [f"+{c}@{n}" for (c, n) in (new - old) if c in codes and span_before[0] - NEAR <= n <= span_before[1] + NEAR]
        added = [a for a in added if a not in in_site]
    fix = None
    for r in after:
        if caught and r.get("code") in codes and is_default(r) and span_after[0] <= row(r) <= span_after[1]:
            fix = (r.get("fix") or {}).get("applicability") if r.get("fix") else fix
    hit = next(
        (r for r in after if r.get("code") in codes and is_default(r) and span_after[0] <= row(r) <= span_after[1]), None
    )
    return {
        "caught": caught,
        "assumed_only": assumed,
        "elsewhere": elsewhere,
        "other_changes": added + removed,
        "fix_applicability": fix,
        "message": hit.get("message") if caught and hit else None,
    }


def judge_through_callers(mutant: Mutant, original: str, file: str, before: Sequence[dict], after: Sequence[dict]) -> str:
    """The importing module where a default finding of an expected rule names the mutated function among its
    related places (a caller's iteration reaching the site), one more than the original had; "" if none."""

    def hits(records: Sequence[dict], span: Tuple[int, int]) -> Counter:
        out: Counter = Counter()
        for r in records:
            if r.get("code") not in mutant.expected or not is_default(r):
                continue
            for place in r.get("related") or ():
                if place.get("filename") == file and span[0] <= int((place.get("location") or {}).get("row") or 0) <= span[1]:
                    out[r.get("filename", "")] += 1
                    break
        return out

    more = hits(after, _span(mutant.text, mutant.function, mutant.mutant_line)) - hits(before, _span(original, mutant.function, mutant.line))
    return min(more) if more else ""


def classify_fix(
    mutant: Mutant, original: str, fixed: str, before: Sequence[dict], after_fix: Sequence[dict], fix_stderr: str,
    mutant_findings: Optional[Sequence[dict]] = None,
) -> dict:
    """restored / fixed-otherwise / refused / not-fixed / broken, with why.

    `before`: the original's findings; `mutant_findings`: the mutant's own, before any fix. Broken is what the
    fix did: the fixed code does not parse, drops a name the mutant imported, or has a default finding that
    neither the original nor the mutant had. A finding the mutant already had (a second bug the operator made
    along with the one measured, such as an update moved into one branch of an `if` that also leaves the
    other branch without one) is the mutant's, not the fix's: it is named in `why`, and does not make the fix
    broken."""
    try:
        fixed_ast = ast.parse(fixed)
    except (SyntaxError, ValueError) as error:
        return {"class": "broken", "why": f"does not parse: {error}"}
    if ast.dump(fixed_ast) == ast.dump(ast.parse(original)):
        return {"class": "restored", "why": ""}
    if fixed == mutant.text:
        return {"class": "refused", "why": _reason(fix_stderr) or "no fix applied, no reason given"}
    lost = sorted(imported_names(ast.parse(mutant.text)) - imported_names(fixed_ast))
    if lost:
        return {"class": "broken", "why": "imports dropped: " + ", ".join(lost), "diff": short_diff(original, fixed)}
    still = _count(after_fix, mutant.expected, _span(fixed, mutant.function, mutant.mutant_line), True) > _count(
        before, mutant.expected, _span(original, mutant.function, mutant.line), True
    )
    new = _new_findings(original, fixed, before, after_fix, skip=mutant.expected)
    if mutant_findings is not None and new:
        of_mutant = _new_findings(mutant.text, fixed, mutant_findings, after_fix, skip=mutant.expected)
        own = [label for place, label in new.items() if place not in of_mutant]  # the mutant had it there
        extra = [label for place, label in new.items() if place in of_mutant]
    else:
        own, extra = [], list(new.values())
    if extra:
        return {"class": "broken", "why": "new findings: " + ", ".join(sorted(extra)), "diff": short_diff(original, fixed)}
    left = f"the mutant's own other findings remain: {', '.join(sorted(own))}" if own else ""
    if still:
        why = " | ".join(x for x in (_reason(fix_stderr) or "changed, the finding remains", left) if x)
        return {"class": "not fixed", "why": why, "diff": short_diff(original, fixed)}
    return {"class": "fixed otherwise", "why": left, "diff": short_diff(original, fixed)}


def _new_findings(old_text: str, fixed: str, old: Sequence[dict], new: Sequence[dict], skip: Sequence[str]) -> Dict[tuple, str]:
    """{(code, line in `fixed`): "CODE@line of old_text"} of the default findings of `new` (on `fixed`) that
    `old` (on `old_text`) does not have at the same place, rules in `skip` left out; only rules whose count
    in the file grew."""
    to_old = line_map(old_text, fixed)
    before = Counter((r["code"], row(r)) for r in old if is_default(r))
    grew = Counter(r["code"] for r in new if is_default(r)) - Counter(r["code"] for r in old if is_default(r))
    out: Dict[tuple, str] = {}
    for r in sorted((r for r in new if is_default(r)), key=row):
        place = (r["code"], to_old(row(r)))
        if r["code"] in skip or not grew.get(r["code"]):
            continue
        if before[place] > 0:
            before[place] -= 1
            continue
        out[(r["code"], row(r))] = f"{place[0]}@{place[1]}"
    return out


def imported_names(tree: ast.AST) -> set:
    """The names a module's imports bind (`import a.b` binds `a`), wherever the import is."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names if a.name != "*"}
    return names


def _reason(stderr: str) -> str:
    lines = [l.strip() for l in stderr.splitlines() if l.strip() and not l.startswith("Traceback")]
    interesting = [l for l in lines if any(w in l.lower() for w in ("not fixed", "refus", "would", "fix", "error"))]
    return " | ".join((interesting or lines)[-2:])[:300]


def short_diff(old: str, new: str, limit: int = 8) -> str:
    lines = [
        l.rstrip("\n") for l in difflib.unified_diff(old.splitlines(True), new.splitlines(True), n=0)
        if (l.startswith("+") or l.startswith("-")) and not l.startswith(("+++", "---"))
    ]
    more = f" (+{len(lines) - limit} more)" if len(lines) > limit else ""
    return " / ".join(" ".join(l.split()) for l in lines[:limit]) + more
