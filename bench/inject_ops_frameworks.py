"""Operators for custom_fwd / custom_bwd, deprecated spellings and framework rules (issue 46), as in
bench/inject_ops_rules.py (whose helpers they use); standard library only.

    custom_decorator_dropped  custom_bwd (or custom_fwd) deleted where both decorate a Function     AMP061
    custom_fwd_no_device   device_type dropped from torch.amp.custom_fwd/bwd, or torch.cuda.amp's bare decorator
                           (or its import) switched to torch.amp                                   AMP062
    deprecated_custom_fwd    torch.amp.custom_fwd(device_type="cuda") -> torch.cuda.amp.custom_fwd  AMP073
    deprecated_cpu_autocast  torch.autocast("cpu", ...) -> torch.cpu.amp.autocast(...)            AMP071
    deprecated_grad_scaler   torch.amp.GradScaler("cuda", ...) -> torch.cuda.amp.GradScaler(...)  AMP072
    deprecated_state_function  torch.get_autocast_dtype("cuda") -> torch.get_autocast_gpu_dtype() ...  AMP074
    legacy_private_name    torch.amp.grad_scaler.OptState imported from torch.cuda.amp.grad_scaler  AMP079
    accelerate_scaler      a hand-made GradScaler on an Accelerator(mixed_precision=...)'s prepared optimizer
                                                                                                   AMP093
    graphed_with_cache     cache_enabled=False dropped from an autocast around make_graphed_callables   AMP055
    fsdp_plain_scaler      ShardedGradScaler(...) -> torch.amp.GradScaler("cuda", ...) in a file that wraps FSDP
                                                                                                   AMP091
    deepspeed_under_autocast  a DeepSpeed engine's call put under torch.autocast("cuda", float16)   AMP092
    fsdp2_fp16_policy      MixedPrecisionPolicy(param_dtype=torch.bfloat16) -> torch.float16 in a file that trains
                           with a plain backward and no scaler                                     AMP094
    apex_recipe            the module's torch AMP recipe written in NVIDIA apex's (amp.initialize O1 after the
                           optimizer is built, amp.scale_loss, autocast regions dropped)           AMP077

Deprecations are injected only outside version fallbacks (a try/except, an `if` on a version), which their rules
leave alone by design. The last four find no site in the corpus of December 2026 (no make_graphed_callables, no
file that both wraps FSDP and builds its scaler, no DeepSpeed engine called in the function that initialises it with a visible config,
no literal bfloat16 FSDP2 policy in a file that trains): a corpus with such sites measures them.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from inject_ops import Module, Site, _method, _resolved, _text, replace_node
from inject_ops_more import _after_imports
from inject_ops_rules import (
    _AUTOCASTS,
    _alias_map,
    _args_text,
    _autocast_withs,
    _edit,
    _expr_stmt,
    _imports_torch,
    _in_fallback,
    _inside,
    _keyword,
    _nodes,
    scaler_removal,
)

EXPECTED_MORE: Dict[str, Tuple[str, ...]] = {
    "custom_decorator_dropped": ("AMP061",),
    "custom_fwd_no_device": ("AMP062",),
    "deprecated_custom_fwd": ("AMP073",),
    "deprecated_cpu_autocast": ("AMP071",),
    "deprecated_grad_scaler": ("AMP072",),
    "deprecated_state_function": ("AMP074",),
    "legacy_private_name": ("AMP079",),
    "accelerate_scaler": ("AMP093",),
    "graphed_with_cache": ("AMP055",),
    "fsdp_plain_scaler": ("AMP091",),
    "deepspeed_under_autocast": ("AMP092",),
    "fsdp2_fp16_policy": ("AMP094",),
    "apex_recipe": ("AMP077",),
}
PRINCIPLE_MORE = {op: 6 for op in EXPECTED_MORE}
# Rules that judge the whole file (an FSDP wrap and a scaler anywhere in it) report where the file shows it.
WHOLE_FILE_MORE = ("fsdp_plain_scaler", "fsdp2_fp16_policy")
# No fix (AMP092-094), or a fix that is not the original.
MANY_ANSWERS_MORE = ("accelerate_scaler", "deepspeed_under_autocast", "fsdp2_fp16_policy", "apex_recipe")
# Words of files that hold sites of these operators and none of the others' (inject_ops.may_hold_sites).
SITE_WORDS_MORE = ("custom_fwd", "custom_bwd", "optstate", "accelerator(", "deepspeed", "fully_shard", "get_autocast")


# --- AMP061, AMP062, AMP073: custom_fwd / custom_bwd ------------------------------------------------------


def _decorators(module: Module, word: str) -> Iterator[Tuple[ast.FunctionDef, ast.AST]]:
    if word not in module.text:
        return
    for node in _nodes(module, ast.FunctionDef):
        for dec in node.decorator_list:
            if word in _text(dec.func if isinstance(dec, ast.Call) else dec).split(".")[-1]:
                yield node, dec


def op_custom_decorator_dropped(module: Module) -> Iterator[Site]:
    count = 0
    fwds, bwds = list(_decorators(module, "custom_fwd")), list(_decorators(module, "custom_bwd"))
    for cls in {module.parent.get(f) for f, _ in fwds + bwds}:
        if not isinstance(cls, ast.ClassDef):
            continue
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        fwd = [d for f, d in fwds if f is methods.get("forward")]
        bwd = [d for f, d in bwds if f is methods.get("backward")]
        if len(fwd) != 1 or len(bwd) != 1:
            continue
        dec = bwd[0] if count % 2 == 0 else fwd[0]
        count += 1
        line = module.lines[dec.lineno - 1]
        if dec.lineno != dec.end_lineno or not line.strip().startswith("@") or len(line.strip()) != dec.end_col_offset - dec.col_offset + 1:
            continue
        lines = list(module.lines)
        del lines[dec.lineno - 1]
        yield dec.lineno, dec.lineno, f"`@{_text(dec)}` deleted from `{cls.name}` (its pair stays)", "".join(lines)


_NEW_CUSTOM = ("torch.amp.custom_fwd", "torch.amp.custom_bwd", "torch.amp.autocast_mode.custom_fwd", "torch.amp.autocast_mode.custom_bwd")


def _custom_uses(module: Module) -> Iterator[ast.AST]:
    """custom_fwd / custom_bwd as written: decorators (bare or called) and calls elsewhere (`fwd = custom_fwd(...)`)."""
    seen = set()
    for _, dec in list(_decorators(module, "custom_fwd")) + list(_decorators(module, "custom_bwd")):
        seen.add(dec)
        yield dec
    for call in module.calls():
        if call not in seen and "custom_" in _text(call.func).split(".")[-1]:
            yield call


def op_custom_fwd_no_device(module: Module) -> Iterator[Site]:
    """`device_type` dropped from torch.amp.custom_fwd/bwd; or torch.cuda.amp's bare decorator (or its import
    `from torch.cuda.amp import custom_fwd`) switched to torch.amp without adding device_type, the shape the
    rule's docs name as its origin."""
    aliases = _alias_map(module)
    for use in _custom_uses(module):
        func = use.func if isinstance(use, ast.Call) else use
        name = _resolved(func, aliases)
        if name in _NEW_CUSTOM and isinstance(use, ast.Call) and isinstance(_keyword(use, "device_type"), ast.Constant):
            rest = _args_text(use, skip=("device_type",))
            decorator = any(use in f.decorator_list for f in _nodes(module, ast.FunctionDef))
            new = f"{_text(func)}({', '.join(rest)})" if rest or not decorator else _text(func)
            yield use.lineno, use.lineno, f"`{_text(use)}` -> `{new}` (device_type dropped)", replace_node(module, use, new)
        elif name.startswith("torch.cuda.amp.") and not (isinstance(use, ast.Call) and use.args) and "torch.cuda.amp" in _text(func) and not _in_fallback(module, use):
            new = _text(use).replace("torch.cuda.amp.", "torch.amp.", 1)
            yield use.lineno, use.lineno, f"`{_text(use)}` -> `{new}` (switched to torch.amp, no device_type)", replace_node(module, use, new)
    for node in module.tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "torch.cuda.amp" and {a.name for a in node.names} <= {"custom_fwd", "custom_bwd"}:
            uses = [u for u in _custom_uses(module) if _resolved(u.func if isinstance(u, ast.Call) else u, aliases).startswith("torch.cuda.amp.custom")]
            if uses and all(not (isinstance(u, ast.Call) and u.args) for u in uses) and node.lineno == node.end_lineno:
                lines = list(module.lines)
                lines[node.lineno - 1] = lines[node.lineno - 1].replace("torch.cuda.amp", "torch.amp", 1)
                yield uses[0].lineno, uses[0].lineno, "`from torch.cuda.amp import ...custom_fwd` -> `from torch.amp import ...` (no device_type)", "".join(lines)


