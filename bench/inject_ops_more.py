"""More mutation operators for bench/inject.py (issue 46): the default rules beyond the first ten families.

Each operator finds real sites in correct AMP code and injects one documented mistake, as the first ten do
(bench/inject_ops.py holds those, the `Module` reader and the text helpers). The mistakes are the ones fresh
code showed: values that travel (a device through a module constant, a helper or a kwargs dict), lifetimes
(a scaler rebuilt in the loop), logs of scaled values, configuration (bfloat16 with a scaler, a scaler on the
wrong device, a float32 autocast), and deprecated factories referenced without a call.

    scaler_in_loop         the scaler's construction repeated as the first statement of the loop that
                           holds the scaled backward                                    AMP013
    scaler_device_cpu      torch.amp.GradScaler("cuda") -> GradScaler("cpu") beside a cuda autocast   AMP014
    bf16_with_scaler       autocast dtype=torch.float16 -> torch.bfloat16 where a scaler steps   AMP012
    float32_autocast       autocast dtype=torch.float16 -> torch.float32 on a non-CUDA device   AMP054
    nonfinite_clip         clip_grad_norm_(...) in a scaler loop gets error_if_nonfinite=True   AMP031
    scaled_loss_logged     S.scale(L).backward() -> scaled = S.scale(L); scaled.backward(); print(scaled.item())
                                                                                        AMP033
    grad_norm_before_unscale  a gradient-norm log of the optimizer's parameters inserted between the scaled
                           backward and unscale_                                        AMP030
    invalid_growth_factor  GradScaler(...) gets growth_factor=0.5                       AMP076
    state_mid_iteration    torch.save(S.state_dict(), ...) between the scaled backward and update()   AMP081
    device_constant        autocast's "cuda" -> a module constant holding "cuda:0"      AMP075
    device_helper          autocast's "cuda" -> a module helper returning "cuda:0"      AMP075
    device_kwargs          autocast("cuda", ...) -> autocast(**{"device_type": "cuda:0"}, ...)   AMP075
    bce_in_helper          a module helper calling F.binary_cross_entropy, called inside a cuda autocast
                           block                                                        AMP052
    deprecated_reference   torch.cuda.amp.autocast referenced (not called) at module level   AMP070

Standard library only, like bench/inject_ops.py.
"""

from __future__ import annotations

import ast
from typing import Callable, Dict, Iterator, Optional, Tuple

from inject_ops import (
    _DEVICE_AUTOCASTS,
    Module,
    Site,
    _aliases,
    _method,
    _resolved,
    _scaled_backwards,
    _stmt_calls,
    _text,
    replace_node,
)

EXPECTED_MORE: Dict[str, Tuple[str, ...]] = {
    "scaler_in_loop": ("AMP013",),
    "scaler_device_cpu": ("AMP014",),
    "bf16_with_scaler": ("AMP012",),
    "float32_autocast": ("AMP054",),
    "nonfinite_clip": ("AMP031",),
    "scaled_loss_logged": ("AMP033",),
    "grad_norm_before_unscale": ("AMP030",),
    "invalid_growth_factor": ("AMP076",),
    "state_mid_iteration": ("AMP081",),
    "device_constant": ("AMP075",),
    "device_helper": ("AMP075",),
    "device_kwargs": ("AMP075",),
    "bce_in_helper": ("AMP052",),
    "deprecated_reference": ("AMP070",),
}
# The report's principles (bench/inject_report.py): 1 one protocol with the gradients' state, 2 an iteration
# is not only a loop body, 4 values followed everywhere, 5 reached through calls, 6 configuration semantics.
PRINCIPLE_MORE = {
    "scaler_in_loop": 2, "scaler_device_cpu": 6, "bf16_with_scaler": 6, "float32_autocast": 6, "nonfinite_clip": 6,
    "scaled_loss_logged": 4, "grad_norm_before_unscale": 1, "invalid_growth_factor": 6, "state_mid_iteration": 2,
    "device_constant": 4, "device_helper": 4, "device_kwargs": 4, "bce_in_helper": 5, "deprecated_reference": 6,
}
# Operators whose finding belongs anywhere in the file, not only in the site's function: a BCE reached through a
# helper is reported at the BCE, in the helper the operator adds (where it raises and where it is fixed).
WHOLE_FILE_MORE = ("bce_in_helper",)
# Operators whose fix is not the original by its nature (a constant or helper the fix leaves in place).
MANY_ANSWERS_MORE = ("device_constant", "device_helper", "device_kwargs", "bce_in_helper", "scaled_loss_logged",
                     "grad_norm_before_unscale", "state_mid_iteration", "deprecated_reference", "scaler_in_loop")


