"""Fixes that change several files: written (or shown by --diff) all or none, by the main process.

A worker that checks `a.py` and applies a fix that also changes `b.py` writes nothing: its outcome carries the
group (`FileOutcome.file_group`: each file's text as read and its new text). Once every file of the run is
checked, the groups are settled here, in path order:

- a file of the group that the run does not check (outside the paths given, or excluded by the configuration)
  is never written: `a.py` is checked again with that file refused, and the fix is reported "not fixed", why;
- a file of the group that another fix of this run changed (its own fixes, or an earlier group's) conflicts:
  with --fix, `a.py` is checked again on the files as they now are (the fix loop's next pass: its edit is
  made on the new text); with --diff, nothing is written, so the fix waits for the --fix run, said so;
- otherwise every file is written with `write_all_or_none` (a file changed on disk since it was read stops
  the whole group, and `a.py` is checked again), or, with --diff, every file's diff is shown.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Dict, Optional, Set, Tuple

from amp_lint.diagnostics import Applicability, FileError

NOT_CHECKED = "which is not among the files this run checks (outside the paths given, or excluded by the configuration); not written"
CHANGED_BY_DIFF = "which other fixes of this run change as well; `--fix` applies both"
MAX_RETRIES = 2


def settle_multi_file_fixes(outcomes: Dict[str, object], configs: Dict[str, object], check_file: Callable) -> None:
    """After every file of a run is checked: write (or diff) the groups, then unmark the fixes it could not apply."""
    settle_file_groups(outcomes, configs, check_file)
    drop_unwritable_fixes(outcomes, configs)


def settle_file_groups(outcomes: Dict[str, object], configs: Dict[str, object], check_file: Callable) -> None:
    """Write (or diff) every outcome's group of files, or check its file again without what cannot be written."""
    planned = {os.path.abspath(path) for path, config in configs.items() if not config.not_written}
    # Checked but never written (a symlink out of the checked paths): refused, saying why.
    not_written = {os.path.abspath(path): config.not_written for path, config in configs.items() if config.not_written}
    # Files this run changed (or, with --diff, would change) through their own fixes.
    changed: Set[str] = {
        os.path.abspath(path) for path, outcome in outcomes.items() if outcome.fixed_text is not None and not outcome.file_group
    }
    for path in sorted(p for p, o in outcomes.items() if o.file_group):
        config = configs[path]
        outcome = outcomes[path]
        settled = False
        for _ in range(MAX_RETRIES + 1):
            if not outcome.file_group:
                settled = True
                break
            own = outcome.file_group[0][0]
            others = [entry[0] for entry in outcome.file_group[1:]]
            refused = {
                other: f"which is a {not_written[other]}; not written" if other in not_written else NOT_CHECKED
                for other in others
                if other not in planned
            }
            clashing = [other for other in others if other in changed]
            if clashing and not config.write:
                refused.update({other: CHANGED_BY_DIFF for other in clashing})
            if refused:
                outcome = _checked_again(path, config, check_file, refused)
                continue
            if clashing:  # --fix: check again on the files as they are now
                outcome = check_file(path, config)
                continue
            if not config.write:
                outcome.diff = "".join(_diff(file, before, after) for file, before, after in outcome.file_group)
                changed.update(entry[0] for entry in outcome.file_group)
                settled = True
                break
            why, again = _write_group(outcome.file_group)
            if why is None:
                changed.update(entry[0] for entry in outcome.file_group)
                settled = True
                break
            if not again:  # nothing was written (a read-only file, a full disk): the findings as they are
                outcome = check_file(path, dataclasses.replace(config, fix=False))
                outcome.errors.append(FileError(path, f"fixes not written: {why}"))
                settled = True
                break
            changed.add(own)
            outcome = check_file(path, config)  # a file changed on disk since it was read: once more
        if not settled:  # still a group after the retries: nothing of it is written
            outcome.errors.append(FileError(path, "fixes not written: the other files they change kept changing"))
            outcome.fixed, outcome.fixed_text, outcome.file_group = {}, None, ()
        outcomes[path] = outcome


def _checked_again(path: str, config, check_file: Callable, refused: Dict[str, str]):
    """The file checked (and fixed) again, the fixes that change a refused file dropped with the reason."""
    options = dict(config.rule_options)
    known = dict(options.get("refused_files") or ())
    known.update(refused)
    options["refused_files"] = tuple(sorted(known.items()))
    return check_file(path, dataclasses.replace(config, rule_options=tuple(sorted(options.items(), key=lambda kv: kv[0]))))


def _write_group(group) -> Tuple[Optional[str], bool]:
    """Write every file of the group, or none: (None, _) when written; else the reason, and whether a file
    changed since it was read (then the fix is made again on the new text)."""
    from amp_lint.files.sources import FileChangedError, SourceError, read_source
    from amp_lint.files.writing import write_all_or_none

    items = []
    for path, before, after in group:
        try:
            source = read_source(Path(path))
        except SourceError as error:
            return error.message, False
        if source.text != before:
            return f"{path} changed on disk after it was read", True
        items.append((Path(path), after, source))
    try:
        write_all_or_none(items)
    except FileChangedError as error:
        return error.message, True
    except (SourceError, OSError) as error:
        return (error.message if isinstance(error, SourceError) else (error.strerror or str(error))), False
    return None, False


def _diff(path: str, before: str, after: str) -> str:
    from amp_lint.fixes.unified_diff import unified_diff

    shown = os.path.relpath(path)
    shown = path if shown.startswith("..") else shown
    return unified_diff(before, after, f"a/{shown}", f"b/{shown}")


def drop_unwritable_fixes(outcomes: Dict[str, object], configs: Dict[str, object]) -> None:
    """A finding whose fix would change a file this run does not check is reported without a fix (issue 27:
    what is marked fixable is what `--fix` on the same paths applies)."""
    planned = {os.path.abspath(path) for path, config in configs.items() if not config.not_written}
    for outcome in outcomes.values():
        kept = []
        for diagnostic in outcome.diagnostics:
            fix = diagnostic.fix
            if fix is not None and any(path not in planned for path, _ in fix.files):
                if fix.applicability is Applicability.UNSAFE and outcome.unsafe_fixable:
                    outcome.unsafe_fixable -= 1
                diagnostic = dataclasses.replace(diagnostic, fix=None)
            kept.append(diagnostic)
        outcome.diagnostics = kept