def op_deprecated_custom_fwd(module: Module) -> Iterator[Site]:
    aliases = _alias_map(module)
    for use in _custom_uses(module):
        if not isinstance(use, ast.Call) or _resolved(use.func, aliases) not in _NEW_CUSTOM or _in_fallback(module, use):
            continue
        device = _keyword(use, "device_type")
        if not (isinstance(device, ast.Constant) and device.value == "cuda") or not _imports_torch(module):
            continue
        rest = _args_text(use, skip=("device_type",))
        new = f"torch.cuda.amp.{_text(use.func).split('.')[-1]}" + (f"({', '.join(rest)})" if rest else "")
        yield use.lineno, use.lineno, f"`{_text(use)}` -> `{new}`", replace_node(module, use, new)


# --- AMP071, AMP072, AMP074, AMP079: deprecated spellings ---------------------------------------------------


def op_deprecated_cpu_autocast(module: Module) -> Iterator[Site]:
    if not re.search(r"[\"']cpu[\"']", module.text) or "autocast" not in module.text or not _imports_torch(module):
        return
    aliases = _alias_map(module)
    for call in module.calls():
        if _resolved(call.func, aliases) not in ("torch.autocast", "torch.amp.autocast"):
            continue
        device = _keyword(call, "device_type") or (call.args[0] if call.args else None)
        if isinstance(device, ast.Constant) and device.value == "cpu" and not _in_fallback(module, call):
            rest = [_text(a) for a in call.args if a is not device] + [f"{k.arg}={_text(k.value)}" if k.arg else f"**{_text(k.value)}" for k in call.keywords if k.arg != "device_type"]
            new = f"torch.cpu.amp.autocast({', '.join(rest)})"
            yield call.lineno, call.lineno, f"`{_text(call)}` -> `{new}`", replace_node(module, call, new)


