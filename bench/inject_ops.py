"""Mutation operators of bench/inject.py: find real sites in correct AMP code, inject one documented mistake.

Standard library only (`ast` and text offsets), so the benchmark measures any amp-lint checkout without
importing it. Each operator finds its sites in one module and returns one mutant per site; a mutant that
does not parse is dropped. The rule catalog (`shared/amp-reference/rules.md`) names the mistakes:

    update_dropped        scaler.update() deleted                                 AMP021
    update_doubled        scaler.update() written twice                           AMP023
    update_before_step    scaler.update() moved to just before scaler.step(opt)   AMP022
    unscale_dropped       scaler.unscale_(opt) deleted before a clip              AMP030
    unscale_doubled       scaler.unscale_(opt) written twice                      AMP024
    step_direct           scaler.step(opt) -> opt.step()                          AMP020 (or AMP022)
    zero_grad_between     opt.zero_grad() moved (or added) after the scaled backward, before the step   AMP043
    backward_in_autocast  the backward statement after an autocast block (and what is between) moved into it  AMP001
    unscaled_backward     scaler.scale(loss).backward() -> loss.backward()        AMP011
    indexed_device        autocast's device "cuda" (or a name) -> "cuda:0" / f"cuda:{torch.cuda.current_device()}",
                          X.type -> str(X)                                         AMP075

Detection counts every mutant. Each mutant also says whether its fix has one right answer, the original
(`Mutant.one_answer`): the fix-back floor of issue 27 (97% restored) is measured on those. A mutant has more
than one right fix when the operator also moved or renamed what the author chose freely: an `unscale_`
deleted before an `if` that holds the clip (before the `if` and inside it are both right), forward work moved
into autocast with the backward (whether `loss = ...` runs under autocast is the author's choice), a device
name turned into `"cuda:0"` (its fix is `"cuda"`, not the name that was there).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

EXPECTED: Dict[str, Tuple[str, ...]] = {
    "update_dropped": ("AMP021",),
    "update_doubled": ("AMP023",),
    "update_before_step": ("AMP022",),
    "unscale_dropped": ("AMP030",),
    "unscale_doubled": ("AMP024",),
    "step_direct": ("AMP020", "AMP022"),  # AMP022: the update() after it has no step before it
    "zero_grad_between": ("AMP043",),
    "backward_in_autocast": ("AMP001",),
    "unscaled_backward": ("AMP011",),
    "indexed_device": ("AMP075",),
}
# Operators whose mistake has more than one right fix by its nature: an update moved before the step may go
# back right after the step or where it was; a zero_grad moved between backward and step may go after the step
# or before the backward. Their mutants are never `one_answer`.
MANY_ANSWERS = ("update_before_step", "zero_grad_between")
# Operators whose expected finding may be anywhere in the mutated file (bench/inject_ops_more.py).
WHOLE_FILE: Tuple[str, ...] = ()

# The principle of issue 26 a miss of each operator most likely breaks (1: one protocol with the gradients'
# state; 2: an iteration is not only a loop body; 3: open world; 4: values followed everywhere). The report
# names the evidence of each miss too (its function and what it calls); this is the starting guess.
PRINCIPLE = {
    "update_dropped": 3, "update_doubled": 1, "update_before_step": 1, "unscale_dropped": 3,
    "unscale_doubled": 1, "step_direct": 1, "zero_grad_between": 1, "backward_in_autocast": 2,
    "unscaled_backward": 4, "indexed_device": 4,
}


@dataclass
class Mutant:
    operator: str
    file: str  # relative to the project root
    line: int  # the site in the original (1-based)
    mutant_line: int  # the site in the mutant
    function: str  # qualified name of the enclosing function ("" at module level)
    description: str
    text: str  # the mutated module
    one_answer: bool = True  # the one right fix is the original (see the module's docstring)

    @property
    def expected(self) -> Tuple[str, ...]:
        return EXPECTED[self.operator]


# --- reading the module ------------------------------------------------------------------------------


def own_scaler_classes(texts: Sequence[str]) -> frozenset:
    """Classes a project defines that are named like a scaler (`...Scaler`) and derive from no scaler: thinc's
    `PyTorchGradScaler`, with its own `unscale(grads)` and no `step()`. They are not torch's GradScaler, whose
    protocol the operators mutate (the catalog's mistakes are torch's), so their calls are no sites. A subclass
    of torch's (`class S(GradScaler)`) or a wrapper that holds one (timm's `NativeScaler`, whose sites are its
    `self._scaler` calls) is not left out."""
    found = set()
    for text in texts:
        if "Scaler" not in text:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith("GradScaler"):
                if not any(_text(b).split(".")[-1].endswith("Scaler") for b in node.bases):
                    found.add(node.name)
    return frozenset(found)


class Module:
    def __init__(self, text: str, foreign: frozenset = frozenset()) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.tree = ast.parse(text)
        self.parent: Dict[ast.AST, ast.AST] = {}
        self.block: Dict[ast.stmt, Tuple[List[ast.stmt], int]] = {}  # statement -> (its body list, index)
        self.qualname: Dict[ast.AST, str] = {}
        self._calls: List[ast.Call] = []
        self._index(self.tree, "")
        self._calls.sort(key=lambda c: (c.lineno, c.col_offset))
        # A scaler: what `unscale_` is called on, what scales a loss that is then backpropagated, what is
        # built by a `...GradScaler(...)` call, or a name that says so (`self.scaler`, `loss_scaler`).
        # Not any `.scale(...)` receiver: boxes and images have `.scale` methods too.
        scalers = {_text(c.func.value) for c in self.calls() if _method(c) == "unscale_"}
        scalers |= {
            _text(c.func.value.func.value) for c in self.calls()
            if _method(c) == "backward" and isinstance(c.func.value, ast.Call) and _method(c.func.value) == "scale"
        }
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                callee = _text(node.value.func).split(".")[-1]
                if callee.endswith("GradScaler"):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    scalers |= {_text(t) for t in targets}
        scalers |= {
            _text(c.func.value) for c in self.calls()
            if isinstance(c.func, ast.Attribute) and "scaler" in _text(c.func.value).split(".")[-1].lower()
        }
        self.foreign = _built_from(self.tree, foreign) if foreign else set()
        self.scalers = {s for s in scalers if s and s not in self.foreign}

    def _index(self, node: ast.AST, prefix: str) -> None:
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                for i, stmt in enumerate(body):
                    if isinstance(stmt, ast.stmt):
                        self.block[stmt] = (body, i)
        for handler in getattr(node, "handlers", []) or []:
            for i, stmt in enumerate(handler.body):
                self.block[stmt] = (handler.body, i)
        for case in getattr(node, "cases", []) or []:
            for i, stmt in enumerate(case.body):
                self.block[stmt] = (case.body, i)
        for child in ast.iter_child_nodes(node):
            self.parent[child] = node
            if isinstance(child, ast.Call):
                self._calls.append(child)
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                self.qualname[child] = name
            self._index(child, name)

    def calls(self) -> List[ast.Call]:
        return self._calls

    def statement_of(self, node: ast.AST) -> Optional[ast.stmt]:
        while node is not None and not (isinstance(node, ast.stmt) and node in self.block):
            node = self.parent.get(node)
        return node

    def function_of(self, node: ast.AST) -> Optional[ast.AST]:
        node = self.parent.get(node)
        while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node = self.parent.get(node)
        return node

    def function_name(self, node: ast.AST) -> str:
        function = self.function_of(node)
        return self.qualname.get(function, "") if function is not None else ""

    def is_scaler(self, call: ast.Call) -> bool:
        return isinstance(call.func, ast.Attribute) and _text(call.func.value) in self.scalers

    def alone(self, stmt: ast.stmt) -> bool:
        """The statement has its lines to itself (no `a; b`, no `if x: a`)."""
        body, _ = self.block[stmt]
        if self.lines[stmt.lineno - 1][: _char_col(self.lines[stmt.lineno - 1], stmt.col_offset)].strip():
            return False
        return not any(s is not stmt and s.lineno <= stmt.end_lineno and s.end_lineno >= stmt.lineno for s in body)

    def stmt_lines(self, stmt: ast.stmt) -> List[str]:
        return self.lines[stmt.lineno - 1 : stmt.end_lineno]

    def indent(self, stmt: ast.stmt) -> str:
        line = self.lines[stmt.lineno - 1]
        return line[: len(line) - len(line.lstrip())]


def _built_from(tree: ast.Module, classes: frozenset) -> set:
    """Names and attributes of the module that some assignment (or a parameter's annotation) gives an instance
    of one of `classes`, directly or through another such name: `self._grad_scaler = grad_scaler` after
    `grad_scaler = PyTorchGradScaler(...)`."""
    assigned: Dict[str, List[ast.AST]] = {}
    built = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                assigned.setdefault(_text(target), []).append(node.value)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            if any(isinstance(n, ast.Name) and n.id in classes for n in ast.walk(node.annotation)):
                built.add(node.arg)
    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            if name in built:
                continue
            for value in values:
                parts = [n for n in ast.walk(value) if isinstance(n, (ast.Call, ast.Name, ast.Attribute))]
                if any(isinstance(n, ast.Call) and _text(n.func).split(".")[-1] in classes for n in parts) or any(
                    isinstance(n, (ast.Name, ast.Attribute)) and _text(n) in built for n in parts
                ):
                    built.add(name)
                    changed = True
                    break
    return built


def _text(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse of odd nodes
        return ""


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _reindent(lines: Sequence[str], old: str, new: str) -> List[str]:
    out = []
    for line in lines:
        if line.startswith(old):
            out.append(new + line[len(old) :])
        else:
            out.append(line)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    return out


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


def replace_node(module: Module, node: ast.AST, new: str) -> str:
    """The module's text with `node`'s source span replaced by `new`."""
    lines = list(module.lines)
    start, end = node.lineno - 1, node.end_lineno - 1
    a = _char_col(lines[start], node.col_offset)
    b = _char_col(lines[end], node.end_col_offset)
    lines[start : end + 1] = [lines[start][:a] + new + lines[end][b:]]
    return "".join(lines)


def remove_stmt(module: Module, stmt: ast.stmt) -> List[str]:
    """The module's lines without `stmt` (a `pass` where it was the block's only statement)."""
    lines = list(module.lines)
    body, _ = module.block[stmt]
    keep = ["%spass\n" % module.indent(stmt)] if len(body) == 1 else []
    lines[stmt.lineno - 1 : stmt.end_lineno] = keep
    return lines


# --- operators ---------------------------------------------------------------------------------------

Site = Tuple  # (original line, mutant line, description, mutated text[, one answer: bool, default True])


def _stmt_calls(module: Module, method: str) -> Iterator[Tuple[ast.Call, ast.stmt]]:
    """Scaler calls `R.method(...)` that are a whole statement of their own (an expression statement)."""
    for call in module.calls():
        if _method(call) == method and module.is_scaler(call):
            stmt = module.statement_of(call)
            if isinstance(stmt, ast.Expr) and stmt.value is call and module.alone(stmt):
                yield call, stmt


def op_update_dropped(module: Module) -> Iterator[Site]:
    for call, stmt in _stmt_calls(module, "update"):
        yield stmt.lineno, stmt.lineno, f"deleted `{_text(call)}`", "".join(remove_stmt(module, stmt))


def op_update_doubled(module: Module) -> Iterator[Site]:
    for call, stmt in _stmt_calls(module, "update"):
        lines = list(module.lines)
        lines[stmt.end_lineno : stmt.end_lineno] = _reindent(module.stmt_lines(stmt), "", "")
        yield stmt.lineno, stmt.end_lineno + 1, f"`{_text(call)}` written twice", "".join(lines)


def _move_before(module: Module, moved: ast.stmt, anchor: ast.stmt) -> str:
    piece = _reindent(module.stmt_lines(moved), module.indent(moved), module.indent(anchor))
    lines = remove_stmt(module, moved)
    at = anchor.lineno - 1
    if moved.lineno < anchor.lineno:
        at -= moved.end_lineno - moved.lineno + 1 - (1 if len(module.block[moved][0]) == 1 else 0)
    lines[at:at] = piece
    return "".join(lines)


def _move_after(module: Module, moved: ast.stmt, anchor: ast.stmt, indent: Optional[str] = None) -> Tuple[str, int]:
    piece = _reindent(module.stmt_lines(moved), module.indent(moved), module.indent(anchor) if indent is None else indent)
    lines = remove_stmt(module, moved)
    at = anchor.end_lineno
    if moved.lineno < anchor.lineno:
        at -= moved.end_lineno - moved.lineno + 1 - (1 if len(module.block[moved][0]) == 1 else 0)
    lines[at:at] = piece
    return "".join(lines), at + 1


def op_update_before_step(module: Module) -> Iterator[Site]:
    for call, stmt in _stmt_calls(module, "update"):
        function = module.function_of(stmt)
        steps = [
            c for c in module.calls()
            if _method(c) == "step" and module.is_scaler(c) and _text(c.func.value) == _text(call.func.value)
            and module.function_of(c) is function and c.lineno < stmt.lineno
        ]
        if not steps:
            continue
        anchor = module.statement_of(steps[-1])
        if anchor is None or not module.alone(anchor):
            continue
        text = _move_before(module, stmt, anchor)
        yield stmt.lineno, anchor.lineno, f"`{_text(call)}` moved before `{_text(steps[-1])}` (line {anchor.lineno})", text


def _clips_after(module: Module, stmt: ast.stmt) -> List[ast.Call]:
    function = module.function_of(stmt)
    return [
        c for c in module.calls()
        if "clip" in (_method(c) or (c.func.id if isinstance(c.func, ast.Name) else "")).lower()
        and module.function_of(c) is function and c.lineno > stmt.end_lineno
    ]


def op_unscale_dropped(module: Module) -> Iterator[Site]:
    """An `unscale_` with a clip after it in its function, deleted. One answer only where the clip is a later
    statement of the `unscale_`'s own block: one before an `if` that holds the clip (`unscale_(opt)` then
    `if max_norm: clip(...)`) has two right fixes, before the `if` or before the clip inside it."""
    for call, stmt in _stmt_calls(module, "unscale_"):
        clips = _clips_after(module, stmt)
        if not clips:
            continue
        clip_stmt = module.statement_of(clips[0])
        one = clip_stmt is not None and module.block.get(clip_stmt, (None,))[0] is module.block[stmt][0]
        yield stmt.lineno, stmt.lineno, f"deleted `{_text(call)}` before `{_text(clips[0].func)}(...)` (line {clips[0].lineno})", "".join(remove_stmt(module, stmt)), one


def op_unscale_doubled(module: Module) -> Iterator[Site]:
    for call, stmt in _stmt_calls(module, "unscale_"):
        lines = list(module.lines)
        lines[stmt.end_lineno : stmt.end_lineno] = _reindent(module.stmt_lines(stmt), "", "")
        yield stmt.lineno, stmt.end_lineno + 1, f"`{_text(call)}` written twice", "".join(lines)


def op_step_direct(module: Module) -> Iterator[Site]:
    for call in module.calls():
        if _method(call) == "step" and module.is_scaler(call) and call.args and not isinstance(call.args[0], ast.Starred):
            rest = [_text(a) for a in call.args[1:]]
            rest += [f"{k.arg}={_text(k.value)}" if k.arg else f"**{_text(k.value)}" for k in call.keywords]
            receiver = _text(call.args[0])
            if not isinstance(call.args[0], (ast.Name, ast.Attribute, ast.Subscript)):
                receiver = f"({receiver})"
            new = f"{receiver}.step({', '.join(rest)})"
            yield call.lineno, call.lineno, f"`{_text(call)}` -> `{new}`", replace_node(module, call, new)


def _scaled_backwards(module: Module) -> Iterator[Tuple[ast.Call, ast.Call]]:
    """(the backward call, the scale call) of `R.scale(loss).backward(...)`."""
    for call in module.calls():
        if _method(call) == "backward" and isinstance(call.func.value, ast.Call):
            inner = call.func.value
            if _method(inner) == "scale" and module.is_scaler(inner) and len(inner.args) == 1 and not inner.keywords:
                yield call, inner


def op_unscaled_backward(module: Module) -> Iterator[Site]:
    for call, inner in _scaled_backwards(module):
        loss = inner.args[0]
        text = _text(loss)
        if not isinstance(loss, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            text = f"({text})"
        yield call.lineno, call.lineno, f"`{_text(call.func)}` -> `{text}.backward`", replace_node(module, inner, text)


def op_zero_grad_between(module: Module) -> Iterator[Site]:
    for call, _ in _scaled_backwards(module):
        backward = module.statement_of(call)
        if backward is None or not module.alone(backward):
            continue
        function = module.function_of(backward)
        later = [
            c for c in module.calls()
            if _method(c) in ("step", "unscale_") and module.is_scaler(c) and c.args
            and module.function_of(c) is function and c.lineno > backward.end_lineno
        ]
        if not later:
            continue
        zeros = [
            s for c in module.calls() if _method(c) == "zero_grad" and module.function_of(c) is function
            for s in [module.statement_of(c)] if isinstance(s, ast.Expr) and s.value is c and module.alone(s)
        ]
        if zeros:  # the one nearest to the backward (the iteration's own, not one before the epochs)
            zero = min(zeros, key=lambda s: abs(s.lineno - backward.lineno))
            text, at = _move_after(module, zero, backward)
            yield zero.lineno, at, f"`{_text(zero.value)}` moved after the scaled backward (line {backward.lineno})", text
        else:
            lines = list(module.lines)
            added = f"{_text(later[0].args[0])}.zero_grad()"
            lines[backward.end_lineno : backward.end_lineno] = [module.indent(backward) + added + "\n"]
            yield backward.lineno, backward.end_lineno + 1, f"`{added}` added after the scaled backward", "".join(lines)


def _is_autocast(call: ast.AST) -> bool:
    """A call that opens an autocast region, by its name (for the backward operator: any spelling)."""
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "autocast" or name.endswith("_autocast") or name == "autocast_context"


_DEVICE_AUTOCASTS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}


def _aliases(tree: ast.Module) -> Dict[str, str]:
    """Local name -> the dotted name it was imported as (`from torch import amp` -> amp: torch.amp)."""
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[(alias.asname or alias.name).split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _resolved(func: ast.AST, aliases: Dict[str, str]) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in aliases:
        return ""
    return ".".join([aliases[func.id], *reversed(parts)])


def op_backward_in_autocast(module: Module) -> Iterator[Site]:
    """The statement holding the backward after an autocast block, and the statements between the block and
    it, indented into the block. One answer only where the backward directly follows the block (the backward
    written one indent too deep): with forward work between them (`loss = ...`), whether that work runs under
    autocast is the author's choice (autocast's own docs put the loss inside), so the fix moves the backward
    out and leaves the rest where the mutant put it."""
    for node in ast.walk(module.tree):
        if not isinstance(node, (ast.With, ast.AsyncWith)) or node not in module.block:
            continue
        if not any(_is_autocast(item.context_expr) for item in node.items) or not module.alone(node):
            continue
        body, i = module.block[node]
        for j, later in enumerate(body[i + 1 :], i + 1):
            if isinstance(later, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Return)) or not module.alone(later):
                break
            if any(isinstance(c, ast.Call) and _method(c) == "backward" for c in ast.walk(later)):
                outer, inner = module.indent(node), module.indent(node.body[0])
                lines = list(module.lines)
                for n in range(node.end_lineno, later.end_lineno):
                    if lines[n].strip() and lines[n].startswith(outer):
                        lines[n] = inner + lines[n][len(outer) :]
                moved = f"lines {body[i + 1].lineno}-{later.end_lineno}" if j > i + 1 else f"line {later.lineno}"
                yield later.lineno, later.lineno, f"{moved} (the backward) moved into the autocast block of line {node.lineno}", "".join(lines), j == i + 1
                break


def op_indexed_device(module: Module) -> Iterator[Site]:
    """`torch.autocast` / `torch.amp.autocast` (whose first argument is the device type; not
    `torch.cuda.amp.autocast`, whose first argument is `enabled`) given an indexed device where the original
    names the device type: a literal `"cuda"` -> `"cuda:0"` / `f"cuda:{torch.cuda.current_device()}"`, a
    device's type `X.type` -> `str(X)` (the string of a device, `'cuda:0'` for an indexed one), and another
    expression (`device_type`, `self.device`) -> the same indexed literals. The last has no one right fix
    that is the original (the fix of `"cuda:0"` is `"cuda"`, not the name that was there): not one answer."""
    uses_torch = re.search(r"^\s*import torch\b", module.text, re.M) is not None
    aliases = _aliases(module.tree)
    count = 0
    for call in module.calls():
        if _resolved(call.func, aliases) not in _DEVICE_AUTOCASTS:
            continue
        target = next((k.value for k in call.keywords if k.arg == "device_type"), None)
        if target is None and call.args and not isinstance(call.args[0], ast.Starred):
            target = call.args[0]
        if target is None:
            continue
        if isinstance(target, ast.Constant) and isinstance(target.value, str) and target.value != "cuda":
            continue  # "cpu"/"mps"/...: an index there is another mistake
        if isinstance(target, ast.Attribute) and target.attr == "type":
            new, one = f"str({_text(target.value)})", True
        else:
            new = 'f"cuda:{torch.cuda.current_device()}"' if count % 2 and uses_torch else '"cuda:0"'
            one = isinstance(target, ast.Constant)
            count += 1
        yield call.lineno, call.lineno, f"autocast device `{_text(target)}` -> `{new}`", replace_node(module, target, new), one


OPERATORS: Dict[str, Callable[[Module], Iterator[Site]]] = {
    "update_dropped": op_update_dropped,
    "update_doubled": op_update_doubled,
    "update_before_step": op_update_before_step,
    "unscale_dropped": op_unscale_dropped,
    "unscale_doubled": op_unscale_doubled,
    "step_direct": op_step_direct,
    "zero_grad_between": op_zero_grad_between,
    "backward_in_autocast": op_backward_in_autocast,
    "unscaled_backward": op_unscaled_backward,
    "indexed_device": op_indexed_device,
}


# The first ten families (issues 26 and 27); bench/inject_ops_more.py adds the rest of the default rules.
FIRST_TEN = tuple(OPERATORS)


def mutants(text: str, file: str, operators: Optional[Sequence[str]] = None, foreign: frozenset = frozenset()) -> List[Mutant]:
    """Every mutant of one module, by operator (default: every operator); mutants that do not parse (or change
    nothing) are dropped. `foreign`: the project's own scaler classes (`own_scaler_classes`), whose calls are
    no sites."""
    if operators is None:
        operators = tuple(OPERATORS)
    try:
        module = Module(text, foreign)
    except (SyntaxError, ValueError, RecursionError):
        return []
    out: List[Mutant] = []
    for name in operators:
        seen = set()
        for line, mutant_line, description, new, *one in OPERATORS[name](module):
            if new == text or new in seen:
                continue
            try:
                ast.parse(new)
            except (SyntaxError, ValueError):
                continue
            seen.add(new)
            node = _node_at(module, line)
            function = module.function_name(node) if node else ""
            one_answer = name not in MANY_ANSWERS and (bool(one[0]) if one else True)
            out.append(Mutant(name, file, line, mutant_line, function, description, new, one_answer))
    return out


def _node_at(module: Module, line: int) -> Optional[ast.AST]:
    best = None
    for node in ast.walk(module.tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno >= best.lineno and node.end_lineno <= best.end_lineno:
                best = node
    return best


def function_span(text: str, qualname: str) -> Optional[Tuple[int, int]]:
    """Lines (first, last) of the function `qualname` in `text`, decorators included."""
    if not qualname:
        return None
    try:
        module = Module(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    for node, name in module.qualname.items():
        if name == qualname and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return first, node.end_lineno
    return None


SITE_WORDS = ["autocast", ".scale(", "scaler"]  # lower case; bench/inject_ops_rules.py adds its own


def may_hold_sites(text: str) -> bool:
    return any(word in text.lower() for word in SITE_WORDS)


def _register_more() -> None:
    """Add the operators of inject_ops_more/_rules/_frameworks.py (imported last: they read this module)."""
    global MANY_ANSWERS, WHOLE_FILE
    import inject_ops_frameworks, inject_ops_more, inject_ops_rules  # noqa: E401
    for more in (inject_ops_more, inject_ops_rules, inject_ops_frameworks):
        OPERATORS.update(more.OPERATORS_MORE)
        EXPECTED.update(more.EXPECTED_MORE)
        PRINCIPLE.update(more.PRINCIPLE_MORE)
        MANY_ANSWERS = MANY_ANSWERS + more.MANY_ANSWERS_MORE
        WHOLE_FILE = WHOLE_FILE + more.WHOLE_FILE_MORE
        SITE_WORDS.extend(getattr(more, "SITE_WORDS_MORE", ()))


_register_more()
