"""Configuration files: finding them, reading them into `Settings`, and layering the command line on top.

A folder's configuration is the first of `.amp-lint.toml`, `amp-lint.toml` and a `pyproject.toml` with a
`[tool.amp-lint]` table; a file uses the configuration of the closest folder above it that has one.
In `amp-lint.toml` the keys are top-level; in `pyproject.toml` they sit under `[tool.amp-lint]`.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from amp_lint.files.settings import OUTPUT_FORMATS, Settings, UnknownRuleError, expand_codes
from amp_lint.files.sources import SourceError, read_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

CONFIG_NAMES = (".amp-lint.toml", "amp-lint.toml", "pyproject.toml")
AMP_DTYPES = ("float16", "bfloat16")
# A device type as `torch.autocast(device_type=...)` takes it (`cuda`, `cpu`, `xpu`, `mps`, `hpu`, a
# backend's own name): an identifier. The conversion writes it into the fixed code, so nothing else passes.
_DEVICE_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONFIG_BYTES = 4 * 1024 * 1024  # a configuration file bigger than this is not one


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message is one line naming the file and the key."""


# --- discovery ---------------------------------------------------------------------------------


def find_config(path: Path) -> Optional[Path]:
    """The configuration file that applies to `path` (a file or a folder), or None."""
    absolute = os.path.abspath(path)
    return _config_above(absolute if os.path.isdir(absolute) else os.path.dirname(absolute))


@functools.lru_cache(maxsize=None)
def _config_above(folder: str) -> Optional[Path]:
    # Cached per folder (as a string: a run asks for every file, and pathlib objects cost more than
    # the answer); sibling files share every answer.
    found = _config_in(Path(folder))
    parent = os.path.dirname(folder)
    if found is None and parent != folder:
        return _config_above(parent)
    return found


def _config_in(folder: Path) -> Optional[Path]:
    for name in CONFIG_NAMES:
        candidate = folder / name
        if candidate.is_file() and (name != "pyproject.toml" or _has_amp_lint_table(candidate)):
            return candidate
    return None


def _has_amp_lint_table(pyproject: Path) -> bool:
    try:
        content = read_bytes(str(pyproject), _CONFIG_BYTES)
    except SourceError:
        return False
    if b"amp-lint" not in content:  # skip parsing the many pyproject.toml files that cannot match
        return False
    try:
        data = tomllib.loads(content.decode("utf-8", errors="replace"))
    except (tomllib.TOMLDecodeError, RecursionError):
        return True  # let load_config report the error instead of silently using another file
    tool = data.get("tool")
    return isinstance(tool, dict) and "amp-lint" in tool


# --- reading -----------------------------------------------------------------------------------


def load_config(path: Path, all_codes: Iterable[str]) -> Settings:
    """The settings in the configuration file `path`, on top of the defaults."""
    table, where = _read_table(path)
    all_codes = list(all_codes)
    changes: Dict[str, Any] = {}
    for key, value in table.items():
        if key not in _KEYS:
            raise ConfigError(f"{path}: unknown key {key!r}{where}{_suggestion(key)}")
        field_name, convert = _KEYS[key]
        changes[field_name] = convert(value, _Context(path, key, all_codes))
    return Settings().with_changes(**changes, root=str(path.parent), source=str(path))