def op_deprecated_grad_scaler(module: Module) -> Iterator[Site]:
    if "GradScaler" not in module.text or not _imports_torch(module):
        return
    aliases = _alias_map(module)
    for call in module.calls():
        if _resolved(call.func, aliases) not in ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler") or _in_fallback(module, call):
            continue
        device = _keyword(call, "device") or (call.args[0] if call.args else None)
        dev = "cuda" if device is None else device.value if isinstance(device, ast.Constant) and device.value in ("cuda", "cpu") else None
        if dev is None or any(k.arg is None for k in call.keywords):
            continue
        rest = [_text(a) for a in call.args if a is not device] + [f"{k.arg}={_text(k.value)}" for k in call.keywords if k.arg != "device"]
        new = f"torch.{dev}.amp.GradScaler({', '.join(rest)})"
        yield call.lineno, call.lineno, f"`{_text(call)}` -> `{new}`", replace_node(module, call, new)


_STATE_OLD = {("get_autocast_dtype", "cuda"): "get_autocast_gpu_dtype", ("get_autocast_dtype", "cpu"): "get_autocast_cpu_dtype",
              ("is_autocast_enabled", "cpu"): "is_autocast_cpu_enabled", ("set_autocast_dtype", "cuda"): "set_autocast_gpu_dtype",
              ("set_autocast_dtype", "cpu"): "set_autocast_cpu_dtype", ("set_autocast_enabled", "cpu"): "set_autocast_cpu_enabled"}


