"""Loops that do not repeat an iteration: a function whose only loops are these still runs its protocol once
per call (issue 26, principle 2: an iteration is not only a loop body).

Two kinds, each read from the code:

**A retry loop** runs its body once, and again only after a handled failure. `while True:` around a
training step that catches an out-of-memory error, shrinks the micro-batch and goes round again, or
`for attempt in range(n): try: ...; break` / `except ...: log`, does not iterate over batches: on the path
where nothing fails it leaves after one pass. A loop is a retry loop when all of these hold:
- it is `while <true constant>:` or `for <target> in range(...)`, without an `else:` clause;
- its body (not counting nested loops and functions) holds a `try` with an `except` clause: the failure
  it handles;
- no path through its body that passed no `except` clause reaches the body's end (falls through to the next
  pass): each leaves the loop (`return`, `raise`, `break`) or repeats only through an explicit `continue`;
- at least one such path leaves: the pass that succeeds ends the loop.
A training loop (`while True:` that reads the next batch, steps, and `break`s on the last one) falls
through at the end of its body on the path with no failure: not a retry loop. What cannot be read (a
nested loop's effect, a `match`) counts as falling through: the conservative answer is "a loop".

**A loop over optimizers** (`for opt in optimizers: scaler.step(opt)`) steps each optimizer once: one
step of the iteration, not iterations (principle 3: several optimizers, one update). It is a `for X in ...:`
whose every protocol event acts on `X` as the optimizer (`scaler.step(X)`, `scaler.unscale_(X)`,
`X.step()`, `X.zero_grad()`), with at least one step, and whose other calls that may run a training step
are inside such a step call (a closure: `scaler.step(X, closure=lambda: self.train(...))`). A backward,
an update, a clip or a scale in it, or a step of another optimizer, makes it a loop.
"""

from __future__ import annotations

import builtins

from typing import Callable, Dict, FrozenSet, Iterable, List, Sequence, Set, Tuple

import libcst as cst

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.syntax import Loop, names_in

# outcomes of running statements from a state ("n": no except clause passed yet, "h": one was)
_FALL_N, _FALL_H = "fall-n", "fall-h"
_LEAVE_N, _LEAVE_H = "leave-n", "leave-h"
_REPEAT = "continue"

_CACHE: Dict[int, Tuple[Loop, bool]] = {}


def is_retry_loop(loop: Loop) -> bool:
    """Is `loop` a retry loop (see the module's docstring)?"""
    cached = _CACHE.get(id(loop))
    if cached is not None and cached[0] is loop:
        return cached[1]
    answer = _retry(loop)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[id(loop)] = (loop, answer)
    return answer


def single_pass_loops(events: Sequence[Event], may_train: Callable[[Event], bool]) -> Set[Loop]:
    """The loops around `events` (one function's) that do not repeat an iteration: retry loops and loops
    over optimizers. `may_train(event)`: whether a call event may run a training step (a project function)."""
    loops: Dict[int, Loop] = {}
    members: Dict[int, List[Event]] = {}  # each loop's events, in order: one pass, whatever the number of loops
    for event in events:
        for loop in event.loops:
            loops.setdefault(id(loop), loop)
            members.setdefault(id(loop), []).append(event)
    return {loop for loop in loops.values() if is_retry_loop(loop) or _over_optimizers(loop, members[id(loop)], may_train)}


def repeating(loops: Iterable[Loop], once: Set[Loop]) -> Tuple[Loop, ...]:
    """`loops` without those in `once` (`single_pass_loops`)."""
    return tuple(loop for loop in loops if loop not in once)


def _over_optimizers(loop: Loop, members: Sequence[Event], may_train: Callable[[Event], bool]) -> bool:
    """`members`: the events inside `loop`."""
    if not isinstance(loop, cst.For) or loop.orelse is not None:
        return False
    names = per_pass_names(loop)
    if not names:
        return False
    steps = [
        e
        for e in members
        if (e.kind is EventKind.SCALER_STEP and e.target in names) or (e.kind is EventKind.OPTIMIZER_STEP and e.receiver in names)
    ]
    if not steps:
        return False
    for event in members:
        if event.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
            if event.target not in names:
                return False
        elif event.kind in (EventKind.OPTIMIZER_STEP, EventKind.ZERO_GRAD):
            if event.receiver not in names:
                return False
        elif event.kind is EventKind.CLIP:
            pass  # the pass's optimizer's group, clipped before its step (nerfstudio's `unscale_(optimizer);
            # clip_grad_norm_(self.parameters[group]); step(optimizer)`): once per optimizer, as the step
        elif event.kind is EventKind.CALL:
            if may_train(event) and event.target not in _BUILTINS and not any(_inside(event.call, step.call) for step in steps):
                return False
        else:
            return False  # a backward, an update, a scale, a clip or a gradient read: the work of an iteration
    return True


_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))  # `any(...)` trains nothing


def per_pass_names(loop: cst.For) -> set:
    """The names a pass of the loop binds afresh: its target's (`for opt in ...`, `for group, opt in
    ....items()`) and those the body assigns from one of them first thing (`opt = self.optimizers[group]`)."""
    targets = [loop.target]
    if isinstance(loop.target, (cst.Tuple, cst.List)):
        targets = [e.value for e in loop.target.elements if not isinstance(e, cst.StarredElement)]
    names = {t.value for t in targets if isinstance(t, cst.Name)}
    for statement in _statements(loop.body):
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (
                isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
                and names_in(small.value) & names
            ):
                names.add(small.targets[0].target.value)
    return names