def _insert_lines(module: Module, at: int, new_lines) -> str:
    lines = list(module.lines)
    lines[at:at] = [line if line.endswith("\n") else line + "\n" for line in new_lines]
    return "".join(lines)


def _after_imports(module: Module) -> int:
    """The line index after the module's last top-level import (0 when it has none)."""
    last = 0
    for stmt in module.tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            last = stmt.end_lineno
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            break
    return last


def _imports_torch(module: Module) -> bool:
    return _aliases(module.tree).get("torch") == "torch"


def _device_autocasts(module: Module) -> Iterator[Tuple[ast.Call, Optional[ast.AST]]]:
    """(call, its device argument) of torch.autocast / torch.amp.autocast calls."""
    aliases = _aliases(module.tree)
    for call in module.calls():
        if _resolved(call.func, aliases) in _DEVICE_AUTOCASTS:
            target = next((k.value for k in call.keywords if k.arg == "device_type"), None)
            if target is None and call.args and not isinstance(call.args[0], ast.Starred):
                target = call.args[0]
            yield call, target


def _is_cuda_literal(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def _loop_of(module: Module, node: ast.AST) -> Optional[ast.AST]:
    parent = module.parent.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)):
            return parent
        parent = module.parent.get(parent)
    return None


def _has_scaler_step(module: Module, function) -> bool:
    return any(_method(c) in ("step", "unscale_") and module.is_scaler(c) and module.function_of(c) is function
               for c in module.calls())


def op_scaler_in_loop(module: Module) -> Iterator[Site]:
    """The statement `S = ...GradScaler(...)` of a function repeated as the first statement of the loop, in the
    same function, that holds `S.scale(...).backward()`: a new scaler (scale 65536, no history) every step."""
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        if not _text(node.value.func).split(".")[-1].endswith("GradScaler") or node not in module.block:
            continue
        name = _text(node.targets[0])
        function = module.function_of(node)
        for call, inner in _scaled_backwards(module):
            if _text(inner.func.value) != name or module.function_of(call) is not function or call.lineno < node.lineno:
                continue
            loop = _loop_of(module, call)
            if loop is None or not loop.body or not module.alone(loop.body[0]):
                continue
            first = loop.body[0]
            indent = module.indent(first)
            piece = [indent + line.strip() for line in module.stmt_lines(node)] if node.lineno == node.end_lineno else None
            if piece is None:
                continue
            yield first.lineno, first.lineno, f"`{_text(node)}` repeated at the top of the loop of line {loop.lineno}", _insert_lines(module, first.lineno - 1, piece)
            break


def op_scaler_device_cpu(module: Module) -> Iterator[Site]:
    aliases = _aliases(module.tree)
    if not any(_is_cuda_literal(t) for _, t in _device_autocasts(module)):
        return
    for call in module.calls():
        if _resolved(call.func, aliases) not in ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"):
            continue
        target = next((k.value for k in call.keywords if k.arg == "device"), None)
        if target is None and call.args:
            target = call.args[0]
        if target is None:
            new = '"cpu", ' if (call.args or call.keywords) else '"cpu"'
            text = _text(call.func) + "(" + new + ", ".join([_text(a) for a in call.args] + [f"{k.arg}={_text(k.value)}" if k.arg else f"**{_text(k.value)}" for k in call.keywords]) + ")"
            yield call.lineno, call.lineno, f"`{_text(call)}` -> `{text}`", replace_node(module, call, text)
        elif _is_cuda_literal(target):
            yield call.lineno, call.lineno, "GradScaler device \"cuda\" -> \"cpu\"", replace_node(module, target, '"cpu"')


def _float16_dtypes(module: Module) -> Iterator[Tuple[ast.Call, ast.AST]]:
    for call, _ in _device_autocasts(module):
        for k in call.keywords:
            if k.arg == "dtype" and _text(k.value) in ("torch.float16", "torch.half"):
                yield call, k.value


