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
from amp_lint.files.torch_version import WITHOUT_CONFIG, read_only_toml, toml_parser


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
    found = _config_in(folder)
    parent = os.path.dirname(folder)
    if found is None and parent != folder:
        return _config_above(parent)
    return found


def note_no_config_files(folder: str) -> None:
    """The walk index knows that `folder` (absolute) holds none of CONFIG_NAMES (its listing is unchanged since
    one that held none): its configuration and project root are asked of its parents without a `stat`."""
    WITHOUT_CONFIG.add(folder)


def _config_in(folder: str) -> Optional[Path]:
    if folder in WITHOUT_CONFIG:
        return None
    for name in CONFIG_NAMES:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and (name != "pyproject.toml" or _has_amp_lint_table(Path(candidate))):
            return Path(candidate)
    return None


def _has_amp_lint_table(pyproject: Path) -> bool:
    try:
        content = read_bytes(str(pyproject), _CONFIG_BYTES)
    except SourceError:
        return False
    if b"amp-lint" not in content and b"amp_lint" not in content:  # skip the many pyproject.toml files that cannot match
        return False
    tomllib = toml_parser()
    try:
        data = read_only_toml(content.decode("utf-8-sig", errors="replace"))  # a BOM is read, as Ruff reads it
    except (tomllib.TOMLDecodeError, RecursionError):
        return True  # let load_config report the error instead of silently using another file
    tool = data.get("tool")
    if isinstance(tool, dict) and "amp-lint" not in tool:
        misspelled = [name for name in tool if name.replace("_", "-").lower() in ("amp-lint", "amplint")]
        if misspelled:
            _warn_once(f"{pyproject}: [tool.{misspelled[0]}] is not read; the table is named [tool.amp-lint]")
    return isinstance(tool, dict) and "amp-lint" in tool


_WARNED: set = set()


def _warn_once(message: str) -> None:
    """A configuration that is silently not used is worse than a message on stderr (once per run)."""
    if message not in _WARNED:
        _WARNED.add(message)
        sys.stderr.write(f"amp-lint: warning: {message}\n")


# --- reading -----------------------------------------------------------------------------------


def load_config(path: Path, all_codes: Iterable[str], _extending: Tuple[str, ...] = ()) -> Settings:
    """The settings in the configuration file `path`, on top of the defaults (or of the file it extends).

    `extend = "../pyproject.toml"` (relative to this file; `~` and `$VARS` expanded) reads that file first
    and merges this one on top, as Ruff does: a key given here replaces the base's, `select` starts the
    rule selection afresh, and `extend-select`, `ignore`, `extend-exclude` and `extend-per-file-ignores` add
    to the base's. Globs are relative to the folder of the file that holds them.
    """
    table, where = _read_table(path)
    all_codes = list(all_codes)
    changes: Dict[str, Any] = {}
    base = Settings()
    for key, value in _with_lint_section(table, path, where):
        if key == "extend":
            base = _extended(path, value, all_codes, _extending)
            continue
        if key not in _KEYS:
            raise ConfigError(f"{path}: unknown key {key!r}{where}{_suggestion(key)}")
        field_name, convert = _KEYS[key]
        changes[field_name] = convert(value, _Context(path, key, all_codes))
    settings = merge_settings(base, changes).with_changes(root=str(path.parent), source=str(path))
    return with_project_torch(settings, str(path.parent))


def _with_lint_section(table: dict, path: Path, where: str) -> List[Tuple[str, Any]]:
    """The table's keys, those of its `lint` section (Ruff's `[tool.ruff.lint]`) after the others, so that
    they win: `[tool.amp-lint.lint]` (or `[lint]` in amp-lint.toml) holds the same keys as the top level."""
    lint = table.get("lint", {})
    if not isinstance(lint, dict):
        raise ConfigError(f"{path}: 'lint' must be a table{where}, got {_type_name(lint)}")
    if "extend" in lint:
        raise ConfigError(f"{path}: 'extend' belongs at the top level{where}, not in 'lint'")
    return [(k, v) for k, v in table.items() if k != "lint"] + list(lint.items())


