"""Operators for the default rules that bench/inject_ops.py and bench/inject_ops_more.py leave without one (issue 46):
the scaler, the step, accumulation, casts and regions. bench/inject_ops_frameworks.py has the rest (custom_fwd /
custom_bwd, deprecated spellings, frameworks). Each finds real sites in correct AMP code and injects one mistake
that its rule's docs (`amp-lint rule AMPxxx`, `shared/amp-reference/rules.md`) describe; standard library only.

    scaler_removed         the module's GradScaler taken out of a float16 autocast loop (built, scale, unscale_,
                           step, update: a plain backward and optimizer.step())                    AMP010
    scaler_disabled        the GradScaler of a float16 autocast loop built with enabled=False      AMP010
    bf16_default_dtype     a CUDA autocast with no dtype (float16) given dtype=torch.bfloat16 where a scaler steps
                                                                                                   AMP012
    closure_to_step        scaler.step(opt) handed a closure (positional or closure=)              AMP025
    penalty_unscaled       a gradient penalty from autograd.grad(create_graph=True) added to the scaled loss, on
                           the scaled loss with its gradients never unscaled, or on the unscaled loss   AMP032
    step_every_microbatch  scaler.step (with its own guard) moved out of the accumulation boundary   AMP040
    unscale_every_microbatch  scaler.unscale_ (with its own guard) moved out of the boundary       AMP041
    zero_grad_every_microbatch  the boundary's zero_grad moved before the boundary (after the backward)  AMP043
    half_model             M.half() before an optimizer built from M.parameters() that a scaler steps   AMP050
    nested_other_device    the last statement of a CUDA autocast block put under autocast("cpu", enabled=False)
                                                                                                   AMP053
    autocast_on_tensor     `with autocast(...): x = f(...)` -> `x = autocast(...)(f(...))`         AMP056

AMP034 and AMP095 are preview rules (not default). AMP077 (apex) has no operator: the rule is silent by design
wherever torch's GradScaler or autocast also runs, so a mutant would have to rewrite a file's whole recipe.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from inject_ops import (
    Module,
    Site,
    _aliases,
    _method,
    _move_before,
    _resolved,
    _scaled_backwards,
    _stmt_calls,
    _text,
    replace_node,
)
from inject_ops_more import _has_scaler_step, _insert_lines, _loop_of

EXPECTED_MORE: Dict[str, Tuple[str, ...]] = {
    "scaler_removed": ("AMP010",),
    "scaler_disabled": ("AMP010",),
    "bf16_default_dtype": ("AMP012",),
    "closure_to_step": ("AMP025",),
    "penalty_unscaled": ("AMP032",),
    "step_every_microbatch": ("AMP040",),
    "unscale_every_microbatch": ("AMP041",),
    "zero_grad_every_microbatch": ("AMP043",),
    "half_model": ("AMP050",),
    "nested_other_device": ("AMP053",),
    "autocast_on_tensor": ("AMP056",),
    "scaler_state_not_restored": ("AMP080",),
}
PRINCIPLE_MORE = {op: 6 for op in EXPECTED_MORE}
PRINCIPLE_MORE.update({"closure_to_step": 1, "penalty_unscaled": 1, "step_every_microbatch": 1, "unscale_every_microbatch": 1,
                       "zero_grad_every_microbatch": 1, "autocast_on_tensor": 4, "scaler_state_not_restored": 2})
# AMP050 reports where the file shows the cast and the step, not always in the optimizer's function.
WHOLE_FILE_MORE = ("half_model", "scaler_state_not_restored")
# Their fix is not the original: AMP010/025/032/050/056/093 have no fix; the accumulation fixes move the
# statement to its place in the boundary, not necessarily where the author had it.
MANY_ANSWERS_MORE = ("scaler_removed", "scaler_disabled", "bf16_default_dtype", "closure_to_step", "penalty_unscaled",
                     "step_every_microbatch", "unscale_every_microbatch", "zero_grad_every_microbatch", "half_model",
                     "autocast_on_tensor", "scaler_state_not_restored")

_AUTOCASTS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast", "torch.cuda.amp.autocast",
              "torch.cuda.amp.autocast_mode.autocast", "torch.cpu.amp.autocast"}


# --- helpers -----------------------------------------------------------------------------------------


def _nodes(module: Module, kind) -> list:
    """The module's nodes of one kind (the walk made once per module: big files are walked by every operator)."""
    if not hasattr(module, "_all_nodes"):
        module._all_nodes = list(ast.walk(module.tree))  # type: ignore[attr-defined]
    return [n for n in module._all_nodes if isinstance(n, kind)]  # type: ignore[attr-defined]


