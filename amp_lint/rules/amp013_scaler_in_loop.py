from __future__ import annotations

import functools
import re
from typing import Iterator, List, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import FileModel, ScalerBinding
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import Loop, code_of
from amp_lint.analysis.paths import ASSUMED, PROVED, Proof
from amp_lint.analysis.scaler_flow import assumption_text
from amp_lint.analysis.flow_queries import scope_flow
from amp_lint.analysis.epochs import (
    EPOCH_LOOP as _EPOCH_LOOP,
    conditional_in_loop as _conditional_in_loop,
    names_in as _names_in,
    once_per_epoch as _once_per_epoch,
    repeated_call as _repeated_call,
    every_iteration as _every_iteration,
    kept as _kept,
    restored,
    stores,
)
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_TRAINING = (EventKind.BACKWARD, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.OPTIMIZER_STEP)
_LAZY_TEST = re.compile(r"None|hasattr|getattr|first|== ?0\b|not in|is_initialized|_init", re.IGNORECASE)


class ScalerBuiltInLoop(Rule):
    """
    ## What it does
    Finds a `GradScaler(...)` constructed inside the training loop (the loop that runs backward or the
    optimizer step), or inside a step function that a loop calls.

    ## Why is this bad?
    "The same GradScaler instance should be used for the entire convergence run." A fresh scaler
    restarts at 2**16 with its growth tracker at zero: the scale never calibrates, and when 2**16
    overflows, every step is skipped (30 of 30 in a CPU reproduction, against 9 warm-up skips with one
    scaler).

    ## Example
    ```python
    for x, y in loader:
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Safe. The assignment is hoisted to just before the outermost loop of the function when its
    arguments are loop-invariant (no name they use is bound inside the loop). Lazy initialisation
    (`if scaler is None: scaler = GradScaler()`) is not reported. A scaler built in a per-step helper
    function is reported at medium confidence without a fix; one built once per epoch (in the epoch loop
    or in a function the epoch loop calls) is reported by default as a warning, without a fix.

    A function that builds its scaler and runs a training loop with it (`train_one_epoch`) is reported
    when an epoch loop calls it, in the same file or in another module of the project (the finding is at
    the construction and names the epoch loop's file and line): not when the scaler outlives the call
    (returned, stored in an attribute, a container or a global) or gets its state back
    (`load_state_dict`), when the loop runs once, the call is under a test of the epoch (`if epoch == 0`)
    or ends the loop (`break`, `return`), or when the epoch loop is the function's own.

    ## References
    - [AMP recipe: Adding GradScaler](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    """

    code = "AMP013"
    name = "grad-scaler-built-in-loop"
    summary = "GradScaler constructed inside the training loop"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"Scaler",)

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for epoch in range(epochs):
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # Lazy initialisation inside the loop runs once.
        """
import torch
scaler = None
for x, y in loader:
    if scaler is None:
        scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # One run per configuration: a scaler per run is right.
        """
import torch
for config in configs:
    model, optimizer = build(config)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # A function with its own loop, called once per configuration: one scaler per run is right.
        """
import torch
def run(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()

for config in configs:
    run(*build(config))
""",
        # Called in an epoch loop that runs once, in the first epoch only, or before a `break`.
        """
import torch
def train_one_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()

for epoch in range(1):
    train_one_epoch(model, loader, optimizer)
for epoch in range(epochs):
    if epoch == 0:
        train_one_epoch(model, loader, optimizer)
for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer)
    break
""",
        # The scaler is handed back (the caller keeps it) or gets its history back from a checkpoint.
        """
import torch
def train_one_epoch(model, loader, optimizer, state):
    scaler = torch.amp.GradScaler("cuda")
    scaler.load_state_dict(state["scaler"])
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
    return scaler

for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer, state)
""",
        # A loop that only builds things.
        """
import torch
scalers = []
for name in ("a", "b"):
    scalers.append(torch.amp.GradScaler("cuda"))
""",
        # One optimizer and one scaler per sub-model, each stored on the trainer (imagen-pytorch's Trainer).
        """
from torch.optim import Adam
from torch.amp import GradScaler

class Trainer:
    def __init__(self, unets, fp16):
        scaler_enabled = fp16
        for index, unet in enumerate(unets):
            optimizer = Adam(unet.parameters())
            scaler = GradScaler("cuda", enabled=scaler_enabled)
            setattr(self, f"optimizer{index}", optimizer)
            setattr(self, f"scaler{index}", scaler)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
for epoch in range(epochs):
    for x, y in loader:
        # fresh scaler
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
for epoch in range(epochs):
    for x, y in loader:
        # fresh scaler
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
        # Depends on the loop variable: reported, not hoisted.
        Invalid(
            """