def _extended(path: Path, value: Any, all_codes: List[str], extending: Tuple[str, ...]) -> Settings:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: 'extend' must be a path to a configuration file, got {_type_name(value)}")
    base_path = Path(os.path.abspath(path.parent / os.path.expanduser(os.path.expandvars(value))))
    # Compared as the files they are (realpath): through a symlinked folder that leads back, `abspath` would
    # make a new name at each turn, and the cycle would show as a path 40 folders deep (ELOOP).
    chain = extending + (os.path.realpath(path),)
    if os.path.realpath(base_path) in chain:
        raise ConfigError(f"{path}: 'extend' makes a cycle: {' -> '.join(chain + (os.path.realpath(base_path),))}")
    if not base_path.is_file():
        raise ConfigError(f"{path}: 'extend' names {base_path}, which is not a file")
    return _anchored(load_config(base_path, all_codes, chain))


def _anchored(settings: Settings) -> Settings:
    """The base of an `extend` with its globs made absolute against its own folder, as Ruff resolves them:
    `gen/` in ../pyproject.toml is ../gen, whichever file extends it. A bare name matches names anyway."""
    root = settings.root or os.getcwd()

    def anchor(pattern: str) -> str:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if "/" in body and not os.path.isabs(body):
            body = os.path.join(root, body)
        return ("!" if negated else "") + body

    return settings.with_changes(
        exclude=tuple(anchor(p) for p in settings.exclude),
        extend_exclude=tuple(anchor(p) for p in settings.extend_exclude),
        per_file_ignores=tuple((anchor(p), codes) for p, codes in settings.per_file_ignores),
        extend_per_file_ignores=tuple((anchor(p), codes) for p, codes in settings.extend_per_file_ignores),
    )


def parse_inline_option(text: str, all_codes: Iterable[str]) -> Dict[str, Any]:
    """`--config 'select = ["AMP0"]'`: one TOML `KEY = VALUE` pair, checked like a configuration file's."""
    tomllib = toml_parser()
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"--config {text!r}: neither a configuration file nor a TOML KEY = VALUE pair ({error})") from None
    if "tool" in table and isinstance(table["tool"], dict) and "amp-lint" in table["tool"]:
        table = table["tool"]["amp-lint"]  # `tool.amp-lint.select = [...]`, copied from a pyproject.toml
    changes: Dict[str, Any] = {}
    for key, value in _with_lint_section(table, Path("--config"), ""):
        if key not in _KEYS:
            raise ConfigError(f"--config {text!r}: unknown key {key!r}{_suggestion(key)}")
        field_name, convert = _KEYS[key]
        changes[field_name] = convert(value, _Context(Path("--config"), key, list(all_codes)))
    return changes


def _read_table(path: Path) -> Tuple[dict, str]:
    """The amp-lint settings table of the file, and how messages name it (" in [tool.amp-lint]" or "")."""
    tomllib = toml_parser()
    try:
        # Not `read_text`: `--config` naming a FIFO or a device must fail at once, not hang.
        # "utf-8-sig": a file saved with a byte order mark is read, as Ruff reads it (TOML itself has no BOM).
        data = tomllib.loads(read_bytes(str(path), _CONFIG_BYTES).decode("utf-8-sig"))
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


def _torch_version(value: Any, context: _Context) -> str:
    from amp_lint.files.torch_version import is_version

    if not isinstance(value, str):
        raise context.error('a torch release such as "2.3"', value)
    if not is_version(value):
        raise ConfigError(f'{context.path}: {context.key!r} must be a torch release such as "2.3", got {value!r}')
    return value


def with_project_torch(settings: Settings, folder: Optional[str]) -> Settings:
    """`target-torch` from the project's own torch requirement in `folder`, unless the settings name one."""
    from amp_lint.files.torch_version import project_floor, project_package_floors

    if folder is None:
        return settings
    if not settings.target_packages:  # the same for transformer-engine and accelerate (AMP095)
        settings = settings.with_changes(target_packages=project_package_floors(folder))
    if settings.target_torch is not None:
        return settings
    found = project_floor(folder)
    return settings.with_changes(target_torch=found[0]) if found else settings


