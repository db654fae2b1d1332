"""Check (and fix) one source text: prefilter -> parse -> model -> rules -> fixes -> diagnostics.

`Checker.check` is pure: text in, diagnostics (and the fixed text) out. Reading and writing files,
parallelism and caching live in `amp_lint.engine.runner`.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amp_lint import rules as registry
from amp_lint.diagnostics import (
    Applicability,
    Confidence,
    Diagnostic,
    Edit,
    FileError,
    FixSummary,
    Location,
    one_line,
)
from amp_lint.fixes.builder import forget_text, remember_text
from amp_lint.fixes.text_edits import EditsOfFixes, text_edits
from amp_lint.fixes.apply import ancestry_of, apply_fixes, fix_targets_in, select_compatible
from amp_lint.files.lines import split_lines
from amp_lint.analysis.builder import build_model
from amp_lint.analysis import values
from amp_lint.analysis.file_model import FileModel
from amp_lint.engine.related import _related_locations, _related_text, _short_code
from amp_lint.engine.fix_check import FindingKey, finding_key, hazard_regression, regression
from amp_lint.engine.fix_preview import drop_refused_fixes
from amp_lint.engine.file_edits import OtherFiles, OtherTexts, file_edits, refused_files
from amp_lint.engine.partial_analysis import fix_regression, iteration_notes
from amp_lint.fixes.types import FileEdit
from amp_lint.parse import python_ast
from amp_lint.parse.cst_parse import parse_module
from amp_lint.parse.gc_pause import no_cyclic_gc
from amp_lint.parse.guard import check_parse_cost
from amp_lint.parse.node_memo import NodeMemo
from amp_lint.parse.noqa_comments import file_level_noqa, suppressing_row
from amp_lint.parse.syntax_errors import parse_failure
from amp_lint.parse.positions import NodeLocator
from amp_lint.parse.prefilter import Prefilter
from amp_lint.parse.relevant import relevant_text
from amp_lint.parse.roundtrip import prepare
from amp_lint.rules.base import Finding, Fix, Rule

MAX_FIX_PASSES = 10


@dataclass
class SourceResult:
    diagnostics: List[Diagnostic] = field(default_factory=list)
    errors: List[FileError] = field(default_factory=list)
    fixed: Dict[str, int] = field(default_factory=dict)  # rule code -> fixes applied
    fixed_source: Optional[str] = None  # the new text, when --fix changed something
    unsafe_fixable: int = 0  # findings an --unsafe-fixes run would fix
    parsed: bool = False  # False when the prefilter ruled the file out
    # The other files of the project this result depends on, (absolute path, digest): the modules the
    # analysis read to follow calls (`ProjectIndex.recording`). The result cache stores them with it.
    dependencies: Tuple[Tuple[str, str], ...] = ()
    # The other files the applied fixes change (`FileEdit`s): written with `fixed_source`, all or none.
    other_files: Tuple[FileEdit, ...] = ()


class Checker:
    """Runs the enabled rules over source texts. One instance per run (per settings)."""

    def __init__(
        self,
        enabled: FrozenSet[str],
        *,
        fix: bool = False,
        unsafe_fixes: bool = False,
        with_edits: bool = False,
        rule_options: Optional[dict] = None,
        show_assumed: Optional[bool] = None,
        unfixable: FrozenSet[str] = frozenset(),
        project=None,
    ) -> None:
        # The project's modules (`amp_lint.analysis.project.ProjectIndex`): calls into them are followed.
        self.project = None
        if project is not None:
            from amp_lint.analysis.summaries import ProjectSummaries

            self.project = ProjectSummaries(project)
        options = rule_options or {}
        # Preview mode (Ruff's): rules marked preview run only with it, and fixes marked preview are offered
        # only with it.
        self.preview = bool(options.get("preview"))
        self.rule_classes = [r for r in registry.ALL_RULES if r.code in enabled and (self.preview or not r.preview)]
        self.unfixable = unfixable  # as in Ruff: their findings are reported without a fix
        self.enabled_codes = frozenset(enabled)
        # `--ignore-noqa` (Ruff's): no `# noqa` comment suppresses anything, so none is unused either.
        self.ignore_noqa = bool(options.get("ignore_noqa"))
        # AMP900 (unused `# noqa`) is decided after the other rules' findings are placed and suppressed.
        self.unused_noqa = None if self.ignore_noqa else next((r for r in self.rule_classes if r.code == "AMP900"), None)
        self.rules: List[Rule] = [r(rule_options) for r in self.rule_classes]
        self.fix = fix
        self.unsafe_fixes = unsafe_fixes
        # Fixes that change other files too: only with a project (its files are where they are written), never
        # in the files a run refuses (`refused_files`: outside the checked paths, or excluded).
        self.writes_others = project is not None
        self.refused_files = refused_files(options)
        self._on_disk = False
        self.with_edits = with_edits
        # Findings that rest on an assumption are reported only when asked for (`--show-assumed`).
        self.show_assumed = bool(show_assumed if show_assumed is not None else options.get("show_assumed"))
        # ... and, without it, for the rules selected by their own code or by ALL (`Settings.assumed_shown_for`).
        self.assumed_shown_for = frozenset(options.get("assumed_shown_for") or ())
        self.prefilter = Prefilter(self.rule_classes)
        self.enabled_codes = frozenset(r.code for r in self.rule_classes)
        # A fixed file is checked with these: a fix must not bring a finding of any default rule either.
        defaults = set(registry.default_codes())
        self.check_rules: List[Rule] = self.rules + [
            r(rule_options)
            for r in registry.ALL_RULES
            if r.code in defaults and r.code not in self.enabled_codes and (self.preview or not r.preview)
        ]

    def may_match(self, source: str) -> bool:
        return bool(self.rules) and self.prefilter.may_match(source)

    def text_may_match(self, source: str) -> bool:
        return bool(self.rules) and self.prefilter.text_may_match(source)

    def check(self, source: str, filename: str, path: Optional[str] = None, prefiltered: bool = False) -> SourceResult:
        """Check `source`, shown as `filename`; `path`, where it lives on disk, lets the analysis follow
        its calls into the project's other modules (with a project index). `prefiltered`: the caller has
        run the same prefilter (`may_match`) and it passed."""
        self._on_disk = path is not None  # a fix may change other files only beside a file on disk
        with no_cyclic_gc():
            if self.project is None or path is None:
                return self._check(source, filename, prefiltered)
            with self.project.index.recording() as consulted, self.project.index.checking_file(path):
                with self.project.checking(path, source):
                    result = self._check(source, filename, prefiltered)
            own = os.path.abspath(path)
            result.dependencies = tuple(sorted((p, d) for p, d in consulted.items() if p != own))
            return result

    def _check(self, source: str, filename: str, prefiltered: bool = False) -> SourceResult:
        result = SourceResult()
        if not prefiltered and not self.may_match(source):
            return result
        file_noqa = None if self.ignore_noqa else file_level_noqa(source)
        if file_noqa is not None and not file_noqa:
            return result  # `# amp-lint: noqa` for the whole file
        refusal = check_parse_cost(source, filename)
        if refusal is not None:
            result.errors.append(refusal)
            return result
        prepared = prepare(source)  # without what LibCST would drop; put back at the end
        if not self.fix and self.unused_noqa is None and not prepared.changed:  # a fix edits the whole text
            prepared = dataclasses.replace(
                prepared, text=relevant_text(source, python_ast.parse(source), self.prefilter.gate)
            )
        python_ast.release_large()
        try:
            module = parse_module(prepared.text)
        except cst.ParserSyntaxError as error:
            result.errors.append(parse_failure(filename, prepared.text, error))
            return result
        except cst.CSTValidationError as error:  # LibCST's parser builds a node it then refuses (`for x in*a:`)
            result.errors.append(FileError(filename, f"not analysed: valid Python that LibCST cannot parse ({error})"))
            return result
        result.parsed = True
        if prepared.text is not source:  # the relevant units only: the fixes follow the whole file's style
            remember_text(module, prepared.text, whole_text=source)
        final: Optional[_Placed] = None
        if self.fix and prepared.restore(module.code).text != source:
            # LibCST drops something we do not put back: writing its output would change bytes the
            # fixes never touched, so this file is reported, not fixed.
            result.errors.append(
                FileError(filename, "not fixed: LibCST cannot reproduce this file byte for byte (form feeds or lone CR line endings)")
            )
        elif self.fix:
            module, final = self._fix_passes(module, prepared.text, filename, result, file_noqa or frozenset())
        source = prepared.text  # from here on: the text LibCST parsed, which the module's positions refer to
        code = result.fixed_source if result.fixed_source is not None else source
        if final is None:
            found, model = self._rule_findings(module, code, filename, result, file_noqa or frozenset())
            locator = NodeLocator(module, code, model.parents)
            findings, positions = self._placed(found, locator, code)
        else:  # the last fix pass found nothing more to fix: its findings are those of the fixed file
            findings, positions, locator, model = final
        result.errors += iteration_notes(model, locator, filename, self.rules)  # an iteration too large to analyse
        if not self.fix:
            # When the checking rules are the enabled ones, what they find here is this analysis: no second one.
            same = len(self.check_rules) == len(self.rules)
            reuse = (lambda: _Analysed(module, code, [_Found(f, finding_key(f, model.parents)) for f in findings],
                                       list(positions), locator, model, [])) if same else None  # fmt: skip
            drop_refused_fixes(self, module, code, filename, findings, file_noqa or frozenset(), reuse)
        fixes = [f.fix for f in findings if f.fix is not None]
        edits_of = EditsOfFixes(module, code, fixes, locator, model.parents) if self.with_edits and fixes else None
        lines = split_lines(code)
        for finding, (start, end) in zip(findings, positions):
            fix = finding.fix
            if fix is not None and fix.applicability is Applicability.UNSAFE and not self.unsafe_fixes:
                result.unsafe_fixable += 1
            result.diagnostics.append(
                Diagnostic(
                    code=finding.rule.code,
                    message=finding.message,
                    filename=filename,
                    location=start,
                    end_location=end,
                    severity=finding.severity or finding.rule.severity,
                    rule_name=finding.rule.name,
                    confidence=finding.confidence,
                    fix=self._fix_summary(fix, edits_of) if fix is not None else None,
                    source_line=lines[start.row - 1] if 0 < start.row <= len(lines) else "",
                    context=finding.context,
                    related=_related_locations(finding.related, locator.range_of, self._foreign_place),
                )
            )
        # The analysis is over: its cycles broken and the per-file memos emptied, the model and the tree
        # go with refcounting as this returns (not with the cyclic collector, nor with the next file).
        model.release()
        forget_text()
        values.forget()
        NodeMemo.forget_all()
        if prepared.changed:
            result.fixed_source, result.diagnostics = prepared.put_back(result.fixed_source, result.diagnostics)
        return result

    # --- findings ---
    def _rule_findings(
        self,
        module: cst.Module,
        code: str,
        filename: str,
        result: SourceResult,
        file_ignored: FrozenSet[str],
        rules: Optional[Sequence[Rule]] = None,
    ) -> Tuple[List[Finding], FileModel]:
        """What the enabled rules find in `module` (not yet placed nor filtered by `# noqa`), and the model.

        `code` is the module's text (what `module.code` would generate, at a cost on big files).
        """
        remember_text(module, code)
        model = build_model(module)
        findings: List[Finding] = []
        for rule in self.rules if rules is None else rules:
            if rule.code in file_ignored:
                continue
            try:
                rule.filename, rule.files_read = filename, []
                found = list(rule.check(model))
                if rule.files_read and self.project is not None:  # a side file a rule read (a DeepSpeed config)
                    for side_file in rule.files_read:  # is a dependency of the cached result
                        self.project.index.note_read(side_file)
                if rule.code in self.unfixable or (rule.preview_fix and not self.preview):
                    for finding in found:
                        finding.fix = None
                findings.extend(found)
            except Exception as error:  # a bug in one rule must not hide the others' findings
                result.errors.append(FileError(filename, f"internal error in {rule.code}: {type(error).__name__}: {error}"))
        return _confidence_policy(findings, self.show_assumed, self.assumed_shown_for), model

    def _placed(
        self, findings: List[Finding], locator: NodeLocator, code: str
    ) -> Tuple[List[Finding], List[Tuple[Location, Location]]]:
        """The findings with their positions, in source order, minus those that `# noqa` suppresses."""
        if not findings and self.unused_noqa is None:
            return [], []
        locator.want(id(f.node) for f in findings)
        locator.want(id(node) for f in findings for _, node in f.related)
        lines = split_lines(code)
        kept, positions = [], []
        reported = set()
        used: Set[Tuple[int, str]] = set()  # (row of the `# noqa`, code) that suppressed a finding
        # A helper's finding can come twice: from its own step (fixable) and through a caller (not).
        findings.sort(key=lambda f: f.fix is None)
        for finding in findings:
            if (finding.rule.code, id(finding.node)) in reported:
                continue  # seen from a helper's own step and from its caller's: report once
            reported.add((finding.rule.code, id(finding.node)))
            code_range = locator.range_of(id(finding.node))
            if code_range is None:
                # An event of another module, reached through a call of this file: placed at the call.
                code_range = self._at_call_site(finding, locator)
                if code_range is None:
                    continue
            if finding.related:
                finding.message += _related_text(finding.related, locator.range_of, self._foreign_place)
            finding.message = one_line(finding.message)  # code quoted from several lines: one line
            start = Location(code_range.start.line, code_range.start.column + 1)
            end = Location(code_range.end.line, code_range.end.column + 1)
            row = 0 if self.ignore_noqa else suppressing_row(finding.rule.code, lines, start.row, end.row)
            if row:
                used.add((row, finding.rule.code))
                continue
            kept.append(finding)
            positions.append((start, end))
        if self.unused_noqa is not None:  # AMP900: now that every suppression is known
            for finding, position in self.unused_noqa.unused(
                locator.module, code, used, self.enabled_codes, frozenset(registry.all_codes())
            ):
                if "AMP900" in self.unfixable:
                    finding.fix = None
                kept.append(finding)
                positions.append(position)
        order = sorted(range(len(kept)), key=lambda i: (positions[i][0], kept[i].rule.code))
        return [kept[i] for i in order], [positions[i] for i in order]

    def _foreign_place(self, node):
        return self.project.foreign_place(node) if self.project is not None else None

    def _at_call_site(self, finding: Finding, locator: NodeLocator):
        """The range of the call in this file through which a finding's event of another module was
        reached; the finding then names that place (message and `related`). Its fix is kept when every node
        it replaces is in this file (an edit at the call site: an `unscale_` before the call that reaches a
        clip); a fix that would replace the other module's nodes is dropped (another file's edits travel as
        `FileEdit`s, checked and written with this file's: `amp_lint.engine.multi_file`)."""
        place = self._foreign_place(finding.node)
        if place is None:
            return None
        for _, node in finding.related:
            site = locator.range_of(id(node))
            if site is not None:
                finding.related = tuple(finding.related) + ((f"`{_short_code(finding.node)}`", finding.node),)
                if finding.fix is not None and not fix_targets_in(locator.module, finding.fix, locator.parents):
                    finding.fix = None  # it edits the other module's tree: only a `FileEdit` of it may
                return site
        return None

    # --- fixes ---
    def _applicable(self, fix: Optional[Fix]) -> bool:
        return fix is not None and (fix.applicability is Applicability.SAFE or self.unsafe_fixes)

    def _fix_passes(
        self, module: cst.Module, source: str, filename: str, result: SourceResult, file_ignored: FrozenSet[str]
    ) -> Tuple[cst.Module, Optional["_Placed"]]:
        """The module with the fixes applied, pass after pass until none is left; and the last pass's
        placed findings, those of the returned module (no need to find them again).

        Each pass's fixed code is checked before it is kept (`_checked_pass`); a fix that fails the check
        is dropped, the others are kept, and the report says which fix and why.
        """
        current = self._analysed(module, source, filename, result.errors, file_ignored)
        rejected: Dict[FindingKey, _Rejected] = {}
        others = OtherFiles(self._other_file_analysis(file_ignored), {r.code: r.name for r in self.check_rules},
                            self.refused_files, self.writes_others and self._on_disk)  # fmt: skip
        for _ in range(MAX_FIX_PASSES):
            fixes: List[Fix] = []
            owners: Dict[int, List[_Found]] = {}
            for found in current.findings:
                fix = found.finding.fix
                if found.finding.rule.code not in self.enabled_codes or not self._applicable(fix):
                    continue
                if found.key in rejected and rejected[found.key].on_code is current.code:
                    continue  # failed the check on this very code: it would fail again
                # A fix that failed on an earlier state of the code gets another try: the fixes applied
                # since may be what it needed (an `unscale_` is safe once the clip moved into the boundary).
                if id(fix) not in owners:
                    owners[id(fix)] = []
                    fixes.append(fix)
                owners[id(fix)].append(found)
            ancestry = ancestry_of(current.module, fixes, current.model.parents)
            chosen = select_compatible(fixes, current.module, ancestry)
            if not chosen:
                break
            accepted, fixed = self._checked_pass(current, chosen, owners, ancestry, filename, file_ignored, rejected, others)
            if fixed is None:
                continue  # every fix of this pass was dropped; those that waited for them get their turn
            result.errors.extend(e for e in fixed.errors if e not in result.errors)
            for code, count in self._removed(current, fixed).items():
                result.fixed[code] = result.fixed.get(code, 0) + count
            current = fixed
            result.fixed_source = current.code if current.code != source else None
            result.other_files = file_edits(current.other_files)
        self._report_rejected(rejected, current, filename, result)
        enabled = [i for i, found in enumerate(current.findings) if found.finding.rule.code in self.enabled_codes]
        findings = [current.findings[i].finding for i in enabled]
        positions = [current.positions[i] for i in enabled]
        return current.module, (findings, positions, current.locator, current.model)

    def _other_file_analysis(self, file_ignored: FrozenSet[str]):
        """How a text of another file that a fix changes is analysed: its findings' keys, and how many carry a
        fix this run would apply."""

        def analyse(path: str, text: str) -> Tuple[List[FindingKey], int]:
            module = cst.parse_module(text)
            found, model = self._rule_findings(module, text, path, SourceResult(), frozenset(), self.check_rules)
            fixable = sum(1 for f in found if f.rule.code in self.enabled_codes and self._applicable(f.fix))
            return [finding_key(f, model.parents) for f in found], fixable

        return analyse

    def _removed(self, before: "_Analysed", after: "_Analysed") -> Counter:
        """{rule code: findings of the enabled rules that a pass removed}: every finding its fixes made go
        away counts, also one that shared a fix with another (two deprecated names of one import)."""
        # Counted per rule (a fix adds no finding: the check refuses it), so that a finding whose message
        # changed with the code around it is not counted as removed.
        gone = Counter(f.finding.rule.code for f in before.findings if f.finding.rule.code in self.enabled_codes)
        gone.subtract(Counter(f.finding.rule.code for f in after.findings))
        return Counter({code: count for code, count in gone.items() if count > 0})

    def _analysed(
        self, module: cst.Module, code: str, filename: str, errors: List[FileError], file_ignored: FrozenSet[str]
    ) -> "_Analysed":
        """What the rules a fix is checked against (the enabled ones and the default ones) find in `module`."""
        scratch = SourceResult()
        found, model = self._rule_findings(module, code, filename, scratch, file_ignored, self.check_rules)
        errors.extend(scratch.errors)
        locator = NodeLocator(module, code, model.parents)
        findings, positions = self._placed(found, locator, code)
        keyed = [_Found(f, finding_key(f, model.parents)) for f in findings]
        return _Analysed(module, code, keyed, positions, locator, model, list(scratch.errors))

    def _checked_pass(
        self,
        current: "_Analysed",
        chosen: List[Fix],
        owners: Dict[int, List["_Found"]],
        ancestry,
        filename: str,
        file_ignored: FrozenSet[str],
        rejected: Dict[FindingKey, "_Rejected"],
        others: OtherFiles,
        settled: Optional[List[Fix]] = None,
    ) -> Tuple[List[Fix], Optional["_Analysed"]]:
        """The fixes of `chosen` that pass the check together, and the analysed code with them applied.

        All of them are tried first; when that fails, the group is split in halves and each half tried
        on top of what was accepted, down to single fixes, which are dropped with the reason.
        `settled`: when given, a fix whose findings the kept fixes already removed is not tried but put
        there (the check's preview: N fixes of which one fixes every finding cost a few analyses, not N).
        """
        accepted: List[Fix] = []
        best: List[Optional[_Analysed]] = [None]
        before_keys = [found.key for found in current.findings]
        rule_names = {rule.code: rule.name for rule in self.check_rules}

        def attempt(group: List[Fix]):
            try:
                new_code = apply_fixes(current.module, group, ancestry).code
            except Exception as error:  # a fix that cannot be applied is our bug: drop it
                return f"the fix could not be applied ({type(error).__name__}: {error})"
            if new_code == current.code:
                return "the fix changes nothing"
            try:
                new_module = cst.parse_module(new_code)
            except Exception as error:
                return f"the fixed code does not parse ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
            why = hazard_regression(current.code, new_code)
            if why is not None:
                return why
            other_texts, why = others.combined(current.other_files, group)  # the other files it changes
            if why is not None:
                return why
            fixed = self._analysed(new_module, new_code, filename, [], file_ignored)
            fixed.other_files = other_texts
            fixed_keys = [found.key for fix in group for found in owners[id(fix)]]
            why = regression(before_keys, [found.key for found in fixed.findings], fixed_keys, rule_names)
            why = why or fix_regression(current.model, fixed.model)
            return fixed if why is None else why

        def settle(group: List[Fix]) -> None:
            if settled is not None and best[0] is not None:
                left = {found.key for found in best[0].findings}
                done = [fix for fix in group if not any(found.key in left for found in owners[id(fix)])]
                settled.extend(done)
                group = [fix for fix in group if not any(fix is d for d in done)]
                if not group:
                    return
            outcome = attempt(accepted + group)
            if isinstance(outcome, _Analysed):
                accepted.extend(group)
                best[0] = outcome
            elif len(group) == 1:
                for found in owners[id(group[0])]:
                    position = current.positions[current.findings.index(found)]
                    rejected[found.key] = _Rejected(found.finding.rule.code, position[0], outcome, current.code)
            elif settled is not None:  # one at a time: the first kept fix may settle all the others
                for fix in group:
                    settle([fix])
            else:
                half = len(group) // 2
                settle(group[:half])
                settle(group[half:])

        failed_before = dict(rejected)
        settle(list(chosen))
        # A fix may need one that came after it in the pass (an `unscale_` before a clip, the `update()`
        # another finding adds): each dropped one gets one more try on top of all that was kept.
        for fix in chosen:
            keys = [found.key for found in owners[id(fix)]]
            if fix in accepted or not any(k in rejected and rejected[k] is not failed_before.get(k) for k in keys) or not accepted:
                continue
            outcome = attempt(accepted + [fix])
            if isinstance(outcome, _Analysed):
                accepted.append(fix)
                best[0] = outcome
                for key in keys:
                    rejected.pop(key, None)
        return accepted, best[0]

    def _report_rejected(
        self, rejected: Dict[FindingKey, "_Rejected"], final: "_Analysed", filename: str, result: SourceResult
    ) -> None:
        """A "not fixed" error for each dropped fix whose finding is still there (another fix may have
        fixed it); such a finding is reported without a fix."""
        if not rejected:
            return
        remaining = {found.key for found in final.findings}
        for key, why in rejected.items():
            if key not in remaining:
                continue
            where = f"{why.code} at {filename}:{why.location.row}"
            result.errors.append(FileError(filename, f"not fixed: {where}: {why.reason}", why.location))
        for found in final.findings:
            if found.key in rejected:
                found.finding.fix = None

    def _fix_summary(self, fix: Fix, edits_of: Optional[EditsOfFixes]) -> FixSummary:
        edits: Tuple[Edit, ...] = ()
        if edits_of is not None:
            try:
                edits = edits_of.edits(fix)
            except Exception:
                edits = ()
        # The other files a fix changes (an editor applies all of them or none): their edits when asked for.
        files = tuple((e.path, text_edits(e.before, e.after) if edits_of is not None else ()) for e in fix.files)
        return FixSummary(fix.applicability, fix.message, edits, files)


