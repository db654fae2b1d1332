"""AMP030 and AMP040-AMP043 ask path questions (issue 14, point 1): the flow queries they use, and the shapes
where the old lexical answer (source order, enclosing `if`s, `loops ==`) was wrong and the path is right.
Each snippet is written here from the shape its comment names."""

from __future__ import annotations

import textwrap

import libcst as cst

from amp_lint.analysis.builder import build_model
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.paths import ASSUMED, PROVED
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis.flow_queries import call_levels, condition_of, gate, path_with, scope_flow
from amp_lint.engine.checker import Checker
from amp_lint.rules._helpers import accumulation


def _check(source: str, *codes: str, **options):
    result = Checker(frozenset(codes), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return result


def _codes(source: str, *codes: str, **options):
    return [d.code for d in _check(source, *codes, **options).diagnostics]


def _fixed(source: str, *codes: str):
    return _check(source, *codes, fix=True).fixed_source


def _step(source: str):
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    step = next(s for s in model.steps if s.loop is not None)
    return model, step, flow_of(model, step)


# --- the queries -------------------------------------------------------------------------------------

_ACCUMULATE = """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if use_clip:
        scaler.unscale_(optimizer)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
"""


def test_a_condition_held_on_the_whole_path():
    model, step, flow = _step(_ACCUMULATE)
    backward = step.of(EventKind.BACKWARD)[0]
    unscale = step.of(EventKind.SCALER_UNSCALE)[0]
    scaler_step = step.of(EventKind.SCALER_STEP)[0]
    key = "(i+1)%accum==0"
    # On a micro-batch that only accumulates, the unscale_ runs and the step does not.
    assert path_with(flow, backward, unscale, holding=((key, False),)) is PROVED
    assert path_with(flow, backward, scaler_step, holding=((key, False),)) is None
    assert path_with(flow, backward, scaler_step, holding=((key, True),)) is PROVED
    # The step's gate is the boundary test, true; the unscale_ has none.
    graph = flow.flow
    assert gate(graph, flow.start, flow.node(scaler_step), key) is True
    assert gate(graph, flow.start, flow.node(unscale), key) is None


def test_avoiding_a_branch_is_avoiding_its_first_node():
    model, step, flow = _step(_ACCUMULATE)
    backward = step.of(EventKind.BACKWARD)[0]
    update = step.of(EventKind.SCALER_UPDATE)[0]
    graph = flow.flow.graph
    test = next(n for n, s in enumerate(graph.statements) if isinstance(s, cst.If) and "accum" in cst.Module([]).code_for_node(s.test))
    assert condition_of(flow.flow, test) == ("(i+1)%accum==0", True)
    body = graph.succ[test][0][0]
    assert path_with(flow, backward, update) is PROVED
    assert path_with(flow, backward, update, nodes=[body]) is None
    # The iteration's start (None) and end work as ends too.
    assert path_with(flow, None, update) is PROVED
    assert path_with(flow, update, None) is PROVED


def test_an_unknown_condition_makes_the_path_assumed():
    model, step, flow = _step(
        """
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if flag:
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
"""
    )
    backward = step.of(EventKind.BACKWARD)[0]
    unscale = step.of(EventKind.SCALER_UNSCALE)[0]
    scaler_step = step.of(EventKind.SCALER_STEP)[0]
    assert path_with(flow, backward, scaler_step, avoid=[unscale]) is ASSUMED


def test_the_accumulation_boundary_is_the_condition_that_gates_the_step():
    model, step, flow = _step(_ACCUMULATE)
    acc = accumulation(model, step)
    assert acc is not None and (acc.gate.key, acc.gate.value, acc.gate.in_body) == ("(i+1)%accum==0", True, True)
    assert acc.at_boundary(step.of(EventKind.SCALER_STEP)[0])
    assert acc.every_micro_batch(step.of(EventKind.SCALER_UNSCALE)[0]) is PROVED
    assert acc.every_micro_batch(step.of(EventKind.SCALER_UPDATE)[0]) is None
    # Written as an early `continue`: the same boundary, on the other side of its `if`.
    model, step, flow = _step(
        """
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum != 0:
        continue
    scaler.step(optimizer)
    scaler.update()
"""
    )
    acc = accumulation(model, step)
    assert acc is not None and (acc.gate.value, acc.gate.in_body) == (False, False)
    assert acc.waits_for() == "`if (i + 1) % accum != 0` fails"
    # `update(new_scale)` on one side and `update()` on the other: both ways, no boundary.
    model, step, flow = _step(
        """
for i, x in enumerate(loader):
    optimizer.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    if i % reset_every == 0:
        scaler.update(2.0**12)
    else:
        scaler.update()
"""
    )
    assert accumulation(model, step) is None


def test_call_levels_follow_the_helpers():
    source = """
class Trainer:
    def _step(self):
        if self.ready:
            self.scaler.step(self.optimizer)

    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).sum()).backward()
            self._step()
"""
    model, step, flow = _step(source)
    scaler_step = step.of(EventKind.SCALER_STEP)[0]
    levels = call_levels(model, flow, scaler_step)
    assert [graph.scope.name for graph, _, _ in levels] == ["Trainer.fit", "Trainer._step"]
    helper, entry, node = levels[1]
    assert gate(helper, entry, node, "self.ready") is True
    assert scope_flow(model, helper.scope) is helper  # one graph per scope


# --- AMP041 ------------------------------------------------------------------------------------------


def test_amp041_boundary_written_as_an_early_continue():
    # The early-`continue` accumulation loop (`if (step + 1) % gradient_accumulation_steps != 0: continue`):
    # the step waits for the test to fail. No `if` encloses the step, so the lexical model saw no
    # accumulation at all; on the paths, the unscale_ runs on every micro-batch and raises on the second.
    source = """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    scaler.unscale_(optimizer)
    if (i + 1) % accum != 0:
        continue
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""
    found = _check(source, "AMP041").diagnostics
    assert [d.code for d in found] == ["AMP041"]
    assert "the step waits for `if (i + 1) % accum != 0` to fail" in found[0].message
    assert _fixed(source, "AMP041") is None  # the block to move into is not the `if` body: no fix
    correct = """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    if (i + 1) % accum != 0:
        continue
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""
    assert _codes(correct, "AMP041", "AMP040", "AMP042", "AMP043", "AMP024") == []


def test_amp041_while_loop_with_continue_boundary():
    # A `while` training loop that counts micro-batches and `continue`s until the boundary.
    source = """
import torch
while step < total:
    x = next(batches)
    micro += 1
    scaler.scale(model(x).sum() / accum).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if micro % accum:
        continue
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    step += 1
"""
    assert _codes(source, "AMP041") == ["AMP041"]


def test_amp041_boundary_inside_a_helper():
    # The step helper decides the boundary itself (a Trainer's `optimizer_step`): the gate is in the
    # helper's graph, reached through the call.
    source = """
import torch
class Trainer:
    def optimizer_step(self):
        if (self.it + 1) % self.accum == 0:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).sum() / self.accum).backward()
            self.scaler.unscale_(self.optimizer)
            self.optimizer_step()
            self.it += 1
"""
    assert _codes(source, "AMP041") == ["AMP041"]
    assert _fixed(source, "AMP041") is None


def test_amp041_periodic_norm_logging_is_not_every_micro_batch():
    # A norm read for the log every `log_every` micro-batches waits for a test of its own: silent, as before.
    source = """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    if (i + 1) % accum == 0:
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    if i % log_every == 0:
        log(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
"""
    assert _codes(source, "AMP041") == []


def test_amp041_unscale_only_in_an_oom_handler_is_assumed():
    # An unscale_ that runs only when the backward raises (an OOM handler that still clips): reported only
    # as an assumption (the exception happens), at medium confidence.
    source = """
import torch
for i, (x, y) in enumerate(loader):
    try:
        scaler.scale(loss_fn(model(x), y) / accum).backward()
    except RuntimeError:
        scaler.unscale_(optimizer)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
    assert _codes(source, "AMP041") == []
    shown = _check(source, "AMP041", show_assumed=True).diagnostics
    assert [d.code for d in shown] == ["AMP041"] and shown[0].confidence.value == "medium"


def test_amp041_no_fix_when_the_norm_is_read_after_the_boundary():
    # `norm = clip_grad_norm_(...)` every micro-batch and `log(norm)` after the boundary block: moving the
    # clip into the block leaves `norm` unbound on the first micro-batch (NameError). The old fix moved it
    # (its name check read no plain assignment target); now it is refused, the findings stay.
    source = """
import torch
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    log(norm)
"""
    assert _codes(source, "AMP041") == ["AMP041", "AMP041"]
    assert _fixed(source, "AMP041") is None


# --- AMP040 ------------------------------------------------------------------------------------------


def test_amp040_step_under_a_flag_of_its_own_still_runs_every_micro_batch():
    # A loop that steps through the scaler only when AMP is on (`GradScaler(enabled=use_amp)`, the backward
    # through the scaler either way) and clears the gradients at the boundary. The lexical model saw the
    # step under an `if` the backward is not under and stayed silent; on the paths, with AMP on, the step
    # runs on every micro-batch.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    if use_amp:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if (i + 1) % accum == 0:
        optimizer.zero_grad()
"""
    found = _check(source, "AMP040").diagnostics
    assert [(d.code, d.confidence.value) for d in found] == [("AMP040", "high")]
    assert _fixed(source, "AMP040") is None  # the step is not a statement of the loop body: no move


def test_amp040_guard_set_in_the_loop_may_be_the_boundary():
    # `do_step` computed in the loop may be the boundary under another name: an assumption, not a finding
    # by default.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    do_step = ready(i)
    if do_step:
        scaler.step(optimizer)
        scaler.update()
    if (i + 1) % accum == 0:
        optimizer.zero_grad()
"""
    assert _codes(source, "AMP040") == []
    shown = _check(source, "AMP040", show_assumed=True).diagnostics
    assert [(d.code, d.confidence.value) for d in shown] == [("AMP040", "medium")]


def test_amp040_update_after_an_early_continue_boundary():
    # The step before `if (i + 1) % accum != 0: continue`, the update after it: the second micro-batch's
    # step raises "step() has already been called since the last update()". No `if` holds the update, so
    # the lexical model found no boundary.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y) / accum).backward()
    scaler.step(optimizer)
    if (i + 1) % accum != 0:
        continue
    scaler.update()
    optimizer.zero_grad()
"""
    found = _check(source, "AMP040").diagnostics
    assert [(d.code, d.location.row) for d in found] == [("AMP040", 6)]
    assert _fixed(source, "AMP040") is None


# --- AMP042 ------------------------------------------------------------------------------------------
# (a heuristic rule: its findings are medium confidence, shown with --show-assumed)


def test_amp042_division_after_the_backward_does_not_divide_the_gradients():
    # The loss divided only for the log line, after the backward: the gradients summed over `accum`
    # micro-batches are `accum` times the mean. The lexical model took any assignment of the file's scope.
    source = """
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    loss = loss / accum
    log(loss)
"""
    assert _codes(source, "AMP042", show_assumed=True) == ["AMP042"]


def test_amp042_division_on_the_path_before_the_loop_and_in_a_branch():
    # The divisor folded in before the loop (`scale = 1 / accum`), and the division on one branch of an
    # if/else that merges before the backward: both reach it.
    before_loop = """
scale = 1.0 / accum
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) * scale
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
    assert _codes(before_loop, "AMP042", show_assumed=True) == []
    branch = """
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    if reduce_mean:
        loss = loss / accum
    else:
        loss = loss.sum()
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
    assert _codes(branch, "AMP042", show_assumed=True) == []


def test_amp042_early_continue_boundary():
    # `if (i + 1) % accum != 0: continue`: the modulo's divisor is the accumulation count all the same.
    source = """
for i, (x, y) in enumerate(loader):
    scaler.scale(loss_fn(model(x), y)).backward()
    if (i + 1) % accum != 0:
        continue
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""
    assert _codes(source, "AMP042", show_assumed=True) == ["AMP042"]


# --- AMP043 ------------------------------------------------------------------------------------------


def test_amp043_zero_grad_then_continue_from_a_nested_if():
    # Skipping a bad batch: clear the gradients when asked, then `continue` from the enclosing block. The
    # step never follows that zero_grad: no path (the block scan for a `break`/`continue` after the
    # zero_grad, in its own block only, is gone).
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
while True:
    batch = next(batches, None)
    if batch is None:
        break
    loss = model(batch).sum()
    scaler.scale(loss).backward()
    if not torch.isfinite(loss):
        if clear_on_nan:
            optimizer.zero_grad()
        continue
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""
    assert _codes(source, "AMP043", show_assumed=True) == []


def test_amp043_zero_grad_on_the_branch_without_the_second_backward():
    # An auxiliary backward on one branch, `zero_grad()` on the other: on the path without the auxiliary
    # loss the step finds no gradients. The lexical check took the last backward in the text (the
    # auxiliary one), which is not on the zero_grad's path, and stayed silent.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward(retain_graph=True)
    if extra:
        scaler.scale(aux(x)).backward()
    else:
        optimizer.zero_grad()
    scaler.step(optimizer)
    scaler.update()
"""
    found = _check(source, "AMP043").diagnostics
    assert [(d.code, d.location.row, d.confidence.value) for d in found] == [("AMP043", 9, "high")]
    assert "scaler.scale(model(x).sum()).backward" in found[0].message


def test_amp043_a_backward_after_the_zero_grad_refills_the_gradients():
    # GAN-style: the second optimizer's zero_grad after the first backward, then its own backward, in a
    # `try` whose handler retries: the refilled gradients are what the step reads.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    try:
        scaler.scale(d_loss(x)).backward()
        scaler.step(opt_d)
        opt_g.zero_grad()
        scaler.scale(g_loss(x)).backward()
    except RuntimeError:
        continue
    scaler.step(opt_g)
    scaler.update()
"""
    assert _codes(source, "AMP043", show_assumed=True) == []


# --- AMP030 ------------------------------------------------------------------------------------------


def test_amp030_no_fix_names_an_optimizer_that_a_later_loop_binds():
    # Clipping per parameter group in one inner loop, stepping per optimizer in another: `opt` exists only
    # inside the second loop. The lexical check compared loop depths (equal here) and inserted
    # `scaler.unscale_(opt)` before the first loop, where `opt` is unbound (or the previous batch's).
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for group in param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], 1.0)
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
"""
    assert _codes(source, "AMP030") == ["AMP030"]
    assert _fixed(source, "AMP030") is None


def test_amp030_one_finding_per_pass_over_the_parameters():
    # Reads on both arms of an if/else in one loop over the parameters: one finding (the first arm), and
    # one more for a second loop; the fix inserts one unscale_, before the first loop.
    source = """
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for p in model.parameters():
        if p.grad is None:
            continue
        if clamp:
            p.grad.data.clamp_(-1.0, 1.0)
        else:
            p.grad.data.clamp_(-2.0, 2.0)
    for p in model.parameters():
        stats.append(p.grad.norm())
    scaler.step(optimizer)
    scaler.update()
"""
    found = _check(source, "AMP030").diagnostics
    assert [(d.code, d.location.row) for d in found] == [("AMP030", 9), ("AMP030", 13)]
    fixed = _fixed(source, "AMP030")
    assert fixed is not None and fixed.count("scaler.unscale_(optimizer)") == 1
    assert fixed.index("scaler.unscale_(optimizer)") < fixed.index("for p in model.parameters()")


def test_amp041_a_guard_the_backward_waits_for_too_is_not_the_events_own():
    # A `while` loop that stops on an empty batch: everything after the `break` test waits for it, the
    # backward too, so it says nothing about the unscale_ on the micro-batches: a proved finding.
    source = """
import torch
while True:
    batch = next(batches, None)
    if batch is None:
        break
    scaler.scale(model(batch).sum() / accum).backward()
    scaler.unscale_(optimizer)
    if (step + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    step += 1
"""
    found = _check(source, "AMP041").diagnostics
    assert [(d.code, d.confidence.value) for d in found] == [("AMP041", "high")]


def test_amp043_zero_grad_then_early_return_in_a_step_function():
    # A step function that drops a non-finite loss: zero_grad, then `return` before the step. No path on;
    # the same zero_grad without the return is reported.
    source = """
import torch
class Trainer:
    def train_step(self, batch):
        loss = self.model(batch).sum()
        self.scaler.scale(loss).backward()
        if not torch.isfinite(loss):
            self.optimizer.zero_grad()
            return None
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss
"""
    assert _codes(source, "AMP043", show_assumed=True) == []
    assert _codes(source.replace("            return None\n", ""), "AMP043", show_assumed=True) == ["AMP043"]
