"""The other files a pass of fixes changes (`FileEdit`s), combined and checked as the checked file's text is.

A fix that changes several files carries, beside its node replacements in the checked file, the new text of
each other file (`amp_lint.fixes.types.FileEdit`), made on that file's text as read from disk. The fixes of one
run that change the same file are combined line by line (`merged_text`); two that change the same lines
differently cannot both go in: the later one waits for the next run (as an overlapping fix waits for the next
pass), and is reported "not fixed" with the reason.

Each combined text goes through the same check as the checked file's (`amp_lint.engine.fix_check`): it parses,
it brings no new finding of the checked rules (nor of the default ones), no new double scale, unscale_, step or
update, and fixing it again changes nothing: no fix of the enabled rules appears that the file as read did
not already offer. A file the run may not write (outside the checked paths, excluded by the configuration, a
check of stdin or a notebook) refuses the fix, saying why.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.engine.fix_check import FindingKey, hazard_regression, regression
from amp_lint.engine.related import _shown_path
from amp_lint.fixes.text_edits import merged_text
from amp_lint.fixes.types import Fix, FileEdit

# path -> (the text as read, the text with this run's accepted fixes)
OtherTexts = Dict[str, Tuple[str, str]]

# Analyse a text of another file: (findings' keys, how many of them carry an applicable fix of an enabled rule).
Analyse = Callable[[str, str], Tuple[List[FindingKey], int]]


class OtherFiles:
    """The other files a run's fixes change: combined, checked, and said why not."""

    def __init__(self, analyse: Analyse, rule_names: Mapping[str, str], refused: Mapping[str, str], writes_others: bool) -> None:
        self.analyse = analyse
        self.rule_names = rule_names
        self.refused = dict(refused)  # absolute path -> why this run does not write it
        self.writes_others = writes_others  # False without a project (stdin, a notebook, the API)
        self._as_read: Dict[str, Tuple[List[FindingKey], int]] = {}
        self._checked: Dict[Tuple[str, str], Optional[str]] = {}

    def combined(self, accepted: OtherTexts, fixes: Sequence[Fix]) -> Tuple[OtherTexts, Optional[str]]:
        """The texts of the other files with `fixes` on top of `accepted`, each checked; or the reason why not."""
        edits: Dict[str, List[FileEdit]] = {}
        for fix in fixes:
            for edit in fix.files:
                edits.setdefault(os.path.abspath(edit.path), []).append(edit)
        if not edits:
            return accepted, None
        texts = dict(accepted)
        for path, of_path in edits.items():
            shown = _shown_path(path)
            if not self.writes_others:
                return accepted, f"the fix also changes `{shown}`, and this check writes one text only"
            if path in self.refused:
                return accepted, f"the fix also changes `{shown}`, {self.refused[path]}"
            base = texts[path][0] if path in texts else of_path[0].before
            if any(edit.before != base for edit in of_path):
                return accepted, f"`{shown}` changed while the fixes were made; run --fix again"
            versions = [edit.after for edit in of_path]
            if path in texts:
                versions.append(texts[path][1])
            text = merged_text(base, versions)
            if text is None:
                return accepted, f"it changes the same lines of `{shown}` as another fix; run --fix again"
            why = self._check(path, base, text)
            if why is not None:
                return accepted, f"in `{shown}`: {why}"
            texts[path] = (base, text)
        return texts, None

    def _check(self, path: str, base: str, text: str) -> Optional[str]:
        key = (path, text)
        if key not in self._checked:
            self._checked[key] = self._why_not(path, base, text)
        return self._checked[key]

    def _why_not(self, path: str, base: str, text: str) -> Optional[str]:
        try:
            cst.parse_module(text)
        except Exception as error:
            return f"the fixed code does not parse ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
        why = hazard_regression(base, text)
        if why is not None:
            return why
        if path not in self._as_read:
            self._as_read[path] = self.analyse(path, base)
        before, fixable_before = self._as_read[path]
        after, fixable_after = self.analyse(path, text)
        why = regression(before, after, (), self.rule_names)
        if why is not None:
            return why
        if fixable_after > fixable_before:
            return "a second --fix would change it again (the fixed code offers a fix the file did not)"
        return None


def file_edits(texts: OtherTexts) -> Tuple[FileEdit, ...]:
    """The other files' changes of a run, one `FileEdit` per file that changed, by path."""
    return tuple(FileEdit(path, before, after) for path, (before, after) in sorted(texts.items()) if before != after)


def refused_files(options: Mapping[str, object]) -> Dict[str, str]:
    """The files a run does not write, from the rule options' `refused_files` ((path, why), ...)."""
    return {os.path.abspath(str(path)): str(why) for path, why in options.get("refused_files") or ()}