def op_deprecated_state_function(module: Module) -> Iterator[Site]:
    if "_autocast_" not in module.text:
        return
    aliases = _alias_map(module)
    for call in module.calls():
        name = _resolved(call.func, aliases)
        if not name.startswith("torch.") or not call.args or not isinstance(call.args[0], ast.Constant) or call.keywords:
            continue
        old = _STATE_OLD.get((name[len("torch."):], call.args[0].value))
        if old and _text(call.func) == name and not _in_fallback(module, call):
            new = f"torch.{old}({', '.join(_text(a) for a in call.args[1:])})"
            yield call.lineno, call.lineno, f"`{_text(call)}` -> `{new}`", replace_node(module, call, new)


def op_legacy_private_name(module: Module) -> Iterator[Site]:
    if "OptState" not in module.text and "_cast(" not in module.text:
        return
    for node in module.tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "torch.amp.grad_scaler" and [a.name for a in node.names] == ["OptState"]:
            new = module.lines[node.lineno - 1].replace("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler", 1)
            lines = list(module.lines)
            lines[node.lineno - 1] = new
            yield node.lineno, node.lineno, "`OptState` imported from `torch.cuda.amp.grad_scaler`", "".join(lines)
    aliases = _alias_map(module)
    for call in module.calls():
        if _resolved(call.func, aliases) == "torch.amp.autocast_mode._cast" and len(call.args) == 3 and _text(call.func).startswith("torch."):
            new = f"torch.cuda.amp.autocast_mode._cast({_text(call.args[0])}, {_text(call.args[2])})"
            yield call.lineno, call.lineno, f"`{_text(call)}` -> `{new}`", replace_node(module, call, new)


# --- AMP055, AMP091-094: frameworks -------------------------------------------------------------------------


def _binds(stmt: ast.stmt, name: str) -> bool:
    return isinstance(stmt, ast.Assign) and any(_text(t) == name for t in stmt.targets)


def op_accelerate_scaler(module: Module) -> Iterator[Site]:
    """`..., O, ... = A.prepare(...)` where the binding of `A` that reaches it (the last one before it in its
    block) is `Accelerator(mixed_precision="fp16"|"bf16")`: a GradScaler built after the prepare, and in the
    statements that follow it in its block (until `A` is bound again) `A.backward(L)` ->
    `A.backward(scaler.scale(L))` and `O.step()` -> `scaler.step(O); scaler.update()` (O: a prepared name that
    says it is an optimizer; a prepared scheduler's step stays)."""
    if "Accelerator(" not in module.text or not _imports_torch(module):
        return
    for prep in _nodes(module, ast.Assign):
        if not (isinstance(prep.value, ast.Call) and _method(prep.value) == "prepare" and isinstance(prep.targets[0], ast.Tuple)) or prep not in module.block:
            continue
        body, i = module.block[prep]
        accel = _text(prep.value.func.value)
        binding = next((s for s in reversed(body[:i]) if _binds(s, accel)), None)
        if binding is None or not isinstance(binding.value, ast.Call) or _text(binding.value.func).split(".")[-1] != "Accelerator":
            continue
        precision = _keyword(binding.value, "mixed_precision")
        if not (isinstance(precision, ast.Constant) and precision.value in ("fp16", "bf16")):
            continue
        region = []
        for later in body[i + 1 :]:
            if _binds(later, accel):
                break
            region.append(later)
        names = {_text(e) for e in prep.targets[0].elts}
        edits: Dict[ast.stmt, Optional[List[str]]] = {}
        for call in module.calls():
            stmt = _expr_stmt(module, call)
            if stmt is None or not any(_inside(module, call, r) for r in region):
                continue
            if _method(call) == "backward" and _text(call.func.value) == accel and len(call.args) == 1:
                edits[stmt] = [f"{module.indent(stmt)}{accel}.backward(amp_scaler.scale({_text(call.args[0])}))"]
            elif _method(call) == "step" and _text(call.func.value) in names and "optim" in _text(call.func.value).lower() and not call.args:
                opt = _text(call.func.value)
                edits[stmt] = [f"{module.indent(stmt)}amp_scaler.step({opt})", f"{module.indent(stmt)}amp_scaler.update()"]
        if any("backward" in v[0] for v in edits.values()) and any("update" in v[-1] for v in edits.values()):
            edits[prep] = [line.rstrip("\n") for line in module.stmt_lines(prep)] + [f'{module.indent(prep)}amp_scaler = torch.amp.GradScaler("cuda")']
            yield prep.lineno, prep.end_lineno + 1, f"a hand-made GradScaler on the optimizer prepared by `{accel}` (line {prep.lineno}, {precision.value})", _edit(module, edits)