# TOML key -> (Settings field, converter that validates the value).
_KEYS: Dict[str, Tuple[str, Callable[[Any, _Context], Any]]] = {
    "select": ("select", _codes),
    "ignore": ("ignore", _codes),
    "extend-select": ("extend_select", _codes),
    "extend-ignore": ("extend_ignore", _codes),
    "per-file-ignores": ("per_file_ignores", _per_file_ignores),
    "extend-per-file-ignores": ("extend_per_file_ignores", _per_file_ignores),
    "exclude": ("exclude", _strings),
    "extend-exclude": ("extend_exclude", _strings),
    "respect-gitignore": ("respect_gitignore", _boolean),
    "force-exclude": ("force_exclude", _boolean),
    "fix": ("fix", _boolean),
    "unsafe-fixes": ("unsafe_fixes", _boolean),
    "show-assumed": ("show_assumed", _boolean),
    "preview": ("preview", _boolean),
    "fixable": ("fixable", _codes),
    "unfixable": ("unfixable", _codes),
    "extend-fixable": ("extend_fixable", _codes),
    "show-fixes": ("show_fixes", _boolean),
    "output-format": ("output_format", _one_of(OUTPUT_FORMATS)),
    "fail-on": ("fail_on", _one_of(("info", "warning", "error"))),
    "amp-dtype": ("amp_dtype", _one_of(AMP_DTYPES)),
    "amp-device": ("amp_device", _device_type),
    "target-torch": ("target_torch", _torch_version),
}


# --- resolving ---------------------------------------------------------------------------------

# Command-line options that add to the configuration's lists rather than replace them.
_ADDITIVE_FIELDS = ("extend_select", "ignore", "extend_ignore", "extend_exclude", "extend_per_file_ignores", "extend_fixable")


def merge_settings(settings: Settings, overrides: Dict[str, Any]) -> Settings:
    """`settings` with a layer of changes on top (an extending file, `--config KEY=VALUE`, the options)."""
    return apply_cli_overrides(settings, overrides)


