"""A small check over fixed code: no path scales a loss twice, unscales an optimizer twice, steps twice or
updates twice.

The rules' own analysis decides what to fix; this check must not depend on it (a wrong finding makes a
wrong fix, and the same analysis would then approve it). So it is deliberately plain: Python's `ast`, one
function at a time, GradScaler's documented state machine per optimizer (ready -> unscaled -> stepped, and
`update()` back to ready), followed along every path with branches merged. It runs only on files a fix
changed, before and after the fix, and a fix fails when the fixed code has a hazard the code before it did
not have: what was already there (or an imprecision of this check) counts the same on both sides.

`hazards(code)` lists them; `new_hazards(before, after)` says what a fix added.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import FrozenSet, List, Optional, Set, Tuple

READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"
_UNKNOWN = "unknown"  # what a function's caller did before: never a hazard by itself

# How each hazard is named in a "not fixed" message.
DESCRIPTIONS = {
    "scale-twice": "scales a loss twice ({scaler}.scale of a scaled loss)",
    "unscale-twice": "calls {scaler}.unscale_({optimizer}) twice before {scaler}.update()",
    "unscale-after-step": "calls {scaler}.unscale_({optimizer}) after {scaler}.step({optimizer}) and before {scaler}.update()",
    "step-twice": "calls {scaler}.step({optimizer}) twice before {scaler}.update()",
    "update-twice": "calls {scaler}.update() twice with no {scaler}.step() between",
}


@dataclass(frozen=True)
class Hazard:
    kind: str  # a key of DESCRIPTIONS
    function: str  # the enclosing function's qualified name ("" for the module body)
    scaler: str  # the scaler's code
    optimizer: str = ""
    line: int = 0  # in the text checked; not part of the comparison

    @property
    def shape(self) -> Tuple[str, str, str, str]:
        return (self.kind, self.function, self.scaler, self.optimizer)

    def describe(self) -> str:
        text = DESCRIPTIONS[self.kind].format(scaler=self.scaler, optimizer=self.optimizer)
        return f"{text} in {self.function}()" if self.function else text


def new_hazards(before: str, after: str) -> List[Hazard]:
    """The hazards of `after` that `before` does not have (compared by kind, function, scaler, optimizer).

    Where an optimizer's calls already break the state machine before the fix (no `update()`, say: its
    second `step()` raises), the fixed code's order for that optimizer is not judged by this check: a fix
    for another finding (an `unscale_` before a clip) changes which call fails first, not whether one
    does. The rules judge it.
    """
    old_hazards = hazards(before)
    old = Counter(h.shape for h in old_hazards)
    broken = {(h.function, h.scaler, h.optimizer) for h in old_hazards if h.kind in _ORDER_KINDS}
    found = []
    for hazard in hazards(after):
        if old[hazard.shape] > 0:
            old[hazard.shape] -= 1
        elif not (hazard.kind in _ORDER_KINDS and (hazard.function, hazard.scaler, hazard.optimizer) in broken):
            found.append(hazard)
    return found


_ORDER_KINDS = frozenset({"unscale-twice", "unscale-after-step", "step-twice", "update-twice"})


@functools.lru_cache(maxsize=4)  # a pass's code is checked against each fix tried on it
def hazards(code: str) -> Tuple[Hazard, ...]:
    """Every hazard in `code`; none when Python cannot parse it (the parse check reports that)."""
    if ".scale" not in code and ".unscale_" not in code and ".update" not in code:
        return ()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    scalers = _scaler_receivers(tree)
    if not scalers:
        return ()
    found: List[Hazard] = []
    lines = code.split("\n") if "\r" not in code else None  # (`ast`'s rows are these lines without a CR)
    names = _protocol_helpers(tree, scalers)
    helpers = _Helpers(names, _unscaling_first(tree, scalers, _Helpers(names), lines))
    # A function's hazards depend on its text, its name and the file's scalers and helpers alone: a fix's
    # code is checked against the code before it, and only the functions the fix changed are followed again.
    for function, node, body in _functions(tree):
        if node is None or lines is None:
            _FunctionCheck(function, scalers, found, helpers).run(body)
            continue
        key = (function, "\n".join(lines[node.lineno - 1 : node.end_lineno]), scalers, helpers)
        known = _FUNCTION_HAZARDS.get(key)
        if known is None:
            own: List[Hazard] = []
            _FunctionCheck(function, scalers, own, helpers).run(body)
            known = _FUNCTION_HAZARDS[key] = tuple((h.kind, h.scaler, h.optimizer, h.line - node.lineno if h.line else None) for h in own)
            if len(_FUNCTION_HAZARDS) > _FUNCTIONS_KEPT:
                _FUNCTION_HAZARDS.popitem(last=False)
        else:
            _FUNCTION_HAZARDS.move_to_end(key)
        found.extend(Hazard(kind, function, scaler, optimizer, 0 if row is None else row + node.lineno) for kind, scaler, optimizer, row in known)
    return tuple(found)


# (function's qualified name, its text, the file's scalers, its helpers) -> its hazards, rows from its `def`
_FUNCTION_HAZARDS: "OrderedDict[tuple, Tuple[Tuple[str, str, str, Optional[int]], ...]]" = OrderedDict()
_FUNCTIONS_KEPT = 4096


@dataclass(frozen=True)
class _Helpers:
    """The file's functions that call a scaler's protocol themselves (`names`), and (helper, scaler, optimizer)
    for those that may unscale that optimizer before anything else of its protocol (`unscale_first`)."""

    names: FrozenSet[str] = frozenset()
    unscale_first: FrozenSet[Tuple[str, str, str]] = frozenset()


def _protocol_helpers(tree: ast.AST, scalers: FrozenSet[str]) -> FrozenSet[str]:
    """Names of the file's functions and methods that call a scaler's unscale_, step or update themselves: a
    call to one (`self.optimizer_step()`) may move the protocol on, so the caller's path forgets what it knew
    (ultralytics: `unscale_` before `self.optimizer_step()`, whose body steps and updates)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr in ("unscale_", "step", "update") and _code(inner.func.value) in scalers
                ):
                    names.add(node.name)
                    break
    return frozenset(names)