def _alias_map(module: Module) -> Dict[str, str]:
    if not hasattr(module, "_alias_map"):
        module._alias_map = _aliases(module.tree)  # type: ignore[attr-defined]
    return module._alias_map  # type: ignore[attr-defined]


def _imports_torch(module: Module) -> bool:
    return _alias_map(module).get("torch") == "torch"


def _args_text(call: ast.Call, skip=()) -> List[str]:
    out = [_text(a) for a in call.args]
    out += [f"{k.arg}={_text(k.value)}" if k.arg else f"**{_text(k.value)}" for k in call.keywords if k.arg not in skip]
    return out


def _keyword(call: ast.Call, name: str) -> Optional[ast.AST]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_fp16_autocast(call: ast.Call, aliases) -> bool:
    """A torch autocast whose dtype is proven float16: explicit, or CUDA's default."""
    name = _resolved(call.func, aliases)
    if name not in _AUTOCASTS:
        return False
    dtype = _keyword(call, "dtype")
    if dtype is not None:
        return _text(dtype) in ("torch.float16", "torch.half")
    if name.startswith("torch.cuda.amp."):
        return len(call.args) < 2  # torch.cuda.amp.autocast(enabled, dtype, ...): a positional dtype is not read here
    device = _keyword(call, "device_type") or (call.args[0] if call.args else None)
    return isinstance(device, ast.Constant) and device.value == "cuda" and len(call.args) < 2


def _fp16_functions(module: Module) -> set:
    aliases = _alias_map(module)
    return {module.function_of(c) for c in module.calls() if _is_fp16_autocast(c, aliases) and module.function_of(c) is not None}


def _in_fallback(module: Module, node: ast.AST) -> bool:
    """Inside a try/except or under an `if` that tests a version or an attribute: a shim the rules leave alone."""
    parent = module.parent.get(node)
    while parent is not None:
        if isinstance(parent, (ast.Try, ast.ExceptHandler)) or getattr(ast, "TryStar", None) and isinstance(parent, ast.TryStar):
            return True
        if isinstance(parent, ast.If) and re.search(r"version|hasattr|TORCH_|_available|>=|<", _text(parent.test)):
            return True
        parent = module.parent.get(parent)
    return False


def _edit(module: Module, edits: Dict[ast.stmt, Optional[List[str]]]) -> str:
    """The module's text with statements replaced (a list of lines) or deleted (None); a block left empty
    gets a `pass`."""
    lines = list(module.lines)
    deleted = {s for s, new in edits.items() if new is None}
    for stmt in sorted(edits, key=lambda s: -s.lineno):
        new = edits[stmt]
        if new is None:
            body, _ = module.block[stmt]
            first_live = next((s for s in body if s not in deleted), None)
            new = [f"{module.indent(stmt)}pass"] if first_live is None and stmt is body[0] else []
        lines[stmt.lineno - 1 : stmt.end_lineno] = [line + "\n" for line in new]
    return "".join(lines)


def _expr_stmt(module: Module, call: ast.Call) -> Optional[ast.stmt]:
    stmt = module.statement_of(call)
    return stmt if isinstance(stmt, ast.Expr) and stmt.value is call and module.alone(stmt) else None


# --- AMP010, AMP012: the scaler and the dtype ------------------------------------------------------------