def op_graphed_with_cache(module: Module) -> Iterator[Site]:
    if "make_graphed_callables" not in module.text:
        return
    for node in _autocast_withs(module, cuda_only=True):
        call = node.items[0].context_expr
        cache = _keyword(call, "cache_enabled")
        if isinstance(cache, ast.Constant) and cache.value is False and any(isinstance(c, ast.Call) and _method(c) == "make_graphed_callables" for c in ast.walk(node)):
            new = f"{_text(call.func)}({', '.join(_args_text(call, skip=('cache_enabled',)))})"
            yield node.lineno, node.lineno, f"`cache_enabled=False` dropped from `{_text(call)}` around make_graphed_callables", replace_node(module, call, new)


def _wraps_fsdp(module: Module) -> bool:
    return any(_text(c.func).split(".")[-1] in ("FullyShardedDataParallel", "FSDP") for c in module.calls())


def op_fsdp_plain_scaler(module: Module) -> Iterator[Site]:
    if "ShardedGradScaler" not in module.text or not _wraps_fsdp(module) or not _imports_torch(module):
        return
    for call in module.calls():
        if _text(call.func).split(".")[-1] == "ShardedGradScaler" and not call.args and all(k.arg for k in call.keywords):
            new = "torch.amp.GradScaler(" + ", ".join(['"cuda"'] + _args_text(call)) + ")"
            yield call.lineno, call.lineno, f"`{_text(call)}` -> `{new}` in a file that wraps FSDP", replace_node(module, call, new)


def _visible_config(fn: ast.AST, call: ast.Call) -> bool:
    """The DeepSpeed config is a dict written in the function (inline, or a name assigned one) with no
    `torch_autocast` section: an outer autocast is then certainly a second precision layer (or DeepSpeed's
    assertion). With the config out of sight it may enable torch_autocast, which tolerates the outer one."""
    config = _keyword(call, "config") or _keyword(call, "config_params")
    if isinstance(config, ast.Name):
        values = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and [_text(t) for t in n.targets] == [config.id]]
        config = values[0] if len(values) == 1 else None
    return isinstance(config, ast.Dict) and "torch_autocast" not in _text(config)


def op_deepspeed_under_autocast(module: Module) -> Iterator[Site]:
    if "deepspeed.initialize" not in module.text or not _imports_torch(module):
        return
    for fn in _nodes(module, (ast.FunctionDef, ast.AsyncFunctionDef)):
        engines = set()
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _text(n.value.func).endswith("deepspeed.initialize") and _visible_config(fn, n.value):
                target = n.targets[0]
                engines.add(_text(target.elts[0] if isinstance(target, ast.Tuple) else target))
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _text(n.value.func) in engines and module.alone(n) and n in module.block:
                indent = module.indent(n)
                piece = [f"{indent}with torch.autocast(\"cuda\", dtype=torch.float16):"] + ["    " + l.rstrip("\n") for l in module.stmt_lines(n)]
                yield n.lineno, n.lineno + 1, "the DeepSpeed engine's call put under a float16 torch.autocast", _edit(module, {n: piece})


