"""One `amp-lint check` run put together: the settings of each file turned into the config its check needs,
the files planned, the result cache opened, standard input checked, and the exit code decided.

The command line (`amp_lint.cli`) reads options and prints; what a run does with them lives here.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from amp_lint import __version__
from amp_lint.diagnostics import FileError, Report
from amp_lint.engine.runner import CheckConfig
from amp_lint.files.settings import RuleSelection

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

# Output formats whose findings carry their fixes' edits.
_FORMATS_WITH_EDITS = ("json", "json-lines", "sarif")


class RunSpec:
    """The parts of a run shared by every file: how to turn a file's settings into a check config."""

    def __init__(self, resolver, registry, fix: bool, write: bool, ignore_noqa: bool = False) -> None:
        self.resolver = resolver
        self.registry = registry
        self.fix = fix
        self.write = write
        self.ignore_noqa = ignore_noqa  # `--ignore-noqa`, as Ruff's: every `# noqa` comment is disregarded
        self._configs: Dict[tuple, CheckConfig] = {}

    def fresh(self) -> "RunSpec":
        """A run that reads the configuration files again (for --watch: one may be what changed)."""
        return RunSpec(self.resolver.reloaded(), self.registry, self.fix, self.write, self.ignore_noqa)

    def config_for(self, settings, path: str) -> CheckConfig:
        key = (id(settings), path if settings.per_file_ignores or settings.extend_per_file_ignores else None)
        config = self._configs.get(key)
        if config is None:
            all_codes = self.registry.all_codes()
            selection = RuleSelection.from_settings(settings, all_codes, self.registry.default_codes())
            enabled = selection.for_path(path, settings, all_codes)
            output_format = self.resolver.root_settings(Path.cwd()).output_format
            config = CheckConfig(
                unfixable=RuleSelection.unfixable(settings, all_codes),
                enabled=enabled,
                fix=self.fix,
                unsafe_fixes=bool(settings.unsafe_fixes),
                with_edits=output_format in _FORMATS_WITH_EDITS,
                write=self.write,
                rule_options=(
                    ("amp_dtype", settings.amp_dtype),
                    ("amp_device", settings.amp_device),
                    ("show_assumed", settings.show_assumed),
                    ("target_torch", settings.target_torch),
                    ("preview", settings.preview),
                    ("target_packages", settings.target_packages),
                    ("assumed_shown_for", settings.assumed_shown_for(all_codes)),
                )
                + ((("ignore_noqa", True),) if self.ignore_noqa else ()),
            )
            self._configs[key] = config
        return config

    def plan(
        self, paths: Sequence[str], *, force_exclude: bool, on_many_bytes=None, walk_index=None, stats=None
    ) -> Tuple[List[Tuple[str, CheckConfig]], List[FileError]]:
        """The files the paths name, each with its check config, and the paths that could not be walked
        (`walk_index`, `stats`: as `amp_lint.files.walk.discover` takes them)."""
        from amp_lint.files.sources import discover

        files, errors = discover(
            paths,
            self.resolver.for_path,
            force_exclude=force_exclude,
            on_many_bytes=on_many_bytes,
            as_text=True,
            index=walk_index,
            stats=stats,
        )
        settings_by_folder: dict = {}  # a file's settings are its folder's: asked once per folder

        def settings_of(path: str):
            folder = os.path.dirname(os.path.abspath(path))
            if folder not in settings_by_folder:
                for_folder = getattr(self.resolver, "for_folder", None)
                settings_by_folder[folder] = for_folder(folder) if for_folder else self.resolver.for_path(path)
            return settings_by_folder[folder]

        planned = [(path, self.config_for(settings_of(path), path)) for path in files]
        if self.fix:  # a symlink out of the paths given is checked, not written (`amp_lint.files.outside_links`)
            from amp_lint.files.outside_links import OUTSIDE_LINK, links_out_of

            outside = links_out_of(paths, files)
            planned = [
                (path, dataclasses.replace(config, not_written=OUTSIDE_LINK) if path in outside else config)
                for path, config in planned
            ]
        return planned, errors


def prefiltered(planned: Sequence[Tuple[str, CheckConfig]]) -> List[str]:
    """The planned files that pass the prefilter (`--prefilter-only`, for the benchmarks)."""
    from amp_lint.engine.runner import may_match
    from amp_lint.files.sources import SourceError, read_bytes

    passed = []
    for path, config in planned:
        try:
            text = read_bytes(path).decode("utf-8", errors="replace")
        except SourceError:
            continue
        if may_match(text, config):
            passed.append(path)
    return passed


def open_cache(cache_dir: Optional[str], root):
    """The result cache of the project (`root`: its settings), keyed by every file's configuration."""
    from amp_lint.files.cache import ResultCache

    directory = cache_dir or os.path.join(root.root or os.getcwd(), ".amp_lint_cache")
    return ResultCache(Path(directory), root.cache_key(), f"{__version__}-{_code_fingerprint()}")


