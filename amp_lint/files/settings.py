"""Resolved settings for a run, and which rules apply to which file.

Configuration files (`[tool.amp-lint]`, `amp-lint.toml`) are read by `amp_lint.files.config`, which produces
`Settings`; the command line overrides them. Everything downstream reads `Settings` only.
"""

from __future__ import annotations

import os
from functools import lru_cache
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from amp_lint.files.globs import compile_globs

# The report formats `--output-format` and `output-format` accept (amp_lint.reports renders them).
OUTPUT_FORMATS = ("full", "concise", "grouped", "json", "json-lines", "github", "sarif", "junit", "gitlab", "pylint")

DEFAULT_EXCLUDES: Tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "build",
    "dist",
    "__pycache__",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".amp_lint_cache",
    "site-packages",
    "__pypackages__",
    ".ipynb_checkpoints",
)


class UnknownRuleError(ValueError):
    """A rule code or prefix that matches no rule."""


@dataclass(frozen=True)
class Settings:
    select: Tuple[str, ...] = ()  # empty: the rules on by default
    ignore: Tuple[str, ...] = ()
    extend_select: Tuple[str, ...] = ()
    extend_ignore: Tuple[str, ...] = ()  # Ruff's older spelling: adds to `ignore`
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (glob, codes)
    extend_per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # on top of per_file_ignores
    exclude: Tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: Tuple[str, ...] = ()
    respect_gitignore: bool = True
    force_exclude: bool = False
    fix: bool = False
    unsafe_fixes: bool = False
    show_assumed: bool = False  # also report findings that rest on an assumption (medium confidence)
    # Ruff's preview mode: rules and fixes marked preview (new, not yet proved on real code) run only with it.
    preview: bool = False
    fixable: Tuple[str, ...] = ("ALL",)  # codes or prefixes whose fixes may be applied (Ruff's `fixable`)
    unfixable: Tuple[str, ...] = ()  # codes or prefixes reported without a fix (Ruff's `unfixable`)
    extend_fixable: Tuple[str, ...] = ()  # added to `fixable` (Ruff's `extend-fixable`)
    show_fixes: bool = False  # list the fixes applied (Ruff's `show-fixes`)
    output_format: str = "full"
    fail_on: str = "info"  # the lowest severity that fails the run: info (every finding), warning, error
    amp_dtype: str = "float16"  # AMP100 conversion: float16 (autocast + GradScaler) or bfloat16
    amp_device: Optional[str] = None  # AMP100 conversion: None = infer from the code, fallback "cuda"
    # The oldest torch the code must run on ("2.1"): fixes and deprecation rules only suggest APIs it has.
    # None: the project states no floor, so every torch.amp API counts as available.
    target_torch: Optional[str] = None
    # The same for the other packages whose deprecations the rules know: ((package, "2.9"), ...), from the
    # project's own requirements (`transformer-engine>=2.9`, `accelerate>=1.4`).
    target_packages: Tuple[Tuple[str, str], ...] = ()
    # Each layer's own rule selection, in the order the layers apply (a configuration file, the file that
    # extends it, `--config KEY=VALUE`, the options): (select or None, extend-select, ignore + extend-ignore).
    # Ruff resolves select/ignore by specificity inside a layer, and a later layer works on the result of the
    # earlier ones (its `select` starts afresh). The fields above are the layers merged, for display.
    # Not compared: two settings with the same merged fields are equal (the cache key holds the layers).
    selection_layers: Tuple[Tuple[Optional[Tuple[str, ...]], Tuple[str, ...], Tuple[str, ...]], ...] = field(
        default=(), compare=False
    )
    # Where the settings came from (a config file path), for --show-settings and error messages.
    source: Optional[str] = None
    # The folder that relative globs (exclude, per-file-ignores) are resolved against.
    root: Optional[str] = None

    def with_changes(self, **changes) -> "Settings":
        return replace(self, **changes)

    def cache_key(self) -> str:
        """The parts of the settings that change what a check reports (for the result cache)."""
        return repr(
            (
                self.select,
                self.ignore,
                self.extend_select,
                self.extend_ignore,
                self.per_file_ignores,
                self.extend_per_file_ignores,
                self.amp_dtype,
                self.amp_device,
                self.show_assumed,
                self.target_torch,
                self.target_packages,
                self.preview,
                self.selection_layers,
            )
        )

    def own_selection_layer(self) -> Tuple[Optional[Tuple[str, ...]], Tuple[str, ...], Tuple[str, ...]]:
        """These settings' select fields as one layer (settings made without layers, as in tests)."""
        return (self.select or None, self.extend_select, self.ignore + self.extend_ignore)

    def assumed_shown_for(self, all_codes: Iterable[str]) -> FrozenSet[str]:
        """The rules whose assumed findings are reported without `show-assumed`: those selected by their own
        code or by `ALL` (a user who asks for a rule by name wants its findings); a prefix or the defaults
        keep only proved findings."""
        codes = frozenset(all_codes)
        named = set()
        for pattern in self.select + self.extend_select:
            pattern = pattern.strip().upper()
            if pattern == "ALL":
                named |= codes
            elif pattern in codes:
                named.add(pattern)
        return frozenset(named - expand_codes(self.ignore, codes))


