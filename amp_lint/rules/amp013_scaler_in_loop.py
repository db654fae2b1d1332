from __future__ import annotations

import re
from typing import Iterator, Optional, Set

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import FileModel, ScalerBinding
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import Loop, code_of
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_TRAINING = (EventKind.BACKWARD, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.OPTIMIZER_STEP)
_LAZY_TEST = re.compile(r"None|hasattr|getattr|first|== ?0\b|not in|is_initialized|_init", re.IGNORECASE)
_EPOCH_LOOP = re.compile(r"^(epoch|ep|epoch_idx|epoch_id|e|i_epoch|epoch_num|n_epoch)$|epoch", re.IGNORECASE)


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
    function, or once per epoch, is reported at medium confidence without a fix.

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
        # A loop that only builds things.
        """
import torch
scalers = []
for name in ("a", "b"):
    scalers.append(torch.amp.GradScaler("cuda"))
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
        if _lazy(model, binding):
            return
        same_loop = [e for e in events if e.loops[-1] is loop]
        confidence = Confidence.HIGH
        if not same_loop:
            if not (isinstance(loop, cst.For) and _EPOCH_LOOP.search(code_of(loop.target))):
                return
            confidence = Confidence.MEDIUM
        where = "every iteration" if confidence is Confidence.HIGH else "every epoch"
        yield self.finding(
            binding.call,
            f"`{short(binding.call)}` builds a new GradScaler {where}: the scale restarts at its initial value "
            "and never calibrates; build it once, before the loop",
            fix=_hoist_fix(model, binding) if confidence is Confidence.HIGH else None,
            confidence=confidence,
            context=scope.name,
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
            for e in model.events
            if e.kind is EventKind.CALL and (e.target or "").split(".")[-1] == function.name.value and e.loops
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
        loop (animl #298): a new scaler every epoch."""
        scope = binding.scope
        function = scope.node
        if binding.key.startswith("self.") or _lazy(model, binding):
            return
        if not any(e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE) and e.receiver == binding.key and e.loops for e in scope.events):
            return
        name = function.name.value
        for caller in model.events:
            loop = caller.loop
            if (
                caller.kind is EventKind.CALL
                and (caller.target or "").split(".")[-1] == name
                and isinstance(loop, cst.For)
                and _EPOCH_LOOP.search(code_of(loop.target))
                and caller.scope is not scope
            ):
                yield self.finding(
                    binding.call,
                    f"`{short(binding.call)}` builds a new GradScaler on every call of `{name}()`, which an epoch "
                    "loop calls once per epoch: the scale restarts every epoch; build it once and pass it in",
                    confidence=Confidence.MEDIUM,
                    context=scope.name,
                    related=(("called once per epoch", caller.call),),
                )
                return


def _passes(event, key: str) -> bool:
    """A call in the loop that hands the scaler to a step function: `train_step(batch, scaler)`."""
    return event.kind is EventKind.CALL and any(dotted_name(arg.value) == key for arg in event.call.args)


def _lazy(model: FileModel, binding: ScalerBinding) -> bool:
    """`if scaler is None: scaler = GradScaler()`: built once, on first use."""
    for site in model.assignment_sites:
        if site.statement is binding.statement and site.target == binding.key:
            for branch in site.branches:
                test = code_of(branch.node.test) if isinstance(branch.node, cst.If) else ""
                if _LAZY_TEST.search(test) or binding.key.split(".")[-1] in test:
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


def _names_in(node: cst.CSTNode) -> Set[str]:
    found: Set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            attribute.value.visit(self)
            return False

        def visit_Arg(self, arg: cst.Arg) -> bool:
            arg.value.visit(self)
            return False

    node.visit(Names())
    return found


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