def key_cache_by_files(cache, planned: Sequence[Tuple[str, CheckConfig]]) -> None:
    keys: dict = {}  # a run has a few configurations and thousands of files: each key made once
    file_settings = {}
    for path, config in planned:
        key = keys.get(id(config))
        if key is None:
            key = keys[id(config)] = _config_key(config)
        file_settings[path] = key
    cache.set_file_settings(file_settings)
    # The run-wide entries (the files the prefilter ruled out) depend on every file's configuration.
    cache.settings_key += "|" + format(zlib.crc32("\n".join(sorted(set(file_settings.values()))).encode()), "08x")


def _config_key(config: CheckConfig) -> str:
    """What in a file's check configuration changes the stored result, in a stable order (for the cache)."""
    return repr(
        (sorted(config.enabled), sorted(config.unfixable), config.unsafe_fixes, config.with_edits, tuple(config.rule_options))
    )


def _code_fingerprint() -> str:
    """Changes whenever amp-lint's own code does (an editable install keeps its version number)."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    stamp, pending = [], [""]
    while pending:  # os.scandir, not Path.rglob: a warm run pays for this (200 files) at every start
        relative = pending.pop()
        with os.scandir(os.path.join(package, relative)) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(os.path.join(relative, entry.name))
                elif entry.name.endswith(".py"):
                    info = entry.stat()
                    stamp.append(f"{os.path.join(relative, entry.name)}:{info.st_size}:{info.st_mtime_ns}")
    return format(zlib.crc32("\n".join(sorted(stamp)).encode()), "08x")


_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def fails(severity, fail_on: str) -> bool:
    """Does a finding of this severity fail the run? `fail-on = "info"` (the default): every finding, as in
    Ruff; "warning": info findings are shown and do not fail; "error": only errors fail."""
    return _SEVERITY_RANK[severity.value] >= _SEVERITY_RANK[fail_on]


def exit_code(report: Report, *, fail_on: str = "info", exit_zero: bool = False, exit_non_zero_on_fix: bool = False) -> int:
    """0 clean, 1 findings (or, with `exit_non_zero_on_fix`, something fixed), 2 a file could not be checked.
    A refused fix is no failure (as in Ruff): its finding is reported without a fix."""
    if report.failures:
        return EXIT_ERROR
    if exit_non_zero_on_fix and report.fixed:
        return EXIT_FINDINGS
    if exit_zero:
        return EXIT_CLEAN
    if any(fails(d.severity, fail_on) for d in report.diagnostics):
        return EXIT_FINDINGS
    return EXIT_CLEAN


def fix_only_exit_code(report: Report, *, exit_non_zero_on_fix: bool) -> int:
    """`--fix-only`, as Ruff: 0 unless a file could not be checked (2) or, with --exit-non-zero-on-fix,
    something was fixed (1). A refused fix is no failure: its finding is left, as the others are."""
    if report.failures:
        return EXIT_ERROR
    return EXIT_FINDINGS if exit_non_zero_on_fix and report.fixed else EXIT_CLEAN


def describe_settings(resolver, registry, paths: Sequence[str], stdin_filename: Optional[str], force_exclude: bool) -> str:
    """`--show-settings`, as Ruff: the settings for the first file the paths name (or the stdin file name,
    or the working folder), with the rules that end up on for it."""
    from amp_lint.files.config import describe
    from amp_lint.files.sources import discover

    if paths and list(paths) != ["-"]:
        files, _ = discover(list(paths[:1]), resolver.for_path, force_exclude=force_exclude)
        target = files[0] if files else Path(paths[0])
    elif stdin_filename:
        target = Path(stdin_filename)
    else:
        target = Path.cwd()
    settings = resolver.for_path(target)
    all_codes = registry.all_codes()
    selection = RuleSelection.from_settings(settings, all_codes, registry.default_codes())
    selected = selection.for_path(str(target), settings, all_codes)
    # A preview rule runs only in preview mode: without it, it is selected but not enabled.
    waiting = sorted(selected & frozenset(registry.preview_codes())) if not settings.preview else []
    enabled = sorted(selected - frozenset(waiting))
    head = f"# Resolved settings for: {os.path.abspath(target)}\n"
    if waiting:
        head += f"# Preview rules selected, not enabled (preview is off): {', '.join(waiting)}\n"
    return head + describe(settings, enabled=enabled)


def preview_selection_warnings(settings, registry) -> List[str]:
    """As Ruff: "Selection `AMP034` has no effect because preview is not enabled.", for each selector of
    `select` / `extend-select` that picks only preview rules while preview is off."""
    from amp_lint.files.settings import expand_codes

    if settings.preview:
        return []
    preview, all_codes = frozenset(registry.preview_codes()), registry.all_codes()
    warnings = []
    for selector in dict.fromkeys(pattern.strip().upper() for pattern in settings.select + settings.extend_select):
        codes = expand_codes([selector], all_codes) if selector not in ("", "ALL") else frozenset()
        if codes and codes <= preview:
            warnings.append(f"Selection `{selector}` has no effect because preview is not enabled.")
    return warnings


# --- standard input ------------------------------------------------------------------------------


@dataclass
class StdinResult:
    report: Report
    text: str  # the code as read
    fixed_text: str  # the code after the fixes (the same text when nothing was fixed)
    excluded: bool = False  # --force-exclude excludes the name: nothing was checked
    # What `--fix -` writes: the fixed code in the input's own encoding and BOM; the input's bytes when unfixed.
    fixed_bytes: bytes = b""


class StdinError(ValueError):
    """Standard input that cannot be read as a Python file or a notebook (the message names it)."""


def stdin_excluded(run: RunSpec, name: str, force_exclude: bool) -> bool:
    from amp_lint.files.sources import excluded_by_settings

    path = Path(os.path.abspath(name))
    settings = run.resolver.for_path(path)
    if not (force_exclude or settings.force_exclude):
        return False
    return excluded_by_settings(path, run.resolver.for_path)


def check_stdin(run: RunSpec, raw: bytes, name: str, *, force_exclude: bool) -> StdinResult:
    """Check (and with `run.fix`, fix) code read from standard input, reported as `name`."""
    from amp_lint.engine.runner import check_text
    from amp_lint.files.sources import SourceError, decode_source

    if name != "-" and stdin_excluded(run, name, force_exclude):
        text = raw.decode("utf-8", errors="surrogateescape")
        return StdinResult(Report(), text, text, excluded=True, fixed_bytes=raw)
    try:
        source = decode_source(raw)
    except SourceError as error:
        raise StdinError(f"{name}: {error.message}") from None
    config = run.config_for(run.resolver.for_path(Path(name).resolve() if name != "-" else Path.cwd()), name)
    notebook = None
    text = source.text
    if name.endswith(".ipynb"):  # as Ruff does: the name says how to read standard input
        from amp_lint.files.notebook import Notebook

        try:
            notebook = Notebook.parse(source.text)
        except SourceError as error:
            raise StdinError(f"{name}: {error.message}") from None
        text = notebook.source
    outcome = check_text(text, name, config)
    if notebook is not None:
        outcome.diagnostics = [notebook.in_cell(d) for d in outcome.diagnostics]
        outcome.errors = [notebook.error_in_cell(e) for e in outcome.errors]
        if outcome.fixed_text is not None:
            try:
                outcome.fixed_text = notebook.updated_json(outcome.fixed_text)
            except SourceError as error:
                outcome.errors.append(FileError(name, f"fixes not applied: {error.message}"))
                outcome.fixed_text, outcome.fixed = None, {}
    fixed_bytes = raw
    if outcome.fixed_text is not None:
        try:  # as a file is written: its own encoding and BOM, the bytes of the lines no fix touched
            fixed_bytes = source.encode(outcome.fixed_text)
        except SourceError as error:
            unfixed = check_text(text, name, dataclasses.replace(config, fix=False))
            if notebook is not None:
                unfixed.diagnostics = [notebook.in_cell(d) for d in unfixed.diagnostics]
                unfixed.errors = [notebook.error_in_cell(e) for e in unfixed.errors]
            unfixed.errors.append(FileError(name, f"fixes not applied: {error.message}"))
            outcome = unfixed
    report = Report(diagnostics=outcome.diagnostics, errors=outcome.errors, files_checked=1)
    if outcome.fixed:
        report.fixed[name] = outcome.fixed
    report.unsafe_fixable = outcome.unsafe_fixable
    report.sort()
    fixed = outcome.fixed_text if outcome.fixed_text is not None else source.text
    return StdinResult(report, source.text, fixed, fixed_bytes=fixed_bytes)


def unified_diff(before: str, after: str, name: str) -> str:
    from amp_lint.fixes.unified_diff import unified_diff as diff

    return diff(before, after, f"a/{name}", f"b/{name}")


# --- watch -----------------------------------------------------------------------------------------


def watched_files(paths: Sequence[str]) -> Dict[str, Tuple[int, int]]:
    """{file: (mtime, size)} of every Python file and configuration file under the paths (for --watch)."""
    from amp_lint.files.config import CONFIG_NAMES
    from amp_lint.files.sources import PYTHON_SUFFIXES

    stamps = {}
    for path in paths:
        for folder, names, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
            names[:] = [n for n in names if not n.startswith(".") and n not in ("__pycache__", "node_modules")]
            for name in files:
                if os.path.splitext(name)[1] in PYTHON_SUFFIXES or os.path.basename(name) in CONFIG_NAMES:
                    full = os.path.join(folder, name)
                    try:
                        info = os.stat(full)
                    except OSError:
                        continue
                    stamps[full] = (info.st_mtime_ns, info.st_size)
    return stamps


def watch(paths: Sequence[str], check_once: Callable[[], None], say: Callable[[str], None]) -> None:
    """Check, then check again each time a watched file changes; until interrupted (`--watch`)."""
    import time

    say("Starting amp-lint in watch mode...")
    while True:
        before = watched_files(paths)
        check_once()
        sys.stdout.flush()
        wait_for_change(paths, before, time.sleep)
        say("\nFile change detected...")


def wait_for_change(paths: Sequence[str], before: Dict[str, Tuple[int, int]], sleep: Callable[[float], None]) -> None:
    """Return once a watched file changed (polled twice a second: no dependency)."""
    while watched_files(paths) == before:
        sleep(0.5)