def scaler_removal(module: Module, name: str):
    """The statements that use the scaler `name` in the module: (deleted: its builds, `update()`s and
    `unscale_`s; backwards: [(statement, loss text, backward call)] of `name.scale(loss).backward()`; steps:
    [(statement, optimizer text)] of `name.step(opt)`), or None when some use is no statement of its own."""
    deleted, backwards, steps = [], [], []
    for node in _nodes(module, (ast.Name, ast.Attribute)):
        if _text(node) != name:
            continue
        parent = module.parent.get(node)
        if isinstance(parent, ast.Assign) and parent.targets == [node] and isinstance(parent.value, ast.Call) and _text(parent.value.func).split(".")[-1].endswith("GradScaler") and module.alone(parent):
            deleted.append(parent)
            continue
        call = module.parent.get(parent) if isinstance(parent, ast.Attribute) and parent.value is node else None
        if not isinstance(call, ast.Call) or call.func is not parent:
            return None
        outer = module.parent.get(call)
        stmt = _expr_stmt(module, call)
        if parent.attr == "scale" and len(call.args) == 1 and isinstance(outer, ast.Attribute) and outer.attr == "backward":
            backward = module.parent.get(outer)
            stmt = _expr_stmt(module, backward) if isinstance(backward, ast.Call) else None
            if stmt is None:
                return None
            loss = _text(call.args[0]) if isinstance(call.args[0], (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) else f"({_text(call.args[0])})"
            backwards.append((stmt, loss, backward))
        elif parent.attr in ("update", "unscale_") and stmt is not None:
            deleted.append(stmt)
        elif parent.attr == "step" and len(call.args) == 1 and not call.keywords and stmt is not None:
            opt = call.args[0]
            steps.append((stmt, _text(opt) if isinstance(opt, (ast.Name, ast.Attribute, ast.Subscript)) else f"({_text(opt)})"))
        else:
            return None
    return deleted, backwards, steps


def op_scaler_removed(module: Module) -> Iterator[Site]:
    """Every use of one scaler in the module rewritten as if it had never been there: only where each use is a
    statement of its own (built, scale(loss).backward(), unscale_, step, update), and a scaled backward sits
    in a function with a float16 autocast."""
    if "autocast" not in module.text:
        return
    fp16 = _fp16_functions(module)
    for name in sorted(module.scalers):
        found = scaler_removal(module, name)
        site = next((s for s, _, _ in found[1] if module.function_of(s) in fp16), None) if found else None
        if site is None:
            continue
        deleted, backwards, steps = found
        edits: Dict[ast.stmt, Optional[List[str]]] = {s: None for s in deleted}
        edits.update({s: [f"{module.indent(s)}{loss}.backward({', '.join(_args_text(call))})"] for s, loss, call in backwards})
        edits.update({s: [f"{module.indent(s)}{opt}.step()"] for s, opt in steps})
        yield site.lineno, site.lineno, f"the GradScaler `{name}` taken out of the module (a plain backward and step)", _edit(module, edits)


def _scaler_builds(module: Module) -> Iterator[Tuple[ast.Assign, ast.Call]]:
    if "GradScaler" not in module.text or "autocast" not in module.text:
        return
    for node in _nodes(module, ast.Assign):
        if len(node.targets) == 1 and isinstance(node.value, ast.Call):
            if _text(node.value.func).split(".")[-1] == "GradScaler":
                yield node, node.value


def op_scaler_disabled(module: Module) -> Iterator[Site]:
    fp16 = _fp16_functions(module)
    for assign, call in _scaler_builds(module):
        if any(k.arg in ("enabled", None) for k in call.keywords) or len(call.args) > 1:
            continue
        name = _text(assign.targets[0])
        backs = [c for c, inner in _scaled_backwards(module) if _text(inner.func.value) == name and module.function_of(c) in fp16]
        if backs:
            new = f"{_text(call.func)}({', '.join(_args_text(call) + ['enabled=False'])})"
            yield backs[0].lineno, backs[0].lineno, f"`{_text(call)}` -> `{new}` (a float16 autocast trains through it)", replace_node(module, call, new)


def op_bf16_default_dtype(module: Module) -> Iterator[Site]:
    if not module.scalers or "autocast" not in module.text or not _imports_torch(module):
        return
    aliases = _alias_map(module)
    for call in module.calls():
        if _keyword(call, "dtype") is not None or not _is_fp16_autocast(call, aliases) or any(k.arg is None for k in call.keywords):
            continue
        if not _has_scaler_step(module, module.function_of(call)):
            continue
        new = f"{_text(call.func)}({', '.join(_args_text(call) + ['dtype=torch.bfloat16'])})"
        yield call.lineno, call.lineno, f"`{_text(call)}` (float16) -> `{new}` beside the scaler", replace_node(module, call, new)


# --- AMP025, AMP032: the step and the penalty --------------------------------------------------------------


def _loss_before(module: Module, stmt: ast.stmt) -> Optional[str]:
    function = module.function_of(stmt)
    found = [inner.args[0] for c, inner in _scaled_backwards(module) if module.function_of(c) is function and c.lineno < stmt.lineno]
    return _text(found[-1]) if found else None


def op_closure_to_step(module: Module) -> Iterator[Site]:
    count = 0
    for call, stmt in _stmt_calls(module, "step"):
        loss = _loss_before(module, stmt)
        if len(call.args) != 1 or call.keywords or loss is None:
            continue
        indent = module.indent(stmt)
        closure = [f"{indent}def amp_closure():", f"{indent}    return {loss}"]
        new = f"{_text(call.func)}({_text(call.args[0])}, {'closure=' if count % 2 else ''}amp_closure)"
        count += 1
        text = _edit(module, {stmt: closure + [indent + new]})
        yield stmt.lineno, stmt.lineno + 2, f"`{_text(call)}` -> `{new}`", text


def op_penalty_unscaled(module: Module) -> Iterator[Site]:
    """A gradient penalty over the stepped optimizer's parameters, from `torch.autograd.grad(...,
    create_graph=True)`, added to the loss that is scaled and backpropagated: computed on the scaled loss and
    used without dividing by the scale (every other site), or computed on the unscaled loss."""
    if not _imports_torch(module):
        return
    count = 0
    for call, inner in _scaled_backwards(module):
        stmt = _expr_stmt(module, call)
        if stmt is None or call.args or call.keywords:
            continue
        scaler = _text(inner.func.value)
        function = module.function_of(stmt)
        opts = [c.args[0] for c in module.calls() if _method(c) == "step" and _text(getattr(c.func, "value", None) or c.func) == scaler
                and len(c.args) == 1 and module.function_of(c) is function and c.lineno > stmt.lineno]
        if not opts:
            continue
        loss, opt = _text(inner.args[0]), _text(opts[0])
        outputs = f"{scaler}.scale({loss})" if count % 2 == 0 else loss
        count += 1
        indent = module.indent(stmt)
        new = [
            f'{indent}penalty_params = [p for g in {opt}.param_groups for p in g["params"] if p.requires_grad]',
            f"{indent}penalty_grads = torch.autograd.grad({outputs}, penalty_params, create_graph=True, allow_unused=True)",
            f"{indent}penalty = sum(g.pow(2).sum() for g in penalty_grads if g is not None)",
            f"{indent}{scaler}.scale(({loss}) + penalty).backward()",
        ]
        how = "the scaled loss, never unscaled" if outputs != loss else "the unscaled loss"
        yield stmt.lineno, stmt.lineno + 3, f"a gradient penalty from autograd.grad on {how} added before the backward", _edit(module, {stmt: new})


# --- AMP040, AMP041, AMP043: accumulation boundaries -----------------------------------------------------


def _boundary_of(module: Module, node: ast.AST) -> Optional[ast.If]:
    """The accumulation boundary `if` around `node` (a modulo, or a name that says accumulation) in the same
    function, inside a loop whose scaled backward comes before it."""
    parent = module.parent.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, ast.If) and re.search(r"%|accum", _text(parent.test), re.I) and parent in module.block:
            loop = _loop_of(module, parent)
            if loop is not None and any(c.lineno < parent.lineno and _loop_of(module, c) is not None and _inside(module, c, loop)
                                        for c, _ in _scaled_backwards(module)):
                return parent
        parent = module.parent.get(parent)
    return None