# Findings with their positions, the locator that placed them and the model they came from.
_Placed = Tuple[List[Finding], List[Tuple[Location, Location]], NodeLocator, FileModel]


@dataclass(eq=False)
class _Found:
    """A finding and the key a fixed file's findings are compared by."""

    finding: Finding
    key: FindingKey


@dataclass
class _Analysed:
    """One state of a file being fixed: its tree, its text, and what the checking rules find there."""

    module: cst.Module
    code: str
    findings: List[_Found]
    positions: List[Tuple[Location, Location]]
    locator: NodeLocator
    model: FileModel
    errors: List[FileError]
    other_files: OtherTexts = field(default_factory=dict)  # the other files' texts, with the fixes so far


@dataclass(frozen=True)
class _Rejected:
    """A fix that failed the check: its rule, where its finding was, and why."""

    code: str
    location: Location
    reason: str
    on_code: str = ""  # the text it failed on: tried again once other fixes changed it


def _confidence_policy(findings: List[Finding], show_assumed: bool, shown_for: FrozenSet[str] = frozenset()) -> List[Finding]:
    """Only proved findings by default (all of them for the rules in `shown_for`, selected by name); a safe
    fix only on a proved (high-confidence) finding."""
    kept = []
    for finding in findings:
        if finding.assumption or finding.confidence is not Confidence.HIGH:
            if not show_assumed and finding.rule.code not in shown_for:
                continue
            if finding.assumption:
                finding.message += f" ({finding.assumption})"
        if finding.confidence is not Confidence.HIGH and finding.fix is not None and finding.fix.applicability is Applicability.SAFE:
            finding.fix = dataclasses.replace(finding.fix, applicability=Applicability.UNSAFE)
        kept.append(finding)
    return kept
