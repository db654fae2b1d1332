"""The markdown report of bench/inject.py: caught/total per operator, fix-back classes, misses by principle."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from typing import Dict, List, Sequence

from inject_compare import FIX_CLASSES
from inject_ops import EXPECTED, MANY_ANSWERS, OPERATORS, PRINCIPLE

# The operators of issue 27's floor ("dropped or doubled update()/unscale_, a direct opt.step(), an unscaled
# backward, a backward inside autocast, an indexed device"); update_before_step and zero_grad_between have
# more than one right fix by their nature (bench/inject_ops.py).
ONE_ANSWER_OPERATORS = tuple(op for op in OPERATORS if op not in MANY_ANSWERS)

PRINCIPLES = {
    1: "1. one protocol with the gradients' state",
    2: "2. an iteration is not only a loop body",
    3: "3. open world (what a caller completes / unresolved calls)",
    4: "4. values followed everywhere",
    5: "5. reached through calls (issue 46)",
    6: "6. configuration semantics (issue 46)",
}


def _pct(a: int, b: int) -> str:
    """A share, rounded down to a tenth: 298 of 308 is 96.7%, never "97%" against a 97% floor."""
    if not b:
        return "-"
    tenths = 1000 * a // b
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths // 10}.{tenths % 10}%"


def render(results: List[dict], operators: Sequence[str], elapsed: float, args) -> str:
    ok = [r for r in results if not r.get("error") and not r.get("equivalent")]
    equivalent = [r for r in results if not r.get("error") and r.get("equivalent")]
    errors = [r for r in results if r.get("error")]
    projects = sorted({r["project"] for r in ok})
    caught = sum(1 for r in ok if r["caught"])
    out = [
        "# Bug injection on real code (bench/inject.py)",
        "",
        f"{len(ok)} mutants in {len(projects)} projects ({', '.join(projects)}); "
        f"**{caught} caught ({_pct(caught, len(ok))})**; {len(errors)} could not be checked; "
        + (f"{elapsed / 60:.1f} min with --jobs {args.jobs}; " if elapsed else "")
        + f"seed {args.seed}, at most {args.per_operator} sites per project and operator."
        + (f" {len(equivalent)} equivalent mutants (no bug at the site, judged by hand) left out: see the end." if equivalent else "")
        + (
            f" {sum(1 for r in ok if r.get('through_caller'))} caught through a caller in another module (a finding there "
            "names the mutated line)."
            if any(r.get("through_caller") for r in ok) else ""
        ),
        "",
        "Command: `" + " ".join(["python", "bench/inject.py", *sys.argv[1:]]) + "`",
        "",
        "Sites are calls on torch's GradScaler: not on a project's own scaler class, one named like torch's that "
        "derives from no scaler (thinc's `PyTorchGradScaler`, with its own `unscale(grads)` and no `step()`; "
        "`inject_ops.own_scaler_classes`), whose protocol is not the catalog's.",
        "",
        "Caught: a default finding (no `--show-assumed`) of the expected rule in the site's function that the "
        "original file does not have. *assumed*: caught only with `--show-assumed`; *elsewhere*: a new finding of "
        "the rule elsewhere in the file, not at the site. *other changes*: mutants where other default findings "
        "of the file appeared or disappeared.",
        "",
        "| operator | rule | caught / total | % | assumed only | elsewhere | other changes | one-answer mutants |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op in operators:
        mine = [r for r in ok if r["operator"] == op]
        if not mine:
            out.append(f"| {op} | {', '.join(EXPECTED[op])} | 0 / 0 | - | | | | |")
            continue
        c = sum(1 for r in mine if r["caught"])
        out.append(
            f"| {op} | {', '.join(EXPECTED[op])} | {c} / {len(mine)} | {_pct(c, len(mine))} | "
            f"{sum(1 for r in mine if r['assumed_only'])} | {sum(1 for r in mine if r['elsewhere'])} | "
            f"{sum(1 for r in mine if r['other_changes'])} | {sum(1 for r in mine if one_answer(r))} |"
        )
    out.append(f"| **all** | | **{caught} / {len(ok)}** | **{_pct(caught, len(ok))}** | | | | {sum(1 for r in ok if one_answer(r))} |")
    out += ["", "## Per project", "", "| project | caught / total |", "| --- | --- |"]
    for project in projects:
        mine = [r for r in ok if r["project"] == project]
        out.append(f"| {project} | {sum(1 for r in mine if r['caught'])} / {len(mine)} |")
    fixed = [r for r in ok if r.get("fix_back")]
    if fixed:
        out += _fix_table(fixed, operators)
    out += _misses(ok)
    out += _equivalent(equivalent)
    if errors:
        out += ["", "## Not checked (amp-lint failed)", ""]
        out += [f"- {r['project']}/{r['file']}:{r['line']} {r['operator']}: {r['error'][:300]}" for r in errors]
    changed = [r for r in ok if r["other_changes"]]
    if changed:
        out += ["", "## Other findings that changed (original line numbers)", ""]
        out += [
            f"- {r['project']}/{r['file']}:{r['line']} {r['operator']}: {' '.join(r['other_changes'][:8])}"
            for r in changed
        ]
    return "\n".join(out) + "\n"


def one_answer(record: dict) -> bool:
    """The mutant's one right fix is the original (bench/inject_ops.py); records of older runs: by operator."""
    return record.get("one_answer", True) and record["operator"] not in MANY_ANSWERS