def apply_cli_overrides(settings: Settings, overrides: Dict[str, Any]) -> Settings:
    """`settings` with the options given on the command line (Settings field names) on top.

    As in Ruff, `--select` starts the rule selection afresh (the configuration's `extend-select` and
    `ignore` no longer apply), while `--extend-select`, `--ignore` and `--extend-exclude` add to it.
    """
    changes = dict(overrides)
    if any(name in changes for name in ("select", "extend_select", "ignore", "extend_ignore")):
        layers = settings.selection_layers
        if not layers and (settings.select or settings.extend_select or settings.ignore or settings.extend_ignore):
            layers = (settings.own_selection_layer(),)
        select = tuple(changes["select"]) if changes.get("select") else None
        ignore = tuple(changes.get("ignore", ())) + tuple(changes.get("extend_ignore", ()))
        changes["selection_layers"] = layers + ((select, tuple(changes.get("extend_select", ())), ignore),)
    if "select" in changes:
        settings = settings.with_changes(extend_select=(), ignore=(), extend_ignore=())
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
        inline_overrides: Optional[Dict[str, Any]] = None,
    ) -> None:
        if isolated and config_path is not None:
            raise ConfigError("--config and --isolated cannot be used together")
        self._cli_overrides = dict(cli_overrides)
        # `--config KEY=VALUE`: above every configuration file, below the dedicated options (as in Ruff).
        self._inline_overrides = dict(inline_overrides or {})
        self._config_path = config_path
        self._isolated = isolated
        self._all_codes = list(all_codes)
        self._settings_by_config: Dict[Optional[Path], Settings] = {}
        self._by_folder: Dict[str, Settings] = {}  # `for_folder`'s answers (a run's files do not move meanwhile)

    def for_path(self, path: Path) -> Settings:
        absolute = os.path.abspath(path)
        return self.for_folder(absolute if os.path.isdir(absolute) else os.path.dirname(absolute))

    def for_folder(self, folder: str) -> Settings:
        """The settings of the files in `folder` (an absolute, normalized path): `for_path` without asking the
        file system whether the path is a folder (a run asks for every folder it walks)."""
        settings = self._by_folder.get(folder)
        if settings is None:
            if self._isolated:
                settings = self._settings_from(None)
            elif self._config_path is not None:
                settings = self._settings_from(self._config_path)
            else:
                config = _config_above(folder)
                settings = self._settings_for_project(folder) if config is None else self._settings_from(config)
            self._by_folder[folder] = settings
        return settings

    def _settings_for_project(self, folder: str) -> Settings:
        """No configuration file: the defaults, with `target-torch` from the closest `pyproject.toml`'s project."""
        from amp_lint.files.torch_version import project_root_above

        root = project_root_above(folder)
        key = ("project", root)
        if key not in self._settings_by_config:
            base = with_project_torch(Settings(), root)
            self._settings_by_config[key] = apply_cli_overrides(base, self._cli_overrides)
        return self._settings_by_config[key]

    def reloaded(self) -> "SettingsResolver":
        """The same options with every configuration file read again (`--watch`: one may have changed)."""
        from amp_lint.files.torch_version import forget_project_roots

        _config_above.cache_clear()
        forget_project_roots()  # a requirements file may have changed too
        return SettingsResolver(
            self._cli_overrides,
            config_path=self._config_path,
            isolated=self._isolated,
            all_codes=self._all_codes,
            inline_overrides=self._inline_overrides,
        )

    def root_settings(self, cwd: Path) -> Settings:
        """The settings for run-wide choices (output format, fix mode): those of the working folder."""
        return self.for_path(cwd)

    def _settings_from(self, config: Optional[Path]) -> Settings:
        if config not in self._settings_by_config:
            base = load_config(config, self._all_codes) if config is not None else Settings()
            if self._inline_overrides:
                base = merge_settings(base, self._inline_overrides)
            self._settings_by_config[config] = apply_cli_overrides(base, self._cli_overrides)
        return self._settings_by_config[config]


# --- --show-settings ---------------------------------------------------------------------------


def describe(settings: Settings, enabled: Optional[List[str]] = None) -> str:
    """The resolved settings as TOML, headed by the file they came from; with `enabled`, the rules that
    end up on for the file (after select, extend-select, ignore and per-file-ignores), as a comment."""
    origin = f"Settings from {settings.source}" if settings.source else "Default settings (no configuration file)"
    lines = [f"# {origin}"]
    if settings.root:
        lines.append(f"# Relative globs are resolved against {settings.root}")
    if enabled is not None:
        lines.append(f"# Enabled rules ({len(enabled)}): {', '.join(enabled) if enabled else 'none'}")
    for name in (f.name for f in fields(Settings)):
        if name in ("source", "root", "per_file_ignores", "extend_per_file_ignores", "selection_layers"):
            continue
        if name == "target_packages":  # read from the project's requirements, not a key of its own
            if settings.target_packages:
                floors = ", ".join(f"{package}>={version}" for package, version in settings.target_packages)
                lines.append(f"# from the project's requirements: {floors}")
            continue
        key = name.replace("_", "-")
        value = getattr(settings, name)
        if name == "select" and not value:
            lines.append("# select is not set: the rules on by default")
            continue
        lines.append(f"# {key} is not set" if value is None else f"{key} = {_toml_value(value)}")
    lines.append("")
    lines.append("[per-file-ignores]")
    lines += [f"{_toml_value(glob)} = {_toml_value(codes)}" for glob, codes in settings.per_file_ignores]
    if settings.extend_per_file_ignores:
        lines.append("")
        lines.append("[extend-per-file-ignores]")
        lines += [f"{_toml_value(glob)} = {_toml_value(codes)}" for glob, codes in settings.extend_per_file_ignores]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    # A JSON string is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=False)
