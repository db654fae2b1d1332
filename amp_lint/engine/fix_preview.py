"""Check mode's `[*]`: only for a fix that `--fix` would keep.

`--fix` checks each fix before it keeps it (`Checker._checked_pass`: the fixed code parses, reads no name
nothing binds, breaks no GradScaler order, and leaves no new finding). A plain check used to mark every
safe fix `[*]`, and `--fix` then refused some of them ("the fixed code calls scaler.update() twice").
Here a check tries, the same way, each fix of an order rule (the GradScaler protocol's: a fix there moves or
adds protocol calls, which is what the check refuses; a deprecated spelling's rename or a device string's
rewrite is not, and a package has hundreds of those), and a refused one is reported without its fix, as
`--fix` reports it. The cost falls only on files with such a fix: one more analysis, and one per fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from amp_lint.fixes.apply import ancestry_of, select_compatible
from amp_lint.fixes.types import Applicability, Fix
from amp_lint.rules._helpers import OrderRule
from amp_lint.rules.base import Finding

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.engine.checker import Checker


def _order_rule(rule) -> bool:
    """A finding's rule is its class (or an instance of it)."""
    return issubclass(rule if isinstance(rule, type) else type(rule), OrderRule)


def drop_refused_fixes(checker: "Checker", module: cst.Module, code: str, filename: str, findings: List[Finding], file_ignored: FrozenSet[str],
                       analysed: Optional[Callable[[], object]] = None) -> None:  # fmt: skip
    """Set `fix` to None on each finding whose fix `--fix` would refuse (as `--fix` reports it). An unsafe fix is
    tried too: "fixable with --unsafe-fixes" counts only the fixes `--fix --unsafe-fixes` would keep (issue 44).
    `analysed`: what the checking rules find in `module`, when the caller's analysis already is that (else
    analysed here)."""
    tried = [
        f for f in findings
        if f.fix is not None and _order_rule(f.rule) and f.rule.code in checker.enabled_codes
        and not f.fix.files  # a fix of several files is checked when it is written
    ]
    if not tried:
        return
    from amp_lint.engine.file_edits import OtherFiles

    current = analysed() if analysed is not None else checker._analysed(module, code, filename, [], file_ignored)
    others = OtherFiles(checker._other_file_analysis(file_ignored), {r.code: r.name for r in checker.check_rules},
                        checker.refused_files, False)  # fmt: skip
    by_message: Dict[tuple, list] = {}
    for found in current.findings:
        by_message.setdefault((found.finding.rule.code, found.finding.message), []).append(found)
    matched: List[Tuple[Finding, Fix]] = []
    owners: Dict[int, list] = {}
    for finding in tried:
        mine = [f for f in by_message.get((finding.rule.code, finding.message), ()) if f.finding.fix is not None and not f.finding.fix.files]
        if len(mine) != 1:
            continue  # not matched one to one: leave it as it is
        matched.append((finding, mine[0].finding.fix))
        owners[id(mine[0].finding.fix)] = mine
    kept = _kept(checker, current, [fix for _, fix in matched], owners, filename, file_ignored, others)
    for finding, fix in matched:
        if not kept(fix):
            finding.fix = None


def _kept(checker: "Checker", current, fixes: List[Fix], owners: Dict[int, list], filename: str, file_ignored: FrozenSet[str],
          others) -> Callable[[Fix], bool]:  # fmt: skip
    """Would `--fix` keep `fix`? Checked as `--fix` checks a pass: the compatible fixes together, and only
    when that fails, halves of them down to single fixes (`Checker._checked_pass`). So N fixes that pass
    cost one analysis, not N (N clips of scaled gradients, issue 45). The safe fixes are tried as `--fix`
    applies them, alone; an unsafe one with all the others, as `--fix --unsafe-fixes` applies it. A fix
    whose findings the kept ones remove is kept: `--fix` fixes them (N clips of scaled gradients: one
    `unscale_` before the first). A fix that waits for a later pass (it overlaps a chosen one) is tried on
    its own."""
    safe = [fix for fix in fixes if fix.applicability is Applicability.SAFE]
    tiers = [fixes] if checker.unsafe_fixes or len(safe) == len(fixes) else [safe, fixes]
    verdicts: Dict[int, bool] = {}
    ancestry = ancestry_of(current.module, fixes, current.model.parents)
    for tier in tiers:
        chosen = select_compatible(tier, current.module, ancestry)
        settled: List[Fix] = []  # their findings gone with the fixes kept: `--fix` fixes them too
        accepted = checker._checked_pass(current, chosen, owners, ancestry, filename, file_ignored, {}, others, settled)[0] if chosen else []
        for fix in chosen:
            if tier is fixes or fix.applicability is Applicability.SAFE:
                verdicts.setdefault(id(fix), any(fix is a for a in accepted + settled))

    def kept(fix: Fix) -> bool:
        if id(fix) not in verdicts:  # not chosen with the others
            accepted, _ = checker._checked_pass(
                current, [fix], owners, ancestry_of(current.module, [fix], current.model.parents), filename, file_ignored, {}, others
            )
            verdicts[id(fix)] = bool(accepted)
        return verdicts[id(fix)]

    return kept