def op_fsdp2_fp16_policy(module: Module) -> Iterator[Site]:
    """A bfloat16 FSDP2 policy made float16 in a file that trains it (a plain `.backward()`) with no scaler."""
    if "fully_shard" not in module.text or module.scalers or not any(_method(c) == "backward" for c in module.calls()):
        return
    for call in module.calls():
        dtype = _keyword(call, "param_dtype")
        if _text(call.func).split(".")[-1] == "MixedPrecisionPolicy" and dtype is not None and _text(dtype) == "torch.bfloat16":
            yield call.lineno, call.lineno, f"MixedPrecisionPolicy param_dtype `{_text(dtype)}` -> `torch.float16`", replace_node(module, dtype, "torch.float16")


def op_apex_recipe(module: Module) -> Iterator[Site]:
    """The recipe as code that never moved to torch.amp writes it: `M, O = amp.initialize(M, O, opt_level="O1")`
    after `O = X(M.parameters(), ...)`, `with amp.scale_loss(loss, O) as scaled_loss: scaled_loss.backward()`,
    `O.step()`, and no autocast (O1 patches torch's functions). AMP077 is silent by design in a file that also
    runs torch's scaler or autocast, so every use of both goes: only where each is a statement of its own."""
    if not module.scalers or ".parameters()" not in module.text:
        return
    aliases = _alias_map(module)
    withs = list(_autocast_withs(module, cuda_only=False))
    items = {w.items[0].context_expr for w in withs if w.items[0].optional_vars is None}
    if any(_resolved(c.func, aliases) in _AUTOCASTS and c not in items for c in module.calls()) or len(items) != len(withs):
        return
    for name in sorted(module.scalers):
        found = scaler_removal(module, name)
        if not found or len(found[1]) != 1 or len({opt for _, opt in found[2]}) != 1:
            continue
        deleted, [(backward, loss, call)], steps = found
        opt = steps[0][1]
        builds = [n for n in _nodes(module, ast.Assign) if _text(n.targets[0]) == opt and isinstance(n.value, ast.Call) and n in module.block
                  and module.alone(n) and n.value.args and isinstance(n.value.args[0], ast.Call) and _method(n.value.args[0]) == "parameters"]
        if len(builds) != 1 or call.args or call.keywords:
            continue
        model = _text(builds[0].value.args[0].func.value)
        edits: Dict[ast.stmt, Optional[List[str]]] = {s: None for s in deleted}
        indent = module.indent(backward)
        edits[backward] = [f"{indent}with apex_amp.scale_loss({loss}, {opt}) as scaled_loss:", f"{indent}    scaled_loss.backward()"]
        edits.update({s: [f"{module.indent(s)}{o}.step()"] for s, o in steps})
        edits[builds[0]] = [line.rstrip("\n") for line in module.stmt_lines(builds[0])] + [
            f'{module.indent(builds[0])}{model}, {opt} = apex_amp.initialize({model}, {opt}, opt_level="O1")']
        if any(_inside(module, s, w) for s in edits for w in withs):
            continue
        for w in withs:
            shift = len(module.indent(w.body[0])) - len(module.indent(w))
            edits[w] = [line.rstrip("\n")[shift:] if line.strip() else "" for s in w.body for line in module.stmt_lines(s)]
        lines = _edit(module, edits).splitlines(keepends=True)
        at = _after_imports(module)
        lines[at:at] = ["from apex import amp as apex_amp\n"]
        yield backward.lineno, backward.lineno + 1, f"the torch AMP recipe of `{name}` written in apex's (O1)", "".join(lines)


OPERATORS_MORE: Dict[str, Callable[[Module], Iterator[Site]]] = {name: globals()[f"op_{name}"] for name in EXPECTED_MORE}