def expand_codes(patterns: Iterable[str], all_codes: Iterable[str]) -> FrozenSet[str]:
    """`AMP0` -> every code starting with AMP0; `ALL` -> every code. Unknown patterns raise."""
    codes = sorted(all_codes)
    selected = set()
    for pattern in patterns:
        pattern = pattern.strip().upper()
        if not pattern:
            continue
        if pattern == "ALL":
            selected.update(codes)
            continue
        matched = [c for c in codes if c.startswith(pattern)]
        if not matched:
            raise UnknownRuleError(f"unknown rule code or prefix: {pattern!r}")
        selected.update(matched)
    return frozenset(selected)


@dataclass(frozen=True)
class RuleSelection:
    """Which rule codes are on, before per-file ignores."""

    enabled: FrozenSet[str]

    @classmethod
    def from_settings(cls, settings: Settings, all_codes: Iterable[str], default_codes: Iterable[str]) -> "RuleSelection":
        """As Ruff resolves them: `select` (or the default rules) is the start; then the selectors of
        `select`, `extend-select` and `ignore` apply from the least specific to the most (`ALL`, `AMP`,
        `AMP0`, ... `AMP070`), an ignore after a select of the same specificity. So `select = ["AMP070"]`
        with `ignore = ["AMP0"]` keeps AMP070 on, as Ruff keeps F401 for `--select F401 --ignore F`."""
        all_codes = list(all_codes)
        enabled = frozenset(default_codes)
        for select, extend_select, ignore in settings.selection_layers or (settings.own_selection_layer(),):
            start = frozenset() if select else enabled
            enabled = _by_specificity(start, (select or ()) + extend_select, ignore, all_codes)
        return cls(enabled=enabled)

    @staticmethod
    def unfixable(settings: Settings, all_codes: Iterable[str]) -> FrozenSet[str]:
        """The codes whose fixes are off: those `fixable` and `extend-fixable` leave out or `unfixable`
        names, the more specific selector winning (as Ruff: `unfixable = ["AMP0"]` with `extend-fixable =
        ["AMP070"]` leaves AMP070's fix on)."""
        all_codes = list(all_codes)
        fixable = _by_specificity(frozenset(), settings.fixable + settings.extend_fixable, settings.unfixable, all_codes)
        return frozenset(all_codes) - fixable

    def for_path(self, path: str, settings: Settings, all_codes: Iterable[str]) -> FrozenSet[str]:
        pairs = settings.per_file_ignores + settings.extend_per_file_ignores
        if not pairs:
            return self.enabled
        root = os.path.abspath(settings.root) if settings.root else os.getcwd()
        return self.enabled - _per_file_ignores(pairs, root).ignored(path, all_codes)


def _by_specificity(start: FrozenSet[str], on: Iterable[str], off: Iterable[str], all_codes: List[str]) -> FrozenSet[str]:
    """`start` with the codes of the `on` selectors added and those of the `off` ones removed, from the least
    specific selector to the most, `off` after `on` at the same specificity (Ruff's order)."""
    result = set(start)
    selectors = [(pattern, True) for pattern in on] + [(pattern, False) for pattern in off]
    for pattern, turn_on in sorted(selectors, key=lambda item: (_specificity(item[0]), not item[1])):
        codes = expand_codes([pattern], all_codes)
        result = result | codes if turn_on else result - codes
    return frozenset(result)


def _specificity(pattern: str) -> int:
    """How specific a rule selector is: `ALL` least, then the longer the prefix the more specific."""
    pattern = pattern.strip().upper()
    return 0 if pattern == "ALL" else len(pattern)


# --- globs, as Ruff matches them ------------------------------------------------------------------
#
# Ruff's `exclude` and `per-file-ignores` globs are globset globs, not gitignore lines: `*` and `?` cross
# `/`, `**/` is zero or more folders, `[...]` and `{a,b}` work. A relative pattern is made absolute against
# the folder of the configuration file that holds it (the working folder for the command line and for
# the defaults) and matched against a file's absolute path; a pattern with no `/` also matches the bare
# name of a file or folder anywhere below. So `legacy/` is the top-level folder `legacy`, `tests` is every
# folder named tests, `**/tests` too, `tests/*.py` everything below the top-level `tests`. Observed with
# Ruff 0.17.6 (tests/test_daily_use.py runs Ruff on the same trees).