import torch
def train(model, loader, optimizer):
    for step, (x, y) in enumerate(loader):
        scaler = torch.amp.GradScaler("cuda", enabled=step > 10)
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
"""
        ),
        # Handed to a step function every iteration.
        Invalid(
            """
import torch
for x in loader:
    scaler = torch.amp.GradScaler("cuda")
    train_step(model, x, optimizer, scaler)
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    train_step(model, x, optimizer, scaler)
""",
        ),
        # Built after an early `continue` on something else: still every iteration.
        Invalid(
            """
import torch
for x, y in loader:
    if x is None:
        continue
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    if x is None:
        continue
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # A scaler built before the loop and rebuilt when something went wrong: a deliberate reset may be
        # meant, so this rests on an assumption (shown only with --show-assumed, no fix).
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    if diverged():
        scaler = torch.amp.GradScaler("cuda")
"""
        ),
        # A function with its own batch loop, called once per epoch (animl #298).
        Invalid(
            """
import torch
def train_one_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()

for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer)
"""
        ),
        # A step function called once per batch.
        Invalid(
            """
import torch
def train_step(model, x, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()

for x in loader:
    train_step(model, x, optimizer)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for bindings in model.scalers.values():
            for binding in bindings:
                if binding.call is None or binding.scope is None or not binding.is_enabled:
                    continue
                if binding.loops:
                    yield from self._in_loop(model, binding)
                elif binding.scope.is_function:
                    yield from self._in_step_function(model, binding)

    def _in_loop(self, model: FileModel, binding: ScalerBinding) -> Iterator[Finding]:
        loop = binding.loops[-1]
        scope = binding.scope
        events = [e for e in scope.events if loop in e.loops and (e.kind in _TRAINING or _passes(e, binding.key))]
        if not events:
            return
        if _lazy(model, binding) or _fresh_optimizer_each_pass(model, binding, loop):
            return
        same_loop = [e for e in events if e.loops[-1] is loop]
        confidence = Confidence.HIGH
        if not same_loop:
            if not (isinstance(loop, cst.For) and _EPOCH_LOOP.search(code_of(loop.target))):
                return
            confidence = Confidence.MEDIUM
        where = "every iteration" if confidence is Confidence.HIGH else "every epoch"
        again = _built_again(model, binding, loop)
        if again is None:
            return  # the loop cannot run the construction twice (`break`, `return` after it)
        # Epochs are iterations too (issue 26, principle 2): a scaler built in the epoch loop restarts
        # its scale every epoch. That is proved when the loop runs it again; it is a warning (the training
        # still runs, the scale re-calibrates each epoch), reported by default, with no fix.
        yield self.finding(
            binding.call,
            f"`{short(binding.call)}` builds a new GradScaler {where}: the scale restarts at its initial value "
            "and never calibrates; build it once, before the loop",
            fix=_hoist_fix(model, binding) if same_loop else None,
            context=scope.name,
            assumption=assumption_text(again, "the condition around the construction"),
            severity=None if same_loop else Severity.WARNING,
        )

    def _in_step_function(self, model: FileModel, binding: ScalerBinding) -> Iterator[Finding]:
        scope = binding.scope
        function = scope.node
        assert isinstance(function, cst.FunctionDef)
        uses = [
            e
            for e in scope.events
            if e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE) and e.receiver == binding.key and not e.loops
        ]
        if any(e.loops for e in scope.events if e.kind is EventKind.BACKWARD):
            yield from self._per_epoch_function(model, binding)
            return
        if not uses:
            return
        callers = [
            e
            for e in model.calls_named(function.name.value)
            if e.loops
            and _repeated_call(model, e, epoch=False) is not None
        ]
        if not callers:
            return
        if binding.key.startswith("self."):
            return  # an attribute may be built once per object
        yield self.finding(
            binding.call,
            f"`{short(binding.call)}` builds a new GradScaler on every call of `{function.name.value}()`, "
            "which a loop calls once per step; build it once and pass it in",
            confidence=Confidence.MEDIUM,
            context=scope.name,
        )


    def _per_epoch_function(self, model: FileModel, binding: ScalerBinding) -> Iterator[Finding]:
        """A function with a training loop of its own that builds its scaler first, called by an epoch
        loop (animl #298): a new scaler every epoch. The caller may be in this file or, with a project,
        in another module of it (`for epoch in ...: train_one_epoch(...)` in `main.py`); the finding is
        here, at the construction, either way, and names the epoch loop."""
        scope = binding.scope
        function = scope.node
        # `self.scaler = GradScaler()` on every call replaces the last (issue 46, principle 2) unless restored.
        own = binding.key.startswith("self.") and binding.key.count(".") == 1
        if ("." in binding.key and not own) or _lazy(model, binding) or (own and restored(function, binding.key)):
            return
        uses = [
            e
            for e in scope.events
            if e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE) and e.receiver == binding.key and e.loops
        ]
        if not uses:
            return
        kept_here = functools.lru_cache(maxsize=1)(lambda: not own and _kept(function, binding.key))  # asked once a caller is found
        reaches: List[bool] = []  # the flow question, asked once and only when there is a caller

        def stepped_here() -> bool:
            if not reaches:
                reaches.append(_reaches_the_loop(model, binding, uses))
            return reaches[0]

        name = function.name.value
        message = (
            f"`{short(binding.call)}` builds a new GradScaler on every call of `{name}()`, which an epoch "
            "loop{where} calls once per epoch: the scale restarts every epoch; build it once and pass it in"
        )
        for caller_model, call, where in _epoch_callers(model, scope, name):
            if kept_here():
                return
            proof = _once_per_epoch(caller_model, call)
            if proof is None or not stepped_here():
                continue
            # A caller in another module: no fix (it would edit both files), the message names its place.
            yield self.finding(
                binding.call,
                message.format(where=where),
                # Principle 2: once per epoch, a warning by default when every epoch runs the call; under a
                # condition of its own (`if do_train:`) it rests on that condition.
                severity=Severity.WARNING,
                confidence=Confidence.MEDIUM if _conditional_in_loop(call) else Confidence.HIGH,
                context=scope.name,
                related=(("called once per epoch", call.call),),
                assumption=assumption_text(proof, "the condition around the call"),
            )
            return