def _inside(node: cst.CSTNode, outer: cst.CSTNode) -> bool:
    return node is not outer and any(n is node for n in _walk_all(outer))


def _walk_all(node: cst.CSTNode):
    todo = list(node.children)
    while todo:
        current = todo.pop()
        yield current
        todo.extend(current.children)


def _retry(loop: Loop) -> bool:
    if loop.orelse is not None:
        return False
    if isinstance(loop, cst.While):
        if not _true_constant(loop.test):
            return False
    elif not (isinstance(loop.iter, cst.Call) and isinstance(loop.iter.func, cst.Name) and loop.iter.func.value == "range"):
        return False
    body = _statements(loop.body)
    if not _handles_a_failure(body):
        return False
    outcomes = _run(body, "n")
    return _FALL_N not in outcomes and _LEAVE_N in outcomes


def _true_constant(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Name):
        return test.value == "True"
    if isinstance(test, cst.Integer):
        return test.value not in ("0", "0x0", "0o0", "0b0")
    return False


def _statements(block: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if isinstance(block, cst.IndentedBlock):
        return block.body
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=block.body)]
    return []


def _handles_a_failure(body: Sequence[cst.BaseStatement]) -> bool:
    """Does the body hold, outside nested loops and functions, a `try` with an `except` clause?"""
    for statement in body:
        if isinstance(statement, (cst.Try, cst.TryStar)) and statement.handlers:
            return True
        if isinstance(statement, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)):
            continue
        for block in _blocks(statement):
            if _handles_a_failure(_statements(block)):
                return True
    return False


def _blocks(statement: cst.BaseStatement):
    if isinstance(statement, cst.If):
        yield statement.body
        if statement.orelse is not None:
            if isinstance(statement.orelse, cst.If):
                yield from _blocks(statement.orelse)
            else:
                yield statement.orelse.body
    elif isinstance(statement, cst.With):
        yield statement.body
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        yield statement.body
        for handler in statement.handlers:
            yield handler.body
        if statement.orelse is not None:
            yield statement.orelse.body
        if statement.finalbody is not None:
            yield statement.finalbody.body


def _run(statements: Sequence[cst.BaseStatement], state: str) -> FrozenSet[str]:
    """The outcomes of running `statements` from `state`: falling through their end (in either state),
    leaving the loop, or repeating it."""
    falling: Set[str] = {state}
    exits: Set[str] = set()
    for statement in statements:
        after: Set[str] = set()
        for current in falling:
            for outcome in _statement(statement, current):
                (after if outcome.startswith("fall") else exits).add(outcome)
        falling = {"n" if f == _FALL_N else "h" for f in after}
        if not falling:
            break
    return frozenset(exits | {_FALL_N if s == "n" else _FALL_H for s in falling})


def _fall(state: str) -> str:
    return _FALL_N if state == "n" else _FALL_H


def _leave(state: str) -> str:
    return _LEAVE_N if state == "n" else _LEAVE_H


def _statement(statement: cst.BaseStatement, state: str) -> FrozenSet[str]:
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, (cst.Return, cst.Raise, cst.Break)):
                return frozenset({_leave(state)})
            if isinstance(small, cst.Continue):
                return frozenset({_REPEAT})
        return frozenset({_fall(state)})
    if isinstance(statement, cst.If):
        outcomes = set(_run(_statements(statement.body), state))
        if statement.orelse is None:
            outcomes.add(_fall(state))
        elif isinstance(statement.orelse, cst.If):
            outcomes |= _statement(statement.orelse, state)
        else:
            outcomes |= _run(_statements(statement.orelse.body), state)
        return frozenset(outcomes)
    if isinstance(statement, cst.With):
        return _run(_statements(statement.body), state)
    if isinstance(statement, (cst.Try, cst.TryStar)):
        return _try(statement, state)
    if isinstance(statement, (cst.For, cst.While)):
        # a nested loop: its break/continue are its own; it may end (fall through) or return/raise out
        outcomes = {_fall(state)}
        if any(isinstance(n, (cst.Return, cst.Raise)) for n in _walk(statement)):
            outcomes.add(_leave(state))
        return frozenset(outcomes)
    return frozenset({_fall(state)})  # a definition, a `match`, anything else: may fall through


def _try(statement, state: str) -> FrozenSet[str]:
    outcomes = set(_run(_statements(statement.body), state))
    if statement.orelse is not None:
        fell = {o for o in outcomes if o.startswith("fall")}
        outcomes -= fell
        for f in fell:
            outcomes |= _run(_statements(statement.orelse.body), "n" if f == _FALL_N else "h")
    for handler in statement.handlers:
        outcomes |= _run(_statements(handler.body), "h")
    if statement.finalbody is not None:
        final = _run(_statements(statement.finalbody.body), state)
        if not any(o.startswith("fall") for o in final):
            return frozenset(final)  # a `finally` that always leaves overrides the rest
    return frozenset(outcomes)


def _walk(node: cst.CSTNode):
    """Every node below `node`, not entering nested functions, classes or lambdas."""
    todo = list(node.children)
    while todo:
        current = todo.pop()
        if isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        yield current
        todo.extend(current.children)