def _inside(module: Module, node: ast.AST, outer: ast.AST) -> bool:
    while node is not None:
        if node is outer:
            return True
        node = module.parent.get(node)
    return False


def _top_in(module: Module, boundary: ast.If, stmt: ast.stmt) -> Optional[ast.stmt]:
    """The statement of the boundary's body that holds `stmt`, when it is `stmt` itself or a small guard
    (`if fp16: scaler.step(opt); scaler.update()`, `else: optimizer.step()`)."""
    top = stmt
    while top is not None and module.block.get(top, (None,))[0] is not boundary.body:
        top = module.statement_of(module.parent.get(top))
    if top is None or not module.alone(top):
        return None
    if top is stmt:
        return top
    small = isinstance(top, ast.If) and len(top.body) + len(top.orelse) <= 4
    return top if small and all(isinstance(s, ast.Expr) for s in top.body + top.orelse) else None


def _move_out(module: Module, method: str, label: str) -> Iterator[Site]:
    for call, stmt in _stmt_calls(module, method):
        boundary = _boundary_of(module, stmt)
        top = _top_in(module, boundary, stmt) if boundary is not None else None
        if top is None or not module.alone(boundary):
            continue
        what = f"`{_text(call)}`" + (" with its guard" if top is not stmt else "")
        yield stmt.lineno, boundary.lineno, f"{what} moved before the accumulation boundary of line {boundary.lineno} ({label})", _move_before(module, top, boundary)


