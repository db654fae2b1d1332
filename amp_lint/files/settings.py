"""Resolved settings for a run, and which rules apply to which file.

Configuration files (`[tool.amp-lint]`, `amp-lint.toml`) are read by `amp_lint.files.config`, which produces
`Settings`; the command line overrides them. Everything downstream reads `Settings` only.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

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
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (glob, codes)
    exclude: Tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: Tuple[str, ...] = ()
    respect_gitignore: bool = True
    force_exclude: bool = False
    fix: bool = False
    unsafe_fixes: bool = False
    show_assumed: bool = False  # also report findings that rest on an assumption (medium confidence)
    output_format: str = "full"
    amp_dtype: str = "float16"  # AMP100 conversion: float16 (autocast + GradScaler) or bfloat16
    amp_device: Optional[str] = None  # AMP100 conversion: None = infer from the code, fallback "cuda"
    # The oldest torch the code must run on ("2.1"): fixes and deprecation rules only suggest APIs it has.
    # None: the project states no floor, so every torch.amp API counts as available.
    target_torch: Optional[str] = None
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
                self.per_file_ignores,
                self.amp_dtype,
                self.amp_device,
                self.show_assumed,
                self.target_torch,
            )
        )


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
        all_codes = list(all_codes)
        base = expand_codes(settings.select, all_codes) if settings.select else frozenset(default_codes)
        base |= expand_codes(settings.extend_select, all_codes)
        base -= expand_codes(settings.ignore, all_codes)
        return cls(enabled=frozenset(base))

    def for_path(self, path: str, settings: Settings, all_codes: Iterable[str]) -> FrozenSet[str]:
        ignored = set()
        for pattern, codes in settings.per_file_ignores:
            if path_matches(path, pattern, settings.root):
                ignored |= expand_codes(codes, all_codes)
        return self.enabled - ignored


@lru_cache(maxsize=64)
def _globs_regex(patterns: Tuple[str, ...]) -> "re.Pattern":
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or r"(?!)")


def matches_any_glob(relative: str, name: str, patterns: Tuple[str, ...]) -> bool:
    """Does any glob match the relative path or the bare name? One compiled regex per pattern set
    (a walk over thousands of files asks this for every entry)."""
    regex = _globs_regex(tuple(patterns))
    return regex.match(relative) is not None or regex.match(name) is not None


def path_matches(path: str, pattern: str, root: Optional[str] = None) -> bool:
    """Glob match on the path relative to `root`, or on its file name, like Ruff's per-file-ignores."""
    pure = PurePath(path)
    candidates: List[str] = [pure.as_posix(), pure.name]
    if root is not None:
        try:
            candidates.append(pure.relative_to(root).as_posix())
        except ValueError:
            pass
    return any(fnmatch.fnmatch(candidate, pattern) for candidate in candidates)


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