def _epoch_callers(model: FileModel, scope, name: str):
    """(caller's model, call, where) for the calls of the function `scope` that could be an epoch loop's:
    this file's first, then (only if none of those is) the project's other modules."""
    for caller in model.calls_named(name):
        if not _names_callee(caller.target or "", name, scope):
            continue
        if any(s is scope for s in caller.scope.chain()):
            continue  # the epoch loop is the function's own (a restart), or a function nested in it
        yield model, caller, ""
    from amp_lint.analysis.summaries import callers_in_project

    for caller_model, site in callers_in_project(model, scope):
        yield caller_model, site, " of another module"


def _names_callee(target: str, name: str, scope) -> bool:
    """Is a call of `target` (as written, in this file) a call of the function or method `scope`?"""
    if scope.class_name is None:
        return target == name
    parts = target.split(".")
    return parts[-1] == name and len(parts) > 1


def _built_again(model: FileModel, binding: ScalerBinding, loop) -> Optional[Proof]:
    """Can the construction inside `loop` run on two of its iterations (see `_every_iteration`)? ASSUMED
    for a reset: the same name holds a scaler built before the loop, and some iteration skips this
    construction (`if diverged: scaler = GradScaler()`), so it may run only when something went wrong."""
    proof = _every_iteration(model, binding.scope, binding.statement, loop)
    if proof is not PROVED:
        return proof
    before = [
        other
        for bindings in model.scalers.values()
        for other in bindings
        if other is not binding and other.key == binding.key and other.scope is binding.scope and loop not in other.loops
    ]
    if not before:
        return proof
    flow = scope_flow(model, binding.scope)
    graph = flow.graph
    node = graph.node_of.get(id(binding.statement))
    body, latch = graph.loop_body.get(id(loop)), graph.loop_latch.get(id(loop))
    if node is None or body is None or latch is None or node == body:
        return proof
    return ASSUMED if flow.paths.query(body, latch, [node], start=body) is not None else proof