def op_step_every_microbatch(module: Module) -> Iterator[Site]:
    yield from _move_out(module, "step", "a step every micro-batch")


def op_unscale_every_microbatch(module: Module) -> Iterator[Site]:
    yield from _move_out(module, "unscale_", "an unscale_ every micro-batch")


def op_zero_grad_every_microbatch(module: Module) -> Iterator[Site]:
    for call in module.calls():
        stmt = _expr_stmt(module, call) if _method(call) == "zero_grad" else None
        boundary = _boundary_of(module, stmt) if stmt is not None else None
        if boundary is None or not module.alone(boundary):
            continue
        steps = [c for c in module.calls() if _method(c) in ("step", "unscale_") and module.is_scaler(c) and _inside(module, c, boundary) and c.lineno < stmt.lineno]
        top = _top_in(module, boundary, stmt)
        if steps and top is not None:
            yield stmt.lineno, boundary.lineno, f"`{_text(call)}` moved before the accumulation boundary of line {boundary.lineno} (every micro-batch, between the backward and the step)", _move_before(module, top, boundary)


# --- AMP050, AMP053, AMP056: casts and regions -------------------------------------------------------------


def op_half_model(module: Module) -> Iterator[Site]:
    if not module.scalers or ".parameters()" not in module.text:
        return
    stepped = {_text(c.args[0]) for c in module.calls() if _method(c) in ("step", "unscale_") and module.is_scaler(c) and len(c.args) == 1}
    for node in _nodes(module, ast.Assign):
        if not (len(node.targets) == 1 and isinstance(node.value, ast.Call)) or node not in module.block:
            continue
        if _text(node.targets[0]) not in stepped or not module.alone(node):
            continue
        params = [c for a in node.value.args[:1] + [k.value for k in node.value.keywords if k.arg == "params"] for c in ast.walk(a)
                  if isinstance(c, ast.Call) and _method(c) == "parameters" and not c.args]
        if params:
            model = _text(params[0].func.value)
            yield node.lineno, node.lineno + 1, f"`{model}.half()` before the optimizer `{_text(node.targets[0])}` built from its parameters", _insert_lines(module, node.lineno - 1, [f"{module.indent(node)}{model}.half()"])


