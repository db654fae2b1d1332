from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional

import libcst as cst

from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder
from amp_lint.fixes.reindent import shifted
from amp_lint.analysis.events import AutocastRegion, enabled_region
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_PROTOCOL = (
    EventKind.BACKWARD,
    EventKind.AUTOGRAD_GRAD,
    EventKind.SCALER_STEP,
    EventKind.SCALER_UPDATE,
    EventKind.SCALER_UNSCALE,
    EventKind.OPTIMIZER_STEP,
    EventKind.ZERO_GRAD,
    EventKind.CLIP,
)


class BackwardInAutocast(Rule):
    """
    ## What it does
    Finds a backward pass (`loss.backward()`, `scaler.scale(loss).backward()`,
    `torch.autograd.backward`, `torch.autograd.grad`, a framework's `accelerator.backward(loss)`) that runs
    inside an enabled autocast region: a `torch.autocast` block or decorated function, or a framework's own
    autocast block (`with accelerator.autocast():`, which enters `torch.autocast` when the run is configured
    for mixed precision).

    ## Why is this bad?
    autocast "should wrap only the forward pass(es) of your network, including the loss
    computation(s). Backward passes under autocast are not recommended." The autocast state travels
    into the backward pass, so the backward of any part you deliberately kept in float32
    (`autocast(enabled=False)`, `custom_fwd(cast_inputs=torch.float32)`) runs in float16 or bfloat16:
    lost precision and, with float16, an overflow risk. With `torch.compile` the wrong assumption is
    baked into the compiled graph.

    ## Example
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Safe. The `with` block is split at the first backward call: the statements before it stay inside,
    the backward and everything after it move out of the block. When a second forward pass follows
    (a GAN's generator step), it gets its own `with` of the same autocast. No fix when autocast is a
    function decorator or the `with` sits inside another enabled autocast (the decorator of its function,
    an outer `with`: the backward would still run under it), when the `with` has other context managers, when its `as` name is used after
    the split, or when the backward is nested deeper inside the block (but an `if` whose every branch
    opens with the backward or another protocol call moves out whole).

    ## References
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) docstring
    - [AMP examples: typical mixed precision training](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training)
    - pytorch/pytorch#105682, #125186 (backward matmuls ran in the wrong dtype)
    """

    code = "AMP001"
    name = "backward-inside-autocast"
    summary = "Backward pass runs inside an autocast region"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"\bautocast\b", r"\bbackward\b|\bautograd\b")

    valid = [
        # A framework's autocast block (accelerate, Lightning Fabric), the backward after it.
        """
for batch in loader:
    with self.accelerator.autocast():
        loss = self.model(batch)
    self.accelerator.backward(loss)
    self.opt.step()
""",
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # autocast(enabled=False) switches autocast off inside an enabled region.
        """
import torch
with torch.autocast("cuda"):
    out = model(x)
    with torch.autocast("cuda", enabled=False):
        loss = out.float().sum()
        loss.backward()
""",
        # A user's own `autocast` is not torch's.
        """
from contextlib import contextmanager
@contextmanager
def autocast():
    yield
with autocast():
    loss.backward()
""",
    ]
    invalid = [
        # A framework's autocast is autocast too (lucidrains' trainers: `with self.accelerator.autocast():`).
        Invalid(
            """
for batch in loader:
    with self.accelerator.autocast():
        loss = self.model(batch)
        self.accelerator.backward(loss)
    self.opt.step()
""",
            fixed="""
for batch in loader:
    with self.accelerator.autocast():
        loss = self.model(batch)
    self.accelerator.backward(loss)
    self.opt.step()
""",
        ),
        # A framework's backward inside an explicit torch.autocast block (diffusers textual_inversion_bf16).
        Invalid(
            """
import torch
with torch.autocast("cuda"):
    loss = model(x)
    accelerator.backward(loss)
""",
            fixed="""
import torch
with torch.autocast("cuda"):
    loss = model(x)
accelerator.backward(loss)
""",
        ),
        Invalid(
            """
import torch
for batch in loader:
    with torch.cpu.amp.autocast():
        loss = model(batch).loss
        accelerator.backward(loss)
    optimizer.step()
""",
            fixed="""
import torch
for batch in loader:
    with torch.cpu.amp.autocast():
        loss = model(batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
        ),
        Invalid(
            """
import torch
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
        # scale, then backpropagate
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            fixed="""
import torch
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    # scale, then backpropagate
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
from torch.cuda.amp import autocast as ac
def train_step(model, x):
    with ac():
        loss = model(x).sum()
        loss.backward()
""",
            fixed="""
from torch.cuda.amp import autocast as ac
def train_step(model, x):
    with ac():
        loss = model(x).sum()
    loss.backward()
""",
        ),
        # A context manager bound to a name, chosen at run time.
        Invalid(
            """
import contextlib
import torch
ctx = torch.autocast("cuda") if use_amp else contextlib.nullcontext()
with ctx:
    loss = model(x).sum()
    loss.backward()
""",
            fixed="""
import contextlib
import torch
ctx = torch.autocast("cuda") if use_amp else contextlib.nullcontext()
with ctx:
    loss = model(x).sum()
loss.backward()
""",
        ),
        # GAN: the generator's forward gets its own autocast block.
        Invalid(
            """
import torch
with torch.autocast("cuda"):
    d_loss = d_loss_fn(D(real), D(G(z).detach()))
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    g_loss = g_loss_fn(D(G(z)))
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
            fixed="""
import torch
with torch.autocast("cuda"):
    d_loss = d_loss_fn(D(real), D(G(z).detach()))
scaler.scale(d_loss).backward()
scaler.step(opt_d)
with torch.autocast("cuda"):
    g_loss = g_loss_fn(D(G(z)))
scaler.scale(g_loss).backward()
scaler.step(opt_g)
scaler.update()
""",
            count=2,
        ),
        # Decorator form: reported, not fixed.
        Invalid(
            """
import torch
@torch.autocast("cuda")
def step(model, x):
    loss = model(x).sum()
    loss.backward()
""",
        ),
        # A `with` inside a decorated function: splitting it would leave the backward under the decorator,
        # so no fix is offered (issue 29).
        Invalid(
            """
import torch
@torch.autocast("cuda")
def step(model, x, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).sum()
        loss.backward()
    optimizer.step()
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        fixes = {}
        events_of: Dict[int, List[Event]] = {}  # id(statement) -> its events: each fix looks up its own tail only
        for event in model.events:
            events_of.setdefault(id(event.statement), []).append(event)
        # A framework's `accelerator.backward(loss)` inside an explicit `torch.autocast` block is still a
        # backward under autocast (issue 14: diffusers textual_inversion_bf16).
        for event in sorted(model.events + model.wrapper_backwards, key=lambda e: e.index):
            if event.kind not in (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD):
                continue
            region = event.in_enabled_autocast()
            if region is None and not event.regions:
                # `with accelerator.autocast():` is autocast too, whoever provides it; the same split fixes it.
                region = model.framework_region_of(event.statement)
            if region is None:
                continue
            if region.node not in fixes:
                # Out of this `with`, the backward would still run under an enclosing autocast (a decorated
                # function, an outer `with`): the split would not fix it, so it is not offered (issue 29).
                position = next((i for i, r in enumerate(event.regions) if r is region), 0)
                outer = list(event.regions[:position])
                still_under = enabled_region(outer) is not None
                fixes[region.node] = None if still_under else _split_fix(model, region, event, events_of)
            where = "a function decorated with" if region.is_decorator else "the block of"
            yield self.finding(
                event.call,
                f"`{short(event.call)}` runs inside {where} `{_autocast_text(region)}`; "
                "run the backward pass after leaving autocast",
                fix=fixes[region.node],
                context=event.scope.name,
            )


def _autocast_text(region: AutocastRegion) -> str:
    node = region.item.item if region.item is not None else (region.spec.call or None)
    return short(node) if node is not None else "autocast"


def _split_fix(model: FileModel, region: AutocastRegion, first: Event, events_of: Dict[int, List[Event]]) -> Optional[Fix]:
    """Split the `with` at the first backward: what follows moves out, later forwards get their own `with`."""
    node = region.node
    if region.is_decorator or not isinstance(node, cst.With) or len(node.items) != 1:
        return None
    if not isinstance(node.body, cst.IndentedBlock):
        return None
    body = list(node.body.body)
    holder = _holder_in(model, body, first.statement, events_of)
    if holder is None:
        return None
    split = body.index(holder)
    tail = body[split:]
    asname = node.items[0].asname
    if asname is not None:
        name = code_of(asname.name)
        if any(re.search(rf"\b{re.escape(name)}\b", code_of(statement)) for statement in tail):
            return None
    tail_events = [e for statement in tail for e in events_of.get(id(statement), ())]
    protocol_statements = {id(e.statement) for e in tail_events if e.kind in _PROTOCOL}
    backward_statements = {id(e.statement) for e in tail_events if e.kind in (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD)}
    zero_grad_statements = {id(e.statement) for e in tail_events if e.kind is EventKind.ZERO_GRAD}
    protocol_statements.add(id(holder))  # an `if` around the backward is the backward's statement here
    backward_statements.add(id(holder))
    segments = _segments(tail, protocol_statements, backward_statements, zero_grad_statements)

    def rewrite(updated: cst.CSTNode) -> cst.FlattenSentinel:
        assert isinstance(updated, cst.With) and isinstance(updated.body, cst.IndentedBlock)
        head = list(updated.body.body[:split])
        moved = list(updated.body.body[split:])
        out: List[cst.BaseStatement] = []
        if head:
            out.append(updated.with_changes(body=updated.body.with_changes(body=head)))
        for start, end, reopen in segments:
            statements = moved[start:end]
            if reopen:
                block = updated.body.with_changes(body=statements, footer=())
                out.append(updated.with_changes(body=block, leading_lines=()))
            else:  # one block shallower, every line of it (a backslash continuation too)
                indent = updated.body.indent if updated.body.indent is not None else model.module.default_indent
                out.extend(shifted(statement, indent, deeper=False) for statement in statements)
        if not head and out:
            # The whole block moved out: keep the comments that stood above the `with`.
            first_statement = out[0]
            out[0] = first_statement.with_changes(leading_lines=tuple(updated.leading_lines) + tuple(first_statement.leading_lines))
        return cst.FlattenSentinel(out)

    builder = FixBuilder(model.module)
    builder.replace(node, rewrite)
    return builder.build("Move the backward pass out of the autocast block", Applicability.SAFE, key=("AMP001", node))


def _holder_in(model: FileModel, body: List[cst.CSTNode], statement: cst.CSTNode, events_of: Dict[int, List[Event]]):
    """The statement of the block's body that holds the backward: the backward's own, or an `if` around it
    (ignite: `if scaler: scaler.scale(loss).backward() ... else: loss.backward() ...`) whose every branch
    opens with a protocol call (a backward, a step), so that no forward work moves out of autocast with it."""
    if statement in body:
        return statement
    node = model.parents.get(id(statement))
    while node is not None and node not in body:
        node = model.parents.get(id(node))
    if not isinstance(node, cst.If):
        return None
    branch: Optional[cst.CSTNode] = node
    while isinstance(branch, cst.If):
        opening = branch.body.body[0] if isinstance(branch.body, cst.IndentedBlock) and branch.body.body else None
        if opening is None or not any(e.kind in _PROTOCOL for e in events_of.get(id(opening), ())):
            return None
        branch = branch.orelse.body if isinstance(branch.orelse, cst.Else) else branch.orelse
        if isinstance(branch, cst.IndentedBlock):
            opening = branch.body[0] if branch.body else None
            if opening is None or not any(e.kind in _PROTOCOL for e in events_of.get(id(opening), ())):
                return None
            break
    return node


def _segments(tail, protocol_statements, backward_statements, zero_grad_statements):
    """Runs of the moved statements: (start, end, reopen) where reopen marks a later forward pass.

    A run of non-protocol statements that ends right before another backward is forward work (the
    generator's loss in a GAN step): it keeps running under autocast in a `with` of its own.
    """
    segments = []
    index = 0
    while index < len(tail):
        statement = tail[index]
        if id(statement) in protocol_statements:
            segments.append((index, index + 1, False))
            index += 1
            continue
        end = index
        while end < len(tail) and id(tail[end]) not in protocol_statements:
            end += 1
        following = end
        while following < len(tail) and id(tail[following]) in zero_grad_statements:
            following += 1  # `opt_g.zero_grad()` between a forward and its backward
        reopen = following < len(tail) and id(tail[following]) in backward_statements
        segments.append((index, end, reopen))
        index = end
    return segments