def _reaches_the_loop(model: FileModel, binding: ScalerBinding, uses) -> bool:
    """Is the scaler stepped in the loop the one built here: a path from the construction to a step or
    update in the loop with no other assignment of the name between?"""
    flow = scope_flow(model, binding.scope)
    graph = flow.graph
    built = graph.node_of.get(id(binding.statement))
    if built is None:
        return False
    others = [
        graph.node_of.get(id(site.statement))
        for site in model.assignment_sites
        if site.scope is binding.scope and site.target == binding.key and site.statement is not binding.statement
    ]
    for use in uses:
        node = flow.node(use)
        if node is not None and flow.paths.query(built, node, [n for n in others if n is not None]) is not None:
            return True
    return False


def _passes(event, key: str) -> bool:
    """A call in the loop that hands the scaler to a step function: `train_step(batch, scaler)`. A call that
    only stores it (`setattr(self, f"scaler{i}", scaler)`, `scalers.append(scaler)`) keeps one scaler per
    item (a model, an optimizer) and trains with none of them here."""
    return (
        event.kind is EventKind.CALL
        and any(dotted_name(arg.value) == key for arg in event.call.args)
        and not stores(event.call, key)
    )


def _lazy(model: FileModel, binding: ScalerBinding) -> bool:
    """`if scaler is None: scaler = GradScaler()`: built once, on first use."""
    for site in model.assignment_sites:
        if site.statement is binding.statement and site.target == binding.key:
            for branch in site.branches:
                test = code_of(branch.node.test) if isinstance(branch.node, cst.If) else ""
                if binding.key.split(".")[-1] in test:
                    return True
                # The rest of a block after `if x is None: continue` is that `if`'s implied else: a test of
                # something else than the scaler there says nothing about when the scaler is built.
                implied = not branch.taken and branch.node.orelse is None
                if not implied and _LAZY_TEST.search(test):
                    return True
    return False


def _hoist_fix(model: FileModel, binding: ScalerBinding) -> Optional[Fix]:
    statement = binding.statement
    inner = binding.loops[-1]
    outer = binding.loops[0]
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    if not isinstance(inner.body, cst.IndentedBlock) or statement not in inner.body.body:
        return None
    if not isinstance(statement.body[0], cst.Assign):
        return None
    used = _names_in(statement.body[0].value)
    bound = _bound_names(outer)
    if used & bound:
        return None
    builder = FixBuilder(model.module)
    builder.remove(statement)
    builder.insert_before(outer, statement.with_changes(leading_lines=()))
    return builder.build("Build the GradScaler once, before the loop", Applicability.SAFE)


def _bound_names(loop: Loop) -> Set[str]:
    """Names the loop (header and body) binds: targets, assignments, `as` names, definitions."""
    found: Set[str] = set()

    class Bindings(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            found.update(_names_in(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            found.update(_names_in(node.target))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            found.update(_names_in(node.target))

        def visit_For(self, node: cst.For) -> None:
            found.update(_names_in(node.target))

        def visit_AsName(self, node: cst.AsName) -> None:
            found.update(_names_in(node.name))

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            found.update(_names_in(node.target))

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            found.add(node.name.value)
            return False

    loop.visit(Bindings())
    return found


def _fresh_optimizer_each_pass(model: FileModel, binding: ScalerBinding, loop: Loop) -> bool:
    """Each pass also builds the optimizer the scaler steps (a sweep over configurations, each a fresh model
    and optimizer: `torch.optim.SGD(...)`, `model, opt = ipex.optimize(...)`): a new run per pass, whose
    scale starts afresh as it should."""
    stepped = {e.target for e in binding.scope.events if e.kind is EventKind.SCALER_STEP and e.receiver == binding.key and loop in e.loops}
    built = {
        site.target
        for site in (*model.assignment_sites, *model.unpacked_sites)
        if site.scope is binding.scope and loop in site.loops and isinstance(site.value, cst.Call)
    }
    return bool(stepped) and stepped <= built