"""Epochs are iterations too (issue 26, principle 2): does a call or a construction run on more than one
iteration of the loop around it, an epoch loop in particular (`for epoch in range(n):`)? PROVED when every
iteration runs it, ASSUMED under a condition, None when the evidence is not there (a loop that runs
once, a test of the loop variable, a `break` after it)."""

from __future__ import annotations

import re
from typing import Optional, Set

import libcst as cst

from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.flow_queries import scope_flow
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.paths import PROVED, Proof, weakest
from amp_lint.analysis.syntax import code_of, ifs_in, names_in
from amp_lint.analysis.walk import visit_read_only

EPOCH_LOOP = re.compile(r"^(epoch|ep|epoch_idx|epoch_id|e|i_epoch|epoch_num|n_epoch)$|epoch", re.IGNORECASE)


def conditional_in_loop(call) -> bool:
    """Is the call under an `if` inside its innermost loop?"""
    loop = call.loops[-1] if call.loops else None
    return loop is not None and any(id(b.node) in ifs_in(loop) for b in call.branches)


def once_per_epoch(model: FileModel, site) -> Optional[Proof]:
    """Does the call `site` (an Event or a CallSite of `model`) run on more than one iteration of an epoch
    loop, the innermost loop around it? See `repeated_call`."""
    return repeated_call(model, site, epoch=True)


def repeated_call(model: FileModel, site, epoch: bool) -> Optional[Proof]:
    """Can the call `site` run on two iterations of the innermost loop around it (an epoch loop, with
    `epoch`)? PROVED when every iteration runs it, ASSUMED when a condition around it must hold, None
    when the evidence is not there: a loop that runs once, a condition on the loop variable (`if epoch
    == 0:`), or no path from the call to the next iteration (`break`, `return` after it)."""
    if not site.loops:
        return None
    loop = site.loops[-1]
    # An epoch loop says so in its target (`for epoch in ...`) or in what it iterates (`for _ in
    # range(num_epochs)`, issue 46, principle 2): other outer loops (folds, sweeps) start fresh runs.
    if epoch and not (isinstance(loop, cst.For) and (EPOCH_LOOP.search(code_of(loop.target)) or EPOCH_LOOP.search(code_of(loop.iter)))):
        return None
    if isinstance(loop, cst.For):
        if runs_once(loop):
            return None
        counters = names_in(loop.target)
        inside = ifs_in(loop)
        if any(id(b.node) in inside and names_in(b.node.test) & counters for b in site.branches):
            return None
    return every_iteration(model, site.scope, getattr(site, "flow_statement", None) or site.statement, loop)


def every_iteration(model: FileModel, scope, statement, loop) -> Optional[Proof]:
    """Does `statement` run on an iteration of `loop` and reach the next one? (PROVED: every iteration;
    ASSUMED: under a condition; None: never again after it.) PROVED when the flow graph has no place
    for it (the lexical answer, as before)."""
    flow = scope_flow(model, scope)
    graph = flow.graph
    node = graph.node_of.get(id(statement))
    body, latch = graph.loop_body.get(id(loop)), graph.loop_latch.get(id(loop))
    if node is None or body is None or latch is None:
        return PROVED
    into = PROVED if node == body else flow.paths.query(body, node, start=body)
    return weakest(into, flow.paths.query(node, latch, start=body))


def runs_once(loop: cst.For) -> bool:
    """`for epoch in range(1)`, `range(start, start + 1)`, `[0]`: one iteration (or none)."""
    iterable = loop.iter
    if isinstance(iterable, (cst.List, cst.Tuple, cst.Set)):
        return len(iterable.elements) <= 1
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range":
        args = [a.value for a in iterable.args]
        if len(args) == 1:
            return isinstance(args[0], cst.Integer) and int(args[0].value, 0) <= 1
        if len(args) in (2, 3):
            first, second = args[0], args[1]
            if isinstance(first, cst.Integer) and isinstance(second, cst.Integer):
                return int(second.value, 0) - int(first.value, 0) <= 1
            if isinstance(second, cst.BinaryOperation) and isinstance(second.operator, cst.Add):
                one = second.right
                return isinstance(one, cst.Integer) and int(one.value, 0) <= 1 and second.left.deep_equals(first)
    return False


# --- a scaler that outlives the call (returned, stored): built once per object, not per call ----------

_STORING_METHODS = frozenset({"append", "extend", "add", "insert", "setdefault", "update", "register", "put"})


def restored(function: cst.FunctionDef, key: str) -> bool:
    """Does the function give the scaler `key` its state back (`self.scaler.load_state_dict(...)`)?"""
    return f"{key}.load_state_dict" in code_of(function).replace(" ", "")


def kept(function: cst.FunctionDef, key: str) -> bool:
    """Does the scaler outlive the call, or come back with its history? Returned or yielded, stored in
    an attribute, a container or a global (`global`/`nonlocal`), or loaded from a state dict: then a new
    one per call is not proved to lose anything."""
    found = []

    def bare(node: Optional[cst.CSTNode]) -> bool:
        return node is not None and key in _bare_names(node)

    class Escapes(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function  # a nested function's returns are its own

        def visit_Return(self, node: cst.Return) -> None:
            if bare(node.value):
                found.append(node)

        def visit_Yield(self, node: cst.Yield) -> None:
            if bare(node.value):
                found.append(node)

        def visit_Global(self, node: cst.Global) -> None:
            if any(n.name.value == key for n in node.names):
                found.append(node)

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            if any(n.name.value == key for n in node.names):
                found.append(node)

        def visit_Assign(self, node: cst.Assign) -> None:
            if bare(node.value) and any(not isinstance(t.target, cst.Name) for t in node.targets):
                found.append(node)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if bare(node.value) and not isinstance(node.target, cst.Name):
                found.append(node)

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if stores(node, key):
                found.append(node)
            elif isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict" and dotted_name(func.value) == key:
                found.append(node)

    visit_read_only(function, Escapes())
    return bool(found)


def stores(call: cst.Call, key: str) -> bool:
    """Does the call only store the scaler `key` somewhere (`setattr(self, name, scaler)`,
    `scalers.append(scaler)`, `d.setdefault(k, scaler)`)? Python's own storing calls keep a value; they do
    not step it."""
    func = call.func
    storing = (isinstance(func, cst.Attribute) and func.attr.value in _STORING_METHODS) or (
        isinstance(func, cst.Name) and func.value == "setattr"
    )
    return storing and any(key in _bare_names(a.value) for a in call.args)


def _bare_names(node: cst.CSTNode) -> Set[str]:
    """Plain names an expression hands on as values (`scaler`, `(model, scaler)`), not those it only
    reads an attribute of or calls a method on (`scaler.get_scale()`)."""
    names = _BareNames()
    visit_read_only(node, names)
    return names.found


class _BareNames(cst.CSTVisitor):
    """`_bare_names`' visitor (at module level: a class made per call is slow to make, and cyclic garbage)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: Set[str] = set()

    def visit_Name(self, name: cst.Name) -> None:
        self.found.add(name.value)

    def visit_Attribute(self, attribute: cst.Attribute) -> bool:
        return False

    def visit_Call(self, call: cst.Call) -> bool:
        for arg in call.args:
            visit_read_only(arg.value, self)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False