def op_bf16_with_scaler(module: Module) -> Iterator[Site]:
    for call, value in _float16_dtypes(module):
        if _has_scaler_step(module, module.function_of(call)):
            yield call.lineno, call.lineno, f"autocast dtype `{_text(value)}` -> `torch.bfloat16`", replace_node(module, value, "torch.bfloat16")


def op_float32_autocast(module: Module) -> Iterator[Site]:
    """On a device other than CUDA (a literal one), float32 is no autocast dtype: autocast warns and turns
    itself off. On CUDA it is an accepted idiom for forcing float32, so CUDA sites are none."""
    devices = dict(_device_autocasts(module))
    for call, value in _float16_dtypes(module):
        device = devices.get(call)
        if not (isinstance(device, ast.Constant) and isinstance(device.value, str) and device.value.split(":")[0] in ("cpu", "xpu", "mps", "hpu", "npu", "xla")):
            continue
        yield call.lineno, call.lineno, f"autocast dtype `{_text(value)}` -> `torch.float32`", replace_node(module, value, "torch.float32")


def op_nonfinite_clip(module: Module) -> Iterator[Site]:
    for call in module.calls():
        name = _method(call) or (call.func.id if isinstance(call.func, ast.Name) else "")
        if name != "clip_grad_norm_" or any(k.arg in ("error_if_nonfinite", None) for k in call.keywords):
            continue
        if not _has_scaler_step(module, module.function_of(call)) or len(call.args) > 3:
            continue
        text = _text(call)[:-1] + ", error_if_nonfinite=True)"
        yield call.lineno, call.lineno, f"`{_text(call.func)}(...)` gets error_if_nonfinite=True", replace_node(module, call, text)


def op_scaled_loss_logged(module: Module) -> Iterator[Site]:
    for call, inner in _scaled_backwards(module):
        stmt = module.statement_of(call)
        if not (isinstance(stmt, ast.Expr) and stmt.value is call and module.alone(stmt)) or call.args or call.keywords:
            continue
        indent = module.indent(stmt)
        piece = [f"{indent}scaled_loss = {_text(inner)}", f"{indent}scaled_loss.backward()", f'{indent}print(f"loss {{scaled_loss.item():.4f}}")']
        lines = list(module.lines)
        lines[stmt.lineno - 1 : stmt.end_lineno] = [p + "\n" for p in piece]
        yield stmt.lineno, stmt.lineno + 2, f"`{_text(call)}` -> the scaled loss stored, backpropagated and printed", "".join(lines)


def op_grad_norm_before_unscale(module: Module) -> Iterator[Site]:
    """`print(<the unscaled optimizer's gradient norm>)` inserted right before `S.unscale_(opt)`."""
    for call, stmt in _stmt_calls(module, "unscale_"):
        if len(call.args) != 1:
            continue
        opt = _text(call.args[0])
        indent = module.indent(stmt)
        line = (f"{indent}print(sum(p.grad.norm() ** 2 for g in {opt}.param_groups for p in g[\"params\"]"
                f" if p.grad is not None) ** 0.5)")
        yield stmt.lineno, stmt.lineno, f"a gradient-norm log of `{opt}` inserted before `{_text(call)}`", _insert_lines(module, stmt.lineno - 1, [line])


def op_invalid_growth_factor(module: Module) -> Iterator[Site]:
    for call in module.calls():
        if not _text(call.func).split(".")[-1] == "GradScaler" or any(k.arg in ("growth_factor", None) for k in call.keywords):
            continue
        if len(call.args) > 2:
            continue
        inner = _text(call)
        text = inner[:-1] + (", " if (call.args or call.keywords) else "") + "growth_factor=0.5)"
        yield call.lineno, call.lineno, f"`{inner}` gets growth_factor=0.5", replace_node(module, call, text)


def op_state_mid_iteration(module: Module) -> Iterator[Site]:
    if not _imports_torch(module):
        return
    for call, inner in _scaled_backwards(module):
        stmt = module.statement_of(call)
        if stmt is None or not module.alone(stmt):
            continue
        scaler = _text(inner.func.value)
        line = f'{module.indent(stmt)}torch.save({{"scaler": {scaler}.state_dict()}}, "amp_state.pt")'
        yield stmt.lineno, stmt.end_lineno + 1, f"`{scaler}.state_dict()` saved right after the scaled backward", _insert_lines(module, stmt.end_lineno, [line])


def _cuda_device_sites(module: Module) -> Iterator[Tuple[ast.Call, ast.AST]]:
    for call, target in _device_autocasts(module):
        if _is_cuda_literal(target):
            yield call, target