def _read_table(path: Path) -> Tuple[dict, str]:
    """The amp-lint settings table of the file, and how messages name it (" in [tool.amp-lint]" or "")."""
    try:
        # Not `read_text`: `--config` naming a FIFO or a device must fail at once, not hang.
        data = tomllib.loads(read_bytes(str(path), _CONFIG_BYTES).decode("utf-8"))
    except SourceError as error:
        raise ConfigError(f"{path}: cannot read: {error.message}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text: {error.reason}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from error
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    if path.name != "pyproject.toml":
        return data, ""
    tool = data.get("tool", {})
    table = tool.get("amp-lint", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: 'tool.amp-lint' must be a table, got {_type_name(table)}")
    return table, " in [tool.amp-lint]"


def _suggestion(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(_KEYS), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """Where a value comes from, for error messages, and the rule codes it may name."""

    path: Path
    key: str
    all_codes: List[str]

    def error(self, expected: str, value: Any) -> ConfigError:
        return ConfigError(f"{self.path}: {self.key!r} must be {expected}, got {_type_name(value)}")


def _type_name(value: Any) -> str:
    """The TOML name of a value's type."""
    for python_type, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string")):
        if isinstance(value, python_type):
            return name
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return "date or time"


def _strings(value: Any, context: _Context) -> Tuple[str, ...]:
    if not isinstance(value, list):
        raise context.error("a list of strings", value)
    for item in value:
        if not isinstance(item, str):
            raise context.error("a list of strings", item)
    return tuple(value)


def _codes(value: Any, context: _Context, where: str = "") -> Tuple[str, ...]:
    codes = _strings(value, context)
    for code in codes:
        try:
            expand_codes([code], context.all_codes)
        except UnknownRuleError:
            raise ConfigError(f"{context.path}: unknown rule code {code!r} in {context.key!r}{where}") from None
    return codes


def _per_file_ignores(value: Any, context: _Context) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise context.error("a table of glob = [codes]", value)
    return tuple((glob, _codes(codes, context, where=f" for {glob!r}")) for glob, codes in value.items())


def _boolean(value: Any, context: _Context) -> bool:
    if not isinstance(value, bool):
        raise context.error("true or false", value)
    return value


def is_device_type(value: str) -> bool:
    """Is `value` a device type (an identifier such as `cuda` or `xpu`) that may go into fixed code?"""
    return bool(_DEVICE_TYPE.match(value))


def _device_type(value: Any, context: _Context) -> str:
    if not isinstance(value, str) or not value:
        raise context.error("a non-empty string", value)
    if not is_device_type(value):
        raise ConfigError(f"{context.path}: {context.key!r} must be a device type such as 'cuda' or 'cpu' (an identifier), got {value!r}")
    return value


def _one_of(choices: Tuple[str, ...]) -> Callable[[Any, _Context], str]:
    def convert(value: Any, context: _Context) -> str:
        if value not in choices:
            shown = repr(value) if isinstance(value, str) else _type_name(value)
            raise ConfigError(f"{context.path}: {context.key!r} must be one of {', '.join(choices)}, got {shown}")
        return value

    return convert


# TOML key -> (Settings field, converter that validates the value).
_KEYS: Dict[str, Tuple[str, Callable[[Any, _Context], Any]]] = {
    "select": ("select", _codes),
    "ignore": ("ignore", _codes),
    "extend-select": ("extend_select", _codes),
    "per-file-ignores": ("per_file_ignores", _per_file_ignores),
    "exclude": ("exclude", _strings),
    "extend-exclude": ("extend_exclude", _strings),
    "respect-gitignore": ("respect_gitignore", _boolean),
    "force-exclude": ("force_exclude", _boolean),
    "fix": ("fix", _boolean),
    "unsafe-fixes": ("unsafe_fixes", _boolean),
    "output-format": ("output_format", _one_of(OUTPUT_FORMATS)),
    "amp-dtype": ("amp_dtype", _one_of(AMP_DTYPES)),
    "amp-device": ("amp_device", _device_type),
}


# --- resolving ---------------------------------------------------------------------------------

# Command-line options that add to the configuration's lists rather than replace them.
_ADDITIVE_FIELDS = ("extend_select", "ignore", "extend_exclude")


def apply_cli_overrides(settings: Settings, overrides: Dict[str, Any]) -> Settings:
    """`settings` with the options given on the command line (Settings field names) on top.

    As in Ruff, `--select` starts the rule selection afresh (the configuration's `extend-select` and
    `ignore` no longer apply), while `--extend-select`, `--ignore` and `--extend-exclude` add to it.
    """
    changes = dict(overrides)
    if "select" in changes:
        settings = settings.with_changes(extend_select=(), ignore=())
    for name in _ADDITIVE_FIELDS:
        if name in changes:
            changes[name] = getattr(settings, name) + tuple(changes[name])
    return settings.with_changes(**changes)


class SettingsResolver:
    """The settings for each checked path: its configuration file (or --config), then the command line."""

    def __init__(
        self,
        cli_overrides: Dict[str, Any],
        *,
        config_path: Optional[Path] = None,
        isolated: bool = False,
        all_codes: Iterable[str],
    ) -> None:
        if isolated and config_path is not None:
            raise ConfigError("--config and --isolated cannot be used together")
        self._cli_overrides = dict(cli_overrides)
        self._config_path = config_path
        self._isolated = isolated
        self._all_codes = list(all_codes)
        self._settings_by_config: Dict[Optional[Path], Settings] = {}

    def for_path(self, path: Path) -> Settings:
        return self._settings_from(self._config_for(path))

    def root_settings(self, cwd: Path) -> Settings:
        """The settings for run-wide choices (output format, fix mode): those of the working folder."""
        return self.for_path(cwd)

    def _config_for(self, path: Path) -> Optional[Path]:
        if self._isolated:
            return None
        if self._config_path is not None:
            return self._config_path
        return find_config(path)

    def _settings_from(self, config: Optional[Path]) -> Settings:
        if config not in self._settings_by_config:
            base = load_config(config, self._all_codes) if config is not None else Settings()
            self._settings_by_config[config] = apply_cli_overrides(base, self._cli_overrides)
        return self._settings_by_config[config]


# --- --show-settings ---------------------------------------------------------------------------


def describe(settings: Settings) -> str:
    """The resolved settings as TOML, headed by the file they came from."""
    origin = f"Settings from {settings.source}" if settings.source else "Default settings (no configuration file)"
    lines = [f"# {origin}"]
    if settings.root:
        lines.append(f"# Relative globs are resolved against {settings.root}")
    for name in (f.name for f in fields(Settings)):
        if name in ("source", "root", "per_file_ignores"):
            continue
        key = name.replace("_", "-")
        value = getattr(settings, name)
        lines.append(f"# {key} is not set" if value is None else f"{key} = {_toml_value(value)}")
    lines.append("")
    lines.append("[per-file-ignores]")
    lines += [f"{_toml_value(glob)} = {_toml_value(codes)}" for glob, codes in settings.per_file_ignores]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    # A JSON string is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=False)
