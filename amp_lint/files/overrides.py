"""The command line's settings, as Ruff spells them, turned into overrides of the configuration files.

`--select AMP0,AMP1 --select AMP2`, `--exclude 'build/*'`, `--per-file-ignores 'tests/*:AMP001'` and
`--config 'KEY = VALUE'` are read here into the `Settings` field names `SettingsResolver` layers on top of
every configuration file. Errors raise `ConfigError` with a one-line message naming the option.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from amp_lint.files.config import ConfigError, parse_inline_option
from amp_lint.files.torch_version import is_version

# Inline `--config` keys that add up over several pairs instead of replacing each other.
_ADDITIVE_KEYS = ("extend_select", "ignore", "extend_ignore", "extend_exclude", "extend_fixable")


def codes(values: Sequence[str]) -> Tuple[str, ...]:
    """`--select AMP001,AMP02 --select AMP1` -> ("AMP001", "AMP02", "AMP1")."""
    return tuple(code.strip() for value in values for code in value.split(",") if code.strip())


def cli_pattern(pattern: str) -> str:
    """A glob given on the command line is relative to the working folder (as in Ruff), not to the
    configuration file's folder: one with a `/` is made absolute here; a bare name matches names anyway."""
    negated = pattern.startswith("!")
    body = pattern[1:] if negated else pattern
    if "/" in body and not os.path.isabs(body):
        body = os.path.join(os.getcwd(), body)
    return ("!" if negated else "") + body


def patterns(values: Sequence[str]) -> Tuple[str, ...]:
    """`--exclude a,b --exclude c` -> (a, b, c), each relative to the working folder."""
    return tuple(cli_pattern(item.strip()) for value in values for item in value.split(",") if item.strip())


def per_file_ignores(values: Sequence[str], option: str = "--per-file-ignores") -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    """`--per-file-ignores 'tests/*:AMP001,AMP02'`, as Ruff spells it, -> ((pattern, codes), ...)."""
    pairs: Dict[str, list] = {}
    last: Optional[str] = None
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            if ":" in item:
                pattern, code = item.rsplit(":", 1)
                last = cli_pattern(pattern.strip())
            elif last is not None:  # `a.py:AMP001,AMP002`: the next code belongs to the same pattern
                code = item
            else:
                raise ConfigError(f"{option}: expected PATTERN:CODES, got {item!r}")
            if code.strip():
                pairs.setdefault(last, []).append(code.strip())
    return tuple((pattern, tuple(found)) for pattern, found in pairs.items())


def target_torch(value: Optional[str]) -> Optional[str]:
    if value is not None and not is_version(value):
        raise ConfigError(f"--target-torch: {value!r} is not a torch release such as 2.3")
    return value


def settings_overrides(options: Mapping[str, Any]) -> Dict[str, Any]:
    """The `Settings` fields the command line sets (None and empty options set nothing)."""
    overrides = {
        "select": codes(options["select"]) or None,
        "ignore": codes(options["ignore"]) or None,
        "extend_select": codes(options["extend_select"]) or None,
        "extend_ignore": codes(options.get("extend_ignore", ())) or None,
        "exclude": patterns(options["exclude"]) or None,
        "extend_exclude": patterns(options["extend_exclude"]) or None,
        "per_file_ignores": per_file_ignores(options["per_file_ignores"]) or None,
        "extend_per_file_ignores": per_file_ignores(options["extend_per_file_ignores"], "--extend-per-file-ignores") or None,
        "respect_gitignore": options["respect_gitignore"],
        "fix": options["fix"],
        "unsafe_fixes": options["unsafe_fixes"],
        "show_assumed": options["show_assumed"],
        "preview": options["preview"],
        "fixable": codes(options["fixable"]) or None,
        "unfixable": codes(options["unfixable"]) or None,
        "extend_fixable": codes(options.get("extend_fixable", ())) or None,
        "show_fixes": options.get("show_fixes"),
        "output_format": options["output_format"],
        "fail_on": options["fail_on"],
        "amp_dtype": options["amp_dtype"],
        "amp_device": options["amp_device"],
        "target_torch": target_torch(options["target_torch"]),
    }
    return {key: value for key, value in overrides.items() if value is not None}


def config_options(values: Iterable[str], all_codes: Iterable[str]) -> Tuple[Optional[Path], Dict[str, Any]]:
    """`--config PATH` (one at most) and `--config 'KEY = VALUE'` (any number), as Ruff reads them."""
    path = None
    inline: Dict[str, Any] = {}
    all_codes = list(all_codes)
    for value in values:
        if os.path.exists(value) and "=" not in value:  # a FIFO or folder is reported by the reader
            if path is not None:
                raise ConfigError("--config names two configuration files; give one (and KEY = VALUE pairs)")
            path = Path(value)
        elif "=" in value:
            for key, item in parse_inline_option(value, all_codes).items():
                inline[key] = inline.get(key, ()) + item if key in _ADDITIVE_KEYS else item
        else:
            raise ConfigError(
                f"--config {value!r}: no such configuration file, and not a TOML KEY = VALUE pair (for example: select = [\"AMP0\"])"
            )
    return path, inline