def _unscaling_first(tree: ast.AST, scalers: FrozenSet[str], helpers: "_Helpers", lines: Optional[List[str]] = None) -> FrozenSet[Tuple[str, str, str]]:
    """(name, scaler, optimizer) for each helper that may call `scaler.unscale_(optimizer)` before anything else
    of that optimizer's protocol: a caller that unscaled it first makes that call raise. Found by running the
    helper with the optimizer already unscaled and keeping the unscale_ calls that then fail (an unscale_
    inserted before `self.clip_gradients()`, whose body unscales: issue 46, the fix check follows callees)."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name not in helpers.names:
            continue
        pairs = {
            (_code(inner.func.value), _code(inner.args[0]))
            for inner in ast.walk(node)
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "unscale_"
            and inner.args and _code(inner.func.value) in scalers
        }
        if not pairs:
            continue
        # A function's answer depends on its text and the file's scalers and helper names alone: kept, so
        # that the code a fix changed is not run again for the helpers the fix did not touch.
        key = (node.name, ast.dump(node) if lines is None else "\n".join(lines[node.lineno - 1 : node.end_lineno]), scalers, helpers)
        answer = _UNSCALING_FIRST.get(key)
        if answer is None:
            hazards_found: List[Hazard] = []
            check = _FunctionCheck(node.name, scalers, hazards_found, helpers)
            check.block(node.body, {_State(frozenset((s, o, UNSCALED) for s, o in pairs))})
            answer = _UNSCALING_FIRST[key] = frozenset((node.name, h.scaler, h.optimizer) for h in hazards_found if h.kind == "unscale-twice")
            if len(_UNSCALING_FIRST) > _FUNCTIONS_KEPT:
                _UNSCALING_FIRST.popitem(last=False)
        else:
            _UNSCALING_FIRST.move_to_end(key)
        found |= answer
    return frozenset(found)


_UNSCALING_FIRST: "OrderedDict[tuple, FrozenSet[Tuple[str, str, str]]]" = OrderedDict()


def _scaler_receivers(tree: ast.AST) -> FrozenSet[str]:
    """The code of each object that `.scale(...)` or `.unscale_(...)` is called on, or whose name says scaler:
    the objects whose `.step(x)` and `.update()` are GradScaler calls (an optimizer's or a scheduler's are not)."""
    receivers = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = _code(node.func.value)
            if node.func.attr in ("scale", "unscale_") or re.search(r"scaler$", receiver, re.I):
                receivers.add(receiver)
    return frozenset(receivers)


def _functions(tree: ast.Module):
    """(qualified name, node, body) of the module (node None) and of every function, nested ones included."""
    yield "", None, tree.body
    stack: List[Tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                yield name, child, child.body
                stack.append((name, child))
            elif isinstance(child, ast.ClassDef):
                stack.append((f"{prefix}.{child.name}" if prefix else child.name, child))
            elif not isinstance(child, ast.Lambda):
                stack.append((prefix, child))


# A path's state: per (scaler, optimizer), the optimizer's stage; per scaler, whether a step ran since the
# last update (None: unknown); the names bound to a scaled loss.
@dataclass(frozen=True)
class _State:
    stages: FrozenSet[Tuple[str, str, str]] = frozenset()  # (scaler, optimizer, stage)
    stepped: FrozenSet[Tuple[str, bool]] = frozenset()  # (scaler, stepped since the last update)
    scaled: FrozenSet[Tuple[str, str]] = frozenset()  # (name, scaler)

    def stage(self, scaler: str, optimizer: str) -> str:
        for s, o, stage in self.stages:
            if s == scaler and o == optimizer:
                return stage
        return _UNKNOWN


@dataclass
class _Loop:
    next_iteration: Set[_State] = field(default_factory=set)
    exits: Set[_State] = field(default_factory=set)


class _FunctionCheck:
    """Follows one function's body along every path; a set of states stands for the paths that reach a point."""

    def __init__(self, function: str, scalers: FrozenSet[str], found: List[Hazard], helpers: _Helpers = _Helpers()) -> None:
        self.function = function
        self.scalers = scalers
        self.helpers = helpers
        self.found = found
        self.reported: Set[Tuple[int, str]] = set()  # (call node id, kind): once, however many paths
        self.loops: List[_Loop] = []
        self.returns: Set[_State] = set()  # the states at the function's `return`s
        self.updates: Set[str] = set()  # scalers this function updates

    def run(self, body: List[ast.stmt]) -> None:
        self.block(body, {_State()})
        if not self.function:
            return
        # The next call: a function that updates its scaler itself and returns on some path after
        # `unscale_` with neither step nor update leaves the optimizer UNSCALED, and the next call's
        # `unscale_` raises (issue 27, item 2). Those paths' stages start a second pass. Only explicit
        # `return`s: this check merges branches without relating their tests, and the paths that fall
        # off the end include `if fp16: unscale_ ... if fp16: step` taken one way then the other.
        carried = set()
        for state in self.returns:
            left = frozenset((s, o, st) for s, o, st in state.stages if st == UNSCALED and s in self.updates)
            if left:
                carried.add(_State(left))
        if carried:
            self.block(body, carried)

    # --- statements ---
    def block(self, body: List[ast.stmt], states: Set[_State]) -> Set[_State]:
        for statement in body:
            if not states:
                break
            states = self.statement(statement, states)
        return states

    def statement(self, node: ast.stmt, states: Set[_State]) -> Set[_State]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return states  # checked on its own
        if isinstance(node, ast.If):
            states = self.expressions([node.test], states)
            return self.block(node.body, set(states)) | self.block(node.orelse, set(states))
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            head = [node.iter] if isinstance(node, (ast.For, ast.AsyncFor)) else [node.test]
            return self.loop(node, self.expressions(head, states))
        if isinstance(node, (ast.With, ast.AsyncWith)):
            states = self.expressions([item.context_expr for item in node.items], states)
            return self.block(node.body, states)
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            after_body = self.block(node.body, set(states))
            reached = states | after_body
            handled: Set[_State] = set()
            for handler in node.handlers:
                handled |= self.block(handler.body, set(reached))
            ends = self.block(node.orelse, after_body) | handled
            return self.block(node.finalbody, ends) if node.finalbody else ends
        if isinstance(node, (ast.Return, ast.Raise)):
            states = self.expressions([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)], states)
            if isinstance(node, ast.Return) and not self.loops:
                self.returns |= states
            return set()
        if isinstance(node, ast.Continue):
            if self.loops:
                self.loops[-1].next_iteration |= states
            return set()
        if isinstance(node, ast.Break):
            if self.loops:
                self.loops[-1].exits |= states
            return set()
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return self.assignment(node, states)
        if type(node).__name__ == "Match":
            states = self.expressions([node.subject], states)
            ends: Set[_State] = set(states)  # no case may match
            for case in node.cases:
                ends |= self.block(case.body, set(states))
            return ends
        return self.expressions([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)], states)

    def loop(self, node, entry: Set[_State]) -> Set[_State]:
        context = _Loop()
        self.loops.append(context)
        # A loop is taken to run at least once (`for opt in optimizers: scaler.step(opt)` does): the
        # paths that skip it are not worth a hazard.
        seen = set(entry)
        frontier = set(entry)
        ends: Set[_State] = set()
        try:
            rebound = _names_bound(node.target) if isinstance(node, (ast.For, ast.AsyncFor)) else set()
            for _ in range(8):  # the states are few: this reaches a fixed point in two or three rounds
                if rebound:  # `for opt in optimizers`: each iteration's `opt` is another optimizer
                    frontier = {_forget(state, rebound) for state in frontier}
                after = self.block(node.body, set(frontier)) | context.next_iteration
                context.next_iteration = set()
                ends |= after
                new = after - seen
                if not new:
                    break
                seen |= new
                frontier = new
        finally:
            self.loops.pop()
        done = ends | context.exits
        return self.block(node.orelse, done) if node.orelse else done

    def assignment(self, node, states: Set[_State]) -> Set[_State]:
        value = node.value
        if value is None:
            return states
        states = self.expressions([value], states)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if not names or isinstance(node, ast.AugAssign):
            return states
        scaler = self.scale_receiver(value)
        result = set()
        for state in states:
            scaled = {(n, s) for n, s in state.scaled if n not in names}
            if scaler is not None:
                scaled |= {(n, scaler) for n in names}
            result.add(_State(state.stages, state.stepped, frozenset(scaled)))
        return result

    # --- expressions: the scaler calls they make, in evaluation order (arguments first) ---
    def expressions(self, nodes: List[ast.expr], states: Set[_State]) -> Set[_State]:
        for node in nodes:
            for call in _calls_in_order(node):
                states = self.call(call, states)
        return states

    def scale_receiver(self, node: ast.expr) -> Optional[str]:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "scale":
            receiver = _code(node.func.value)
            if receiver in self.scalers:
                return receiver
        return None

    def call(self, node: ast.Call, states: Set[_State]) -> Set[_State]:
        if not isinstance(node.func, ast.Attribute):
            return self.opaque(node, states)
        scaler = _code(node.func.value)
        if scaler not in self.scalers:
            return self.opaque(node, states)
        method = node.func.attr
        if method == "scale":
            self.check_scale(node, scaler, states)
            return states
        optimizer = _code(node.args[0]) if node.args else ""
        if method == "unscale_" and optimizer:
            return {self.unscale(node, scaler, optimizer, state) for state in states}
        if method == "step" and optimizer:
            return {self.step(node, scaler, optimizer, state) for state in states}
        if method == "update":
            self.updates.add(scaler)
            return {self.update(node, scaler, state) for state in states}
        return states

    def opaque(self, node: ast.Call, states: Set[_State]) -> Set[_State]:
        """A call that is no scaler method: one of the file's functions that calls the scaler's protocol itself,
        or any call handed a scaler, may have unscaled, stepped or updated: what the path knew of those
        scalers becomes unknown (never a hazard by itself), as before the function's first line."""
        # `helper()` or `self.helper()`: a function or method of the file (not `optimizer.step()`).
        own = isinstance(node.func, ast.Name) or (
            isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id in ("self", "cls")
        )
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id if isinstance(node.func, ast.Name) else ""
        if own and name in self.helpers.names:
            gone = set(self.scalers)
            # a helper that unscales first, called on an optimizer already unscaled (not a call of the same
            # name inside it: `clip(p)` in a method `clip` is most likely another function)
            for state in states if name != self.function.rpartition(".")[2] else ():
                for scaler, optimizer, stage in state.stages:
                    if stage == UNSCALED and (name, scaler, optimizer) in self.helpers.unscale_first:
                        self.report(node, "unscale-twice", scaler, optimizer)
        else:
            passed = {_code(a.value if isinstance(a, ast.Starred) else a) for a in node.args} | {_code(k.value) for k in node.keywords}
            gone = passed & set(self.scalers)
        if not gone:
            return states
        return {
            _State(
                frozenset(e for e in state.stages if e[0] not in gone),
                frozenset(e for e in state.stepped if e[0] not in gone),
                state.scaled,
            )
            for state in states
        }

    def check_scale(self, node: ast.Call, scaler: str, states: Set[_State]) -> None:
        for argument in list(node.args) + [k.value for k in node.keywords]:
            for inner in ast.walk(argument):
                if self.scale_receiver(inner) == scaler:
                    self.report(node, "scale-twice", scaler)
                    return
                if isinstance(inner, ast.Name) and any((inner.id, scaler) in state.scaled for state in states):
                    self.report(node, "scale-twice", scaler)
                    return

    def unscale(self, node, scaler: str, optimizer: str, state: _State) -> _State:
        stage = state.stage(scaler, optimizer)
        if stage == UNSCALED:
            self.report(node, "unscale-twice", scaler, optimizer)
        elif stage == STEPPED:
            self.report(node, "unscale-after-step", scaler, optimizer)
        return _with_stage(state, scaler, optimizer, UNSCALED)

    def step(self, node, scaler: str, optimizer: str, state: _State) -> _State:
        if state.stage(scaler, optimizer) == STEPPED:
            self.report(node, "step-twice", scaler, optimizer)
        state = _with_stage(state, scaler, optimizer, STEPPED)
        stepped = {(s, v) for s, v in state.stepped if s != scaler} | {(scaler, True)}
        return _State(state.stages, frozenset(stepped), state.scaled)

    def update(self, node, scaler: str, state: _State) -> _State:
        # update(new_scale) sets the scale and needs no step before it; update() reads the steps' inf checks.
        if not node.args and not node.keywords and (scaler, False) in state.stepped:
            self.report(node, "update-twice", scaler)
        stages = frozenset((s, o, READY) if s == scaler else (s, o, st) for s, o, st in state.stages)
        stepped = {(s, v) for s, v in state.stepped if s != scaler} | {(scaler, False)}
        return _State(stages, frozenset(stepped), state.scaled)

    def report(self, node: ast.Call, kind: str, scaler: str, optimizer: str = "") -> None:
        if (id(node), kind) in self.reported:
            return
        self.reported.add((id(node), kind))
        self.found.append(Hazard(kind, self.function, scaler, optimizer, getattr(node, "lineno", 0)))