def op_device_constant(module: Module) -> Iterator[Site]:
    for call, target in _cuda_device_sites(module):
        text = replace_node(module, target, "AMP_DEVICE")
        at = _after_imports(module)
        lines = text.splitlines(keepends=True)
        lines[at:at] = ["\n", 'AMP_DEVICE = "cuda:0"\n']
        yield call.lineno, call.lineno + 2, 'autocast device "cuda" -> a module constant `AMP_DEVICE = "cuda:0"`', "".join(lines)


def op_device_helper(module: Module) -> Iterator[Site]:
    for call, target in _cuda_device_sites(module):
        text = replace_node(module, target, "amp_device()")
        at = _after_imports(module)
        lines = text.splitlines(keepends=True)
        lines[at:at] = ["\n", "\n", "def amp_device():\n", '    return "cuda:0"\n', "\n"]
        yield call.lineno, call.lineno + 5, 'autocast device "cuda" -> a helper `amp_device()` returning "cuda:0"', "".join(lines)


def op_device_kwargs(module: Module) -> Iterator[Site]:
    for call, target in _cuda_device_sites(module):
        if not call.args or call.args[0] is not target:
            continue
        rest = [_text(a) for a in call.args[1:]] + [f"{k.arg}={_text(k.value)}" if k.arg else f"**{_text(k.value)}" for k in call.keywords]
        new = _text(call.func) + "(" + ", ".join(['**{"device_type": "cuda:0"}'] + rest) + ")"
        yield call.lineno, call.lineno, f"autocast's device through a kwargs dict: `{new}`", replace_node(module, call, new)


def op_bce_in_helper(module: Module) -> Iterator[Site]:
    """A module-level helper that computes a binary cross-entropy, called as the last statement of a cuda
    autocast block (F.binary_cross_entropy raises under CUDA autocast)."""
    if not _imports_torch(module):
        return
    for node in ast.walk(module.tree):
        if not isinstance(node, (ast.With, ast.AsyncWith)) or node not in module.block or not module.alone(node):
            continue
        cuda = any(isinstance(i.context_expr, ast.Call) and i.context_expr in {c for c, _ in _cuda_device_sites(module)} for i in node.items)
        if not cuda or not module.alone(node.body[-1]) or module.function_of(node) is None:
            continue
        last = node.body[-1]
        call_line = f"{module.indent(last)}aux_bce = bce_term(torch.rand(8, device=\"cuda\"))"
        text = _insert_lines(module, last.end_lineno, [call_line])
        lines = text.splitlines(keepends=True)
        helper = ["\n", "\n", "def bce_term(scores):\n",
                  "    return torch.nn.functional.binary_cross_entropy(scores.sigmoid(), torch.ones_like(scores))\n"]
        lines.extend(["\n"] if lines and not lines[-1].endswith("\n") else [])
        lines.extend(helper)
        yield last.end_lineno + 1, last.end_lineno + 1, f"a BCE helper called in the autocast block of line {node.lineno}", "".join(lines)


def op_deprecated_reference(module: Module) -> Iterator[Site]:
    if not _imports_torch(module) or not any(True for _ in _device_autocasts(module)):
        return
    at = _after_imports(module)
    if not at:
        return
    yield at, at + 2, "`torch.cuda.amp.autocast` referenced without a call at module level", _insert_lines(module, at, ["", "AMP_CONTEXT = torch.cuda.amp.autocast"])


OPERATORS_MORE: Dict[str, Callable[[Module], Iterator[Site]]] = {
    "scaler_in_loop": op_scaler_in_loop,
    "scaler_device_cpu": op_scaler_device_cpu,
    "bf16_with_scaler": op_bf16_with_scaler,
    "float32_autocast": op_float32_autocast,
    "nonfinite_clip": op_nonfinite_clip,
    "scaled_loss_logged": op_scaled_loss_logged,
    "grad_norm_before_unscale": op_grad_norm_before_unscale,
    "invalid_growth_factor": op_invalid_growth_factor,
    "state_mid_iteration": op_state_mid_iteration,
    "device_constant": op_device_constant,
    "device_helper": op_device_helper,
    "device_kwargs": op_device_kwargs,
    "bce_in_helper": op_bce_in_helper,
    "deprecated_reference": op_deprecated_reference,
}