def _restored(records: List[dict]) -> str:
    n = sum(1 for r in records if r["fix_back"]["class"] == "restored")
    return f"{n} / {len(records)} ({100.0 * n / len(records):.1f}%)" if records else "-"


def _fix_table(fixed: List[dict], operators: Sequence[str]) -> List[str]:
    out = [
        "",
        "## Fix-back (issue 27): `--fix --select RULE` on each caught mutant",
        "",
        "Every caught mutant is fixed; *one answer*: the caught mutants whose one right fix is the original "
        "(bench/inject_ops.py marks them), on which the floor of 97% restored is measured.",
        "",
        "| operator | caught | " + " | ".join(FIX_CLASSES) + " | restored % | one answer: restored / caught |",
        "| --- | --- | " + " | ".join("---" for _ in FIX_CLASSES) + " | --- | --- |",
    ]
    total: Counter = Counter()
    for op in operators:
        mine = [r for r in fixed if r["operator"] == op]
        if not mine:
            continue
        classes = Counter(r["fix_back"]["class"] for r in mine)
        total.update(classes)
        out.append(
            f"| {op} | {len(mine)} | " + " | ".join(str(classes.get(c, 0)) for c in FIX_CLASSES)
            + f" | {_pct(classes.get('restored', 0), len(mine))} | {_restored([r for r in mine if one_answer(r)])} |"
        )
    out.append(
        f"| **all** | {len(fixed)} | " + " | ".join(str(total.get(c, 0)) for c in FIX_CLASSES)
        + f" | {_pct(total.get('restored', 0), len(fixed))} | {_restored([r for r in fixed if one_answer(r)])} |"
    )
    floor = [r for r in fixed if one_answer(r) and r["operator"] in ONE_ANSWER_OPERATORS]
    out += [
        "",
        f"**One-answer fix-back (the 97% floor; operators {', '.join(ONE_ANSWER_OPERATORS)}): "
        f"{_restored(floor)} restored.**",
    ]
    rest = [r for r in fixed if r["fix_back"]["class"] != "restored"]
    if rest:
        out += ["", "### Not restored", ""]
        for r in sorted(rest, key=lambda r: (r["fix_back"]["class"], r["operator"])):
            fb = r["fix_back"]
            detail = "; ".join(x for x in (fb.get("why", ""), fb.get("diff", "")) if x)
            mark = "" if one_answer(r) else " (not one answer)"
            out.append(f"- **{fb['class']}** {r['operator']}{mark} {r['project']}/{r['file']}:{r['line']}: {detail[:400]}")
    return out


def _equivalent(records: List[dict]) -> List[str]:
    """Mutants that are no bug at their site (bench/inject-causes.json, `"equivalent": true`): not counted;
    one the tool reports anyway is a false positive, and is marked so."""
    if not records:
        return []
    out = ["", "## Equivalent mutants (not counted)", ""]
    out.append("Mutations that are no bug at their site, judged by hand; a default finding of the expected rule on one is a false positive.")
    out.append("")
    for r in sorted(records, key=lambda r: (r["operator"], r["project"], r["file"], r["line"])):
        flag = " **reported: a false positive**" if r.get("caught") else ""
        out.append(f"- {r['operator']}: {r['project']}/{r['file']}:{r['line']} ({r['function'] or 'module'}) {r['mutation']}{flag} — {r.get('cause', '')}")
    return out


def _misses(ok: List[dict]) -> List[str]:
    missed = [r for r in ok if not r["caught"]]
    if not missed:
        return []
    groups: Dict[int, List[dict]] = defaultdict(list)
    for r in missed:
        groups[r.get("principle") or PRINCIPLE[r["operator"]]].append(r)
    out = ["", "## Misses, grouped by the principle of issue 26 they break", ""]
    out.append(
        "The group is the operator's principle unless the run's notes (bench/inject-causes.json) name another "
        "for that site; each line: file:line (function) the mutation, then what was reported instead."
    )
    for principle in sorted(groups):
        out += ["", f"### {PRINCIPLES[principle]} ({len(groups[principle])})", ""]
        for r in sorted(groups[principle], key=lambda r: (r["operator"], r["project"], r["file"], r["line"])):
            extra = " (caught with --show-assumed)" if r["assumed_only"] else ""
            extra += " (reported elsewhere in the file)" if r["elsewhere"] else ""
            cause = f" — {r['cause']}" if r.get("cause") else ""
            out.append(
                f"- {r['operator']}: {r['project']}/{r['file']}:{r['line']} ({r['function'] or 'module'}) "
                f"{r['mutation']}{extra}{cause}"
            )
    return out