def _with_stage(state: _State, scaler: str, optimizer: str, stage: str) -> _State:
    stages = {entry for entry in state.stages if not (entry[0] == scaler and entry[1] == optimizer)}
    stages.add((scaler, optimizer, stage))
    return _State(frozenset(stages), state.stepped, state.scaled)


def _names_bound(target: ast.expr) -> Set[str]:
    return {node.id for node in ast.walk(target) if isinstance(node, ast.Name)}


def _forget(state: _State, names: Set[str]) -> _State:
    """`state` without what it knows about the objects that `names` stood for."""

    def root(code: str) -> str:
        return re.split(r"[.\[(]", code, maxsplit=1)[0]

    return _State(
        frozenset(entry for entry in state.stages if root(entry[1]) not in names),
        state.stepped,
        frozenset(entry for entry in state.scaled if entry[0] not in names),
    )


def _calls_in_order(node: ast.expr) -> List[ast.Call]:
    """The calls in an expression in the order Python makes them (inner calls before the call around them);
    lambdas and comprehensions' bodies are not followed (they may never run)."""
    calls: List[ast.Call] = []

    def visit(current: ast.AST) -> None:
        if isinstance(current, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        for child in ast.iter_child_nodes(current):
            visit(child)
        if isinstance(current, ast.Call):
            calls.append(current)

    visit(node)
    return calls



def _code(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - ast.unparse handles every expression Python parses
        return ast.dump(node)
