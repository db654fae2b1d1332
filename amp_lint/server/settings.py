"""The settings each document is checked with: its folder's configuration file, then the editor's overrides.

The configuration is found as on the command line (`amp_lint.files.config`: `.amp-lint.toml`, `amp-lint.toml`
or a `pyproject.toml` with `[tool.amp-lint]`, the closest folder above the file), and the editor's
initialization options (`select`, `ignore`, `extendSelect`, `unsafeFixes`) sit on top like command-line
options. Everything is read once and kept until `reload`, which the server calls when a watched
configuration file changes: nothing stale survives an edit of `pyproject.toml`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from amp_lint import rules as registry
from amp_lint.engine.runner import CheckConfig
from amp_lint.files import config as config_files
from amp_lint.files.config import ConfigError, SettingsResolver
from amp_lint.files.sources import excluded_by_settings
from amp_lint.files.settings import RuleSelection, Settings, UnknownRuleError, expand_codes

# The names a file watcher looks for (the configuration files that `find_config` reads).
WATCHED_NAMES = config_files.CONFIG_NAMES

# Editor option -> Settings field. Ruff's spellings (camelCase) and the TOML ones (kebab-case) both work.
_OPTIONS = {
    "select": "select",
    "ignore": "ignore",
    "extendSelect": "extend_select",
    "extend-select": "extend_select",
    "unsafeFixes": "unsafe_fixes",
    "unsafe-fixes": "unsafe_fixes",
}


@dataclass(frozen=True)
class DocumentSettings:
    """What checking one document needs: the check configuration, whether unsafe fixes may be offered,
    and the configuration error to show, if any."""

    config: CheckConfig
    unsafe_fixes: bool
    error: Optional[str] = None
    excluded: bool = False  # by the project's `exclude` / `extend-exclude`: no diagnostics

    @property
    def with_edits(self) -> CheckConfig:
        """The configuration that also computes each fix's text edits (for code actions only: it costs
        a fifth more than the diagnostics alone, which are what every keystroke waits for)."""
        from dataclasses import replace

        return replace(self.config, with_edits=True)

    @property
    def fix_all(self) -> CheckConfig:
        """The configuration of `source.fixAll`: safe fixes only, whatever the settings say."""
        from dataclasses import replace

        return replace(self.config, fix=True, unsafe_fixes=False, with_edits=False)


def parse_options(options: Any) -> Tuple[Dict[str, Any], List[str]]:
    """Overrides (Settings fields) from initialization options, and a message per option that is refused.

    The options may sit at the top level or under `settings` (as VS Code's generic clients send them).
    """
    if not isinstance(options, dict):
        return {}, ([] if options is None else [f"initialization options must be an object, got {type(options).__name__}"])
    if isinstance(options.get("settings"), dict):
        options = options["settings"]
    overrides: Dict[str, Any] = {}
    problems: List[str] = []
    all_codes = registry.all_codes()
    for key, value in options.items():
        field = _OPTIONS.get(key)
        if field is None:
            continue  # other clients' keys (debounce, logLevel, ...) are the server's or not ours
        if field == "unsafe_fixes":
            if not isinstance(value, bool):
                problems.append(f"option {key!r} must be true or false")
                continue
            overrides[field] = value
            continue
        if isinstance(value, str):
            value = [code.strip() for code in value.split(",") if code.strip()]
        if not isinstance(value, list) or not all(isinstance(code, str) for code in value):
            problems.append(f"option {key!r} must be a list of rule codes")
            continue
        try:
            expand_codes(value, all_codes)
        except UnknownRuleError as error:
            problems.append(f"option {key!r}: {error}")
            continue
        overrides[field] = tuple(value)
    return overrides, problems


def debounce_option(options: Any) -> Optional[float]:
    """The `debounce` initialization option (milliseconds, like editors' own settings) in seconds."""
    if not isinstance(options, dict):
        return None
    value = options.get("debounce")
    if value is None and isinstance(options.get("settings"), dict):
        value = options["settings"].get("debounce")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return value / 1000
    return None


class ServerSettings:
    """Settings per document path, cached per configuration file until `reload`."""

    def __init__(self, overrides: Optional[Dict[str, Any]] = None) -> None:
        self.overrides: Dict[str, Any] = dict(overrides or {})
        self.reload()

    def reload(self) -> None:
        """Forget every configuration read so far (a file changed, or the overrides did)."""
        # `find_config` caches its answer per folder for the whole run; a server must ask again.
        config_files._config_above.cache_clear()
        self._resolver = SettingsResolver(self.overrides, all_codes=registry.all_codes())
        self._fallback = SettingsResolver(self.overrides, isolated=True, all_codes=registry.all_codes())
        self._by_path: Dict[str, DocumentSettings] = {}

    def set_overrides(self, overrides: Dict[str, Any]) -> None:
        self.overrides = dict(overrides)
        self.reload()

    def for_path(self, path: str) -> DocumentSettings:
        found = self._by_path.get(path)
        if found is None:
            found = self._by_path[path] = self._resolve(path)
        return found

    def _resolve(self, path: str) -> DocumentSettings:
        error = None
        resolver = self._resolver
        try:
            settings = self._resolver.for_path(Path(path))
            enabled = _enabled(settings, path)
        except (ConfigError, UnknownRuleError) as problem:
            # A broken configuration file: say so, and check with the defaults meanwhile (as Ruff does).
            error = str(problem)
            resolver = self._fallback
            settings = self._fallback.for_path(Path(path))
            enabled = _enabled(settings, path)
        try:
            excluded = excluded_by_settings(Path(os.path.abspath(path)), resolver.for_path)
        except (ConfigError, UnknownRuleError, OSError):
            excluded = False
        config = CheckConfig(
            enabled=enabled,
            fix=False,
            unsafe_fixes=bool(settings.unsafe_fixes),
            with_edits=False,
            write=False,
            rule_options=(("amp_dtype", settings.amp_dtype), ("amp_device", settings.amp_device)),
        )
        return DocumentSettings(config, bool(settings.unsafe_fixes), error, excluded)


def _enabled(settings: Settings, path: str):
    all_codes = registry.all_codes()
    selection = RuleSelection.from_settings(settings, all_codes, registry.default_codes())
    return selection.for_path(os.path.abspath(path), settings, all_codes)
