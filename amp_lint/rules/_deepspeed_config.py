"""AMP092's reading of a DeepSpeed config: a literal dict passed to `deepspeed.initialize(config=...)` (or a name
the same function or the module binds to one), or a JSON file of the project named by a literal path.

Facts (DeepSpeed's `runtime/torch_autocast.py`, 0.17.2 and later): when `torch.autocast` is enabled around the
engine's forward and the config has no enabled `torch_autocast` section, the engine raises ``AssertionError:
torch.autocast is enabled outside DeepSpeed, but not in the DeepSpeed config. Please enable torch.autocast
through the DeepSpeed config to ensure the correct communication dtype is used.`` (deepspeedai/DeepSpeed#7529);
with `torch_autocast` enabled it only warns. `fp16`/`bf16` sections make the engine cast the model and scale the
loss itself, and cannot be combined with `torch_autocast` ("Cannot enable both torch autocast and fp16").
"""

from __future__ import annotations

import ast
import json
from typing import Optional

import libcst as cst

from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import argument, literal_string
from amp_lint.rules.base import Rule


def read_config(rule: Rule, model: FileModel, call: cst.Call, scope: Scope) -> Optional[dict]:
    """The config `deepspeed.initialize(...)` is given, when the file shows all of it; else None."""
    arg = argument(call, None, "config") or argument(call, None, "config_params")
    if arg is None:
        return None
    value = arg.value
    if isinstance(value, cst.Name):
        bound = [
            a.value
            for a in model.assignment_sites
            if a.target == value.value and a.scope in list(scope.chain())
        ]
        if len(bound) != 1:
            return None  # rebound, or not bound here: not proved
        value = bound[0]
    if isinstance(value, cst.Dict):
        try:
            config = ast.literal_eval(code_of(value))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        return config if isinstance(config, dict) else None
    path = literal_string(value)
    if path is None or not path.endswith(".json"):
        return None
    text = rule.read_side_file(path)
    if text is None:
        return None
    try:
        config = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or an integer past Python's digit limit
        return None
    return config if isinstance(config, dict) else None


def _enabled(config: dict, *sections: str) -> object:
    """The `enabled` of the first of `sections` the config has (True, False, "auto", ...), else False."""
    for section in sections:
        part = config.get(section)
        if isinstance(part, dict):
            return part.get("enabled", False)
    return False


def config_verdict(config: Optional[dict]) -> object:
    """What an outer autocast around the engine does with this config: None when not known (no config in
    sight, or `"auto"` values a launcher fills in), False when it is fine (`torch_autocast` enabled), else a
    phrase saying what goes wrong."""
    if config is None:
        return None
    torch_autocast = _enabled(config, "torch_autocast")
    fp16, bf16 = _enabled(config, "fp16"), _enabled(config, "bf16", "bfloat16")
    if "auto" in (torch_autocast, fp16, bf16):
        return None
    if torch_autocast is True:
        return False
    if fp16 is True or bf16 is True:
        return (
            f"enables {'fp16' if fp16 is True else 'bf16'}, so the engine casts the model and scales the loss itself "
            "(mixed precision twice; DeepSpeed 0.17.2 and later raise AssertionError)"
        )
    return (
        "has no enabled `torch_autocast` section: DeepSpeed 0.17.2 and later raise AssertionError "
        "(torch.autocast is enabled outside DeepSpeed, but not in the DeepSpeed config)"
    )