def absolute_pattern(pattern: str, root: str) -> str:
    """`pattern` made absolute against `root`, normalized as Ruff does (`./`, `..` and a final `/` go)."""
    joined = os.path.join(root, pattern).replace(os.sep, "/")
    parts: List[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


@lru_cache(maxsize=256)
def _exclude_matchers(patterns: Tuple[str, ...], root: str) -> Tuple[Callable[[str], bool], Callable[[str], bool]]:
    """(absolute-path test, bare-name test) for a set of exclude patterns; linear in the path (`globs`)."""
    return (
        compile_globs([absolute_pattern(p, root) for p in patterns]),
        compile_globs([p for p in patterns if "/" not in p]),
    )


def is_excluded(absolute_path: str, patterns: Tuple[str, ...], root: str) -> bool:
    """Does an exclude pattern match this file or folder (an absolute, normalized path)? Ruff's semantics."""
    return exclusion_test(patterns, root)(absolute_path)


def exclusion_test(patterns: Tuple[str, ...], root: str) -> Callable[[str], bool]:
    """`is_excluded` for one set of patterns, compiled once: a walk asks it of every entry."""
    by_path, by_name = _exclude_matchers(tuple(patterns), root)
    separator = os.sep

    def excluded(absolute_path: str) -> bool:
        path = absolute_path.replace(separator, "/") if separator != "/" else absolute_path
        name = path.rsplit("/", 1)[-1]
        # Ruff also matches a pattern without `/` against the whole absolute path, so that `*test*` excludes
        # every file of a project that lives in /tmp/tests; we do not (a bare-name glob names a bare name).
        return by_path(path) or by_name(name)

    return excluded


class PerFileIgnores:
    """The per-file-ignores of one settings object, compiled once (`_per_file_ignores`): for each rule
    selector, one matcher of every pattern that names it, so a file costs one test per selector however
    many patterns there are (issue 45: past 1,024 patterns, a cache of one matcher per pattern compiled
    each again for every file). A negated pattern applies to the files it does not match: those are kept
    one matcher each (any one of them not matching applies the selector)."""

    def __init__(self, pairs: Tuple[Tuple[str, Tuple[str, ...]], ...], root: str) -> None:
        plain: Dict[str, List[str]] = {}
        negated: Dict[str, List[str]] = {}
        for pattern, codes in pairs:
            body, group = (pattern[1:], negated) if pattern.startswith("!") else (pattern, plain)
            for code in codes:
                group.setdefault(code, []).append(body)
                plain.setdefault(code, [])
        self._selectors = [
            (code, _path_or_name_test(plain[code], root), [_path_or_name_test([p], root) for p in negated.get(code, ())])
            for code in plain
        ]

    def ignored(self, path: str, all_codes: Iterable[str]) -> FrozenSet[str]:
        """The codes the patterns that apply to `path` ignore (an unknown code raises, when it applies)."""
        absolute = os.path.abspath(path).replace(os.sep, "/")
        name = absolute.rsplit("/", 1)[-1]
        applying = [
            code
            for code, matches, negated in self._selectors
            if matches(absolute, name) or any(not test(absolute, name) for test in negated)
        ]
        return expand_codes(applying, all_codes) if applying else frozenset()


def _path_or_name_test(patterns: List[str], root: str) -> Callable[[str, str], bool]:
    """As Ruff matches a per-file-ignores pattern: made absolute against `root`, it matches the absolute
    path, or it matches the file name."""
    if not patterns:
        return lambda absolute, name: False
    by_path = compile_globs([absolute_pattern(p, root) for p in patterns])
    by_name = compile_globs(patterns)
    return lambda absolute, name: by_name(name) or by_path(absolute)


@lru_cache(maxsize=64)
def _per_file_ignores(pairs: Tuple[Tuple[str, Tuple[str, ...]], ...], root: str) -> PerFileIgnores:
    return PerFileIgnores(pairs, root)


def path_matches(path: str, pattern: str, root: Optional[str] = None) -> bool:
    """Does a per-file-ignores pattern apply to `path`? As in Ruff: the pattern (made absolute against
    `root`, else the working folder) matches the absolute path, or the pattern matches the file name;
    `!pattern` applies to the files it does not match."""
    negated = pattern.startswith("!")
    test = _path_or_name_test([pattern[1:] if negated else pattern], os.path.abspath(root) if root else os.getcwd())
    absolute = os.path.abspath(path).replace(os.sep, "/")
    return test(absolute, absolute.rsplit("/", 1)[-1]) != negated


@dataclass
class RunOptions:
    """Command-line options that are not settings: what to do with the findings."""

    diff: bool = False
    show_fixes: bool = False
    exit_zero: bool = False
    exit_non_zero_on_fix: bool = False
    statistics: bool = False
    quiet: bool = False
    jobs: Optional[int] = None
    no_cache: bool = False
    cache_dir: Optional[str] = None
    extra: Dict[str, object] = field(default_factory=dict)