def _autocast_withs(module: Module, cuda_only: bool) -> Iterator[ast.With]:
    if "autocast" not in module.text:
        return
    aliases = _alias_map(module)
    for node in _nodes(module, ast.With):
        if len(node.items) != 1 or node not in module.block or not module.alone(node):
            continue
        call = node.items[0].context_expr
        if not isinstance(call, ast.Call) or _resolved(call.func, aliases) not in _AUTOCASTS:
            continue
        device = _keyword(call, "device_type") or (call.args[0] if call.args and not _resolved(call.func, aliases).startswith("torch.cuda") else None)
        cuda = _resolved(call.func, aliases).startswith("torch.cuda") or isinstance(device, ast.Constant) and device.value == "cuda"
        if cuda or not cuda_only:
            yield node


def op_nested_other_device(module: Module) -> Iterator[Site]:
    """The last statement of a CUDA autocast block, an assignment, run under `autocast("cpu", enabled=False)`:
    meant as a float32 island, it disables nothing on CUDA."""
    if not _imports_torch(module):
        return
    for node in _autocast_withs(module, cuda_only=True):
        call = node.items[0].context_expr
        enabled = _keyword(call, "enabled") or (call.args[0] if call.args and _text(call.func).split(".")[-1] == "autocast" and "cuda" in _resolved(call.func, _alias_map(module)) else None)
        if isinstance(enabled, ast.Constant) and not enabled.value:
            continue  # an outer region that is itself off: nothing to disable
        last = node.body[-1]
        if not isinstance(last, ast.Assign) or not module.alone(last):
            continue
        indent = module.indent(last)
        piece = [f'{indent}with torch.autocast("cpu", enabled=False):'] + ["    " + line.rstrip("\n") for line in module.stmt_lines(last)]
        yield last.lineno, last.lineno + 1, f"line {last.lineno} put under `torch.autocast(\"cpu\", enabled=False)` inside the CUDA autocast of line {node.lineno}", _edit(module, {last: piece})


def op_autocast_on_tensor(module: Module) -> Iterator[Site]:
    for node in _autocast_withs(module, cuda_only=False):
        if len(node.body) != 1 or node.items[0].optional_vars is not None:
            continue
        only = node.body[0]
        if not (isinstance(only, ast.Assign) and only.lineno == only.end_lineno) or isinstance(only.value, (ast.Name, ast.Attribute, ast.Lambda)):
            continue
        targets = " = ".join(_text(t) for t in only.targets)
        new = f"{module.indent(node)}{targets} = {_text(node.items[0].context_expr)}({_text(only.value)})"
        yield node.lineno, node.lineno, f"`with {_text(node.items[0].context_expr)}: {targets} = ...` -> the autocast called on the value", _edit(module, {node: [new]})


# --- AMP080: the scaler's state on resume ------------------------------------------------------------------


def op_scaler_state_not_restored(module: Module) -> Iterator[Site]:
    """`S.load_state_dict(...)` deleted where the file also restores an optimizer's state: the resumed run
    restarts the loss scale (AMP080 reports the optimizer's restore)."""
    if "load_state_dict" not in module.text:
        return
    restores = [c for c in module.calls() if _method(c) == "load_state_dict"]
    if not any(not module.is_scaler(c) and "optim" in _text(c.func.value).lower() for c in restores):
        return
    for call, stmt in _stmt_calls(module, "load_state_dict"):
        yield stmt.lineno, stmt.lineno, f"deleted `{_text(call)}` (the optimizer's state is still restored)", _edit(module, {stmt: None})


OPERATORS_MORE: Dict[str, Callable[[Module], Iterator[Site]]] = {
    name: globals()[f"op_{name}"] for name in EXPECTED_MORE
}
