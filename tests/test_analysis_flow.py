"""The analysis v2 (control flow, correlated conditions, scaled values, confidence) on the shapes of
issues 14 and 16. Every snippet is written here from the shape the issue names; its origin is in the comment."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amp_lint.analysis import cfg
from amp_lint.analysis.builder import build_model
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.paths import ASSUMED, PROVED, Paths
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.engine.checker import Checker


def _check(source: str, *codes: str, **options):
    result = Checker(frozenset(codes), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return result


def _codes(source: str, *codes: str, **options):
    return [d.code for d in _check(source, *codes, **options).diagnostics]


def _fix_leaves_unchanged(source: str, *codes: str) -> None:
    for unsafe in (False, True):
        result = _check(source, *codes, fix=True, unsafe_fixes=unsafe)
        assert result.fixed_source is None or result.fixed_source == textwrap.dedent(source)


# --- the graph and its paths ---------------------------------------------------------------------


def _graph(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    function = next(s for s in module.body if isinstance(s, cst.FunctionDef))
    graph = cfg.build(function)
    lines = {}
    for node, statement in enumerate(graph.statements):
        if isinstance(statement, cst.SimpleStatementLine):
            lines[cst.Module([]).code_for_node(statement).strip()] = node
    return graph, Paths(graph), lines


def test_forward_edges_go_to_smaller_nodes():
    graph, _, _ = _graph(
        """
def f():
    for x in y:
        try:
            a()
        except E:
            continue
        finally:
            b()
        while c:
            if d:
                break
        else:
            e()
    match z:
        case 1:
            g()
    return h
"""
    )
    for node, edges in enumerate(graph.succ):
        for target, _ in edges:
            assert target < node
    assert graph.back  # the loops' latches


def test_if_else_paths_do_not_meet_and_correlated_tests_agree():
    _, paths, at = _graph(
        """
def f():
    if use_amp:
        a()
    else:
        b()
    if use_amp:
        c()
    d()
"""
    )
    assert paths.query(at["a()"], at["b()"]) is None
    assert paths.query(at["b()"], at["c()"]) is None  # the same test: not use_amp, then use_amp
    assert paths.query(at["a()"], at["c()"]) is PROVED
    assert paths.query(at["b()"], at["d()"]) is PROVED


def test_path_that_needs_an_unknown_condition_is_assumed():
    _, paths, at = _graph(
        """
def f():
    a()
    if flag:
        b()
    c()
"""
    )
    # a() -> c() without b(): only when `flag` is false, which nothing shows.
    assert paths.query(at["a()"], at["c()"], [at["b()"]]) is ASSUMED
    assert paths.query(at["a()"], at["c()"]) is PROVED


# --- issue 14, point 1: paths ---------------------------------------------------------------------


def test_grads_stay_scaled_after_a_micro_step_loop():
    # miles-credit PR #141: backward in an inner loop, clipping after it.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    for m in range(k):
        scaler.scale(model(batch[m]).sum()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
    assert _codes(source, "AMP030") == ["AMP030"]


def test_grads_stay_scaled_after_an_if_else_merge():
    # neural_sp: the scaled or the fp32 backward, then clipping for both.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x).sum()
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if use_amp:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
"""
    assert _codes(source, "AMP030") == ["AMP030"]


def test_flow_sees_the_continue_path():
    # LVSM PR #19 / espnet #2362: unscale, then `continue` on a non-finite norm skips step and update.
    source = """
import torch
def train(scaler, optimizer):
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if not torch.isfinite(norm):
            continue
        scaler.step(optimizer)
        scaler.update()
"""
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    step = next(s for s in model.steps if s.loop is not None)
    flow = flow_of(model, step)
    unscale = step.of(EventKind.SCALER_UNSCALE)[0]
    update = step.of(EventKind.SCALER_UPDATE)[0]
    assert flow.next_iteration(unscale, unscale, [update]) is PROVED
    assert _codes(source, "AMP024") == ["AMP024"]


def test_unscale_under_its_own_flag_on_every_micro_batch():
    # Swin-Transformer #311: `if clip_grad: unscale_ + clip` on every micro-batch, the step at the boundary.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for idx, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum
    scaler.scale(loss).backward()
    if clip_grad:
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    if (idx + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
    assert _codes(source, "AMP041") == ["AMP041", "AMP041"]
    assert _codes(source, "AMP024") == []  # the same bug, reported once, by the more specific rule


def test_oom_handler_that_falls_through_is_an_assumption():
    # fairseq's ddp_trainer: the handler counts the OOM, zero-grads and the step still follows.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    try:
        loss = model(x).sum()
        scaler.scale(loss).backward()
    except RuntimeError as e:
        if "out of memory" in str(e):
            ooms += 1
            optimizer.zero_grad()
        else:
            raise e
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""
    assert _codes(source, "AMP043") == []
    shown = _check(source, "AMP043", show_assumed=True).diagnostics
    assert [d.code for d in shown] == ["AMP043"] and "exception handler" in shown[0].message
    _fix_leaves_unchanged(source, "AMP043")


def test_oom_handler_is_not_the_normal_path():
    # fairseq's ddp_trainer: an `except RuntimeError` that zero-grads and drops the batch.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    try:
        loss = model(x).sum()
        scaler.scale(loss).backward()
    except RuntimeError:
        optimizer.zero_grad()
        continue
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""
    assert _codes(source, "AMP043") == []
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    step = next(s for s in model.steps if s.loop is not None)
    zero = step.of(EventKind.ZERO_GRAD)[0]
    assert flow_of(model, step).in_handler(zero)


# --- point 2: correlated conditions ----------------------------------------------------------------


def test_update_under_the_same_guard_as_the_step():
    # alf: `if self._grad_scaler is not None:` around both the step and the update.
    source = """
class Algorithm:
    def train_step(self, loss):
        if self._grad_scaler is not None:
            self._grad_scaler.scale(loss).backward()
            self._grad_scaler.step(self._optimizer)
        else:
            loss.backward()
            self._optimizer.step()
        if self._grad_scaler is not None:
            self._grad_scaler.update()
"""
    assert _codes(source, "AMP022") == []
    _fix_leaves_unchanged(source, "AMP022")


def test_two_optimizers_under_two_flags_and_one_update():
    # DLRM: update() fails only when neither flag trains anything: not a proved bug.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if train_dense:
        scaler.step(dense_optimizer)
    if train_sparse:
        scaler.step(sparse_optimizer)
    scaler.update()
"""
    assert _codes(source, "AMP022") == []
    assert _codes(source, "AMP022", show_assumed=True) == ["AMP022"]
    shown = _check(source, "AMP022", show_assumed=True).diagnostics[0]
    assert shown.confidence.value == "medium" and "assumes" in shown.message
    assert shown.fix is None or shown.fix.applicability.value == "unsafe"
    _fix_leaves_unchanged(source, "AMP022")


def test_update_outside_an_accumulation_boundary_is_still_proved():
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / accum).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
    scaler.update()
"""
    diagnostics = _check(source, "AMP022").diagnostics
    assert [d.code for d in diagnostics] == ["AMP022"]
    assert diagnostics[0].confidence.value == "high"


def test_scaler_used_exactly_when_bf16_is_on():
    # ijepa: `autocast(dtype=bfloat16, enabled=use_bfloat16)` and `if use_bfloat16: scaler...`: AMP012.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda") if use_bfloat16 else None
for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bfloat16):
        loss = model(x).sum()
    if use_bfloat16:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
"""
    assert _codes(source, "AMP012") == ["AMP012"]


# --- point 3: values -------------------------------------------------------------------------------


def test_reassigned_scaled_loss_then_reduced():
    # alf: `loss = scaler.scale(loss)` then `loss.mean().backward()`.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x)
    loss = scaler.scale(loss)
    loss.mean().backward()
    scaler.step(optimizer)
    scaler.update()
"""
    assert _codes(source, "AMP011") == []
    _fix_leaves_unchanged(source, "AMP011")


def test_typing_cast_around_the_scaled_loss():
    # ignite: `cast(torch.Tensor, scaler.scale(loss)).backward()`.
    source = """
from typing import cast
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x).sum()
    cast(torch.Tensor, scaler.scale(loss)).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    assert _codes(source, "AMP011") == []
    _fix_leaves_unchanged(source, "AMP011")


def test_update_with_new_scale_is_not_a_second_update():
    # icefall zipformer / matcha: the per-batch update, then `update(new_scale)` every few batches.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch_idx, x in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    if batch_idx % 100 == 0:
        cur_grad_scale = scaler._scale.item()
        if cur_grad_scale < 8.0:
            scaler.update(cur_grad_scale * 2.0)
"""
    assert _codes(source, "AMP023", "AMP022") == []
    _fix_leaves_unchanged(source, "AMP023", "AMP022")


def test_linear_rescale_and_nan_checks_are_not_scaled_reads():
    # fairseq (`p.grad /= n`) and torch's own distributed_test.py (`p.grad.isnan().any()`).
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= world_size
            p.grad.div_(world_size)
            assert not p.grad.isnan().any()
            assert not p.grad.isinf().any()
            assert torch.isfinite(p.grad).all()
    scaler.step(optimizer)
    scaler.update()
"""
    assert _codes(source, "AMP030") == []
    _fix_leaves_unchanged(source, "AMP030")


# --- point 4: what the new facts show ---------------------------------------------------------------


def test_optimizer_step_after_scaler_step_on_the_same_path():
    # torchvision references (PR #4874): the `optimizer.step()` after the if/else runs on both paths.
    source = """
import torch
for x in loader:
    loss = model(x).sum()
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
    optimizer.step()
"""
    diagnostics = _check(source, "AMP020").diagnostics
    assert [d.code for d in diagnostics] == ["AMP020"]
    assert "second time" in diagnostics[0].message
    # Removing it would break the fp32 path (the else branch): no fix.
    assert diagnostics[0].fix is None


def test_direct_step_fix_is_unsafe():
    # nerfacc #307: stepping the optimizer directly on purpose; through the scaler changes the numerics.
    source = """
import torch
grad_scaler = torch.amp.GradScaler("cuda", 2 ** 10)
for x in loader:
    grad_scaler.scale(model(x).sum()).backward()
    optimizer.step()
"""
    diagnostics = _check(source, "AMP020").diagnostics
    assert [d.code for d in diagnostics] == ["AMP020"]
    assert diagnostics[0].fix is not None and diagnostics[0].fix.applicability.value == "unsafe"
    assert _check(source, "AMP020", fix=True).fixed_source is None


@pytest.mark.parametrize("context", ["torch.autocast('cuda')", "torch.cpu.amp.autocast()"])
def test_accelerator_backward_inside_explicit_autocast(context):
    # diffusers textual_inversion_bf16.
    source = f"""
import torch
for batch in loader:
    with {context}:
        loss = model(batch).loss
        accelerator.backward(loss)
    optimizer.step()
"""
    assert _codes(source, "AMP001") == ["AMP001"]
    # Accelerate's own autocast enters torch.autocast under mixed precision (Accelerator.autocast ->
    # get_mixed_precision_context_manager): the same bug, and the same split fixes it.
    framework = """
for batch in loader:
    with accelerator.autocast():
        loss = model(batch).loss
        accelerator.backward(loss)
    optimizer.step()
"""
    assert _codes(framework, "AMP001") == ["AMP001"]
    after = framework.replace("        accelerator.backward(loss)\n", "    accelerator.backward(loss)\n")
    assert _check(framework, "AMP001", fix=True).fixed_source == after
    assert _codes(after, "AMP001") == []


# --- issue 16: fixes users can trust ------------------------------------------------------------------


def test_update_in_another_method_of_the_same_object():
    # fastai's MixedPrecision callback: step in before_step, update in after_step, through self.learn.
    source = """
from torch.amp import GradScaler
class MixedPrecision(Callback):
    def before_fit(self):
        self.learn.scaler = GradScaler("cuda")
    def before_backward(self):
        self.learn.loss_grad = self.scaler.scale(self.loss_grad)
    def before_step(self):
        self.skipped = True
        self.scaler.step(self)
        if self.skipped:
            raise CancelStepException()
    def after_step(self):
        self.learn.scaler.update()
"""
    assert _codes(source, "AMP021") == []
    _fix_leaves_unchanged(source, "AMP021")


def test_two_clips_get_one_unscale():
    # waifu-diffusion: two consecutive clips; with only AMP030 selected, one `unscale_` is inserted.
    source = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
    torch.nn.utils.clip_grad_norm_(text_encoder.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
    result = _check(source, "AMP030", fix=True)
    assert result.fixed_source is not None
    assert result.fixed_source.count("scaler.unscale_(optimizer)") == 1
    assert _check(result.fixed_source, "AMP030", fix=True).fixed_source is None


# --- the confidence policy through the command line and the configuration ------------------------------

_DLRM = """\
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    if train_dense:
        scaler.step(dense_optimizer)
    if train_sparse:
        scaler.step(sparse_optimizer)
    scaler.update()
"""


def _cli(*args, cwd):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--output-format", "concise", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ},
    )


def test_show_assumed_flag_and_setting(tmp_path):
    (tmp_path / "train.py").write_text(_DLRM)
    # Selected by a prefix, an assumed finding is hidden unless show-assumed asks for it; selected by its
    # own code it is shown (issue 30: a rule asked for by name shows what it finds).
    assert _cli("--select", "AMP02", "train.py", cwd=tmp_path).returncode == 0
    by_name = _cli("--select", "AMP022", "train.py", cwd=tmp_path)
    assert by_name.returncode == 1 and "AMP022" in by_name.stdout
    shown = _cli("--select", "AMP02", "--show-assumed", "train.py", cwd=tmp_path)
    assert shown.returncode == 1 and "AMP022" in shown.stdout and "assumes" in shown.stdout
    (tmp_path / "pyproject.toml").write_text("[tool.amp-lint]\nshow-assumed = true\n")
    configured = _cli("--select", "AMP02", "train.py", cwd=tmp_path)
    assert configured.returncode == 1 and "AMP022" in configured.stdout
    assert _cli("--select", "AMP02", "--no-show-assumed", "train.py", cwd=tmp_path).returncode == 0


def test_a_summary_from_another_file_plugs_in_at_the_call():
    # Issue 15 will give summaries of other files' functions; the hook is `project_hooks.SUMMARIES`.
    from amp_lint.analysis import project_hooks
    from amp_lint.analysis.function_summary import Summary

    helper_model = build_model(
        cst.parse_module("def step_helper(scaler, opt):\n    scaler.step(opt)\n    scaler.update()\n")
    )
    helper = next(s for s in helper_model.scopes if s.name == "step_helper")

    def provider(model, call):
        if call.target == "step_helper":
            return Summary(scope=helper, events=tuple(helper.events), params=("scaler", "opt"))
        return None

    source = """
from helpers import step_helper
for x in loader:
    loss = model(x).sum()
    loss.backward()
    step_helper(grad_scaler, optimizer)
"""
    assert _codes(source, "AMP011") == []
    project_hooks.SUMMARIES.append(provider)
    try:
        model = build_model(cst.parse_module(textwrap.dedent(source)))
        [step] = [s for s in model.steps if s.loop is not None]
        stepped = step.of(EventKind.SCALER_STEP)
        assert [e.receiver for e in stepped] == ["grad_scaler"] and stepped[0].target == "optimizer"
        assert stepped[0].in_helper
        assert flow_of(model, step).path(step.of(EventKind.BACKWARD)[0], stepped[0]) is PROVED
    finally:
        project_hooks.SUMMARIES.remove(provider)


def _states_before(source: str, kind, index: int = -1):
    from amp_lint.analysis import typestate

    model = build_model(cst.parse_module(textwrap.dedent(source)))
    step = next(s for s in model.steps if s.loop is not None)
    event = step.of(kind)[index]
    return typestate.run(flow_of(model, step)).before[id(event)]


def test_typestate_per_scaler_and_optimizer():
    from amp_lint.analysis.protocol import STEPPED, UNSCALED

    twice = """
for x in loader:
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    if clip:
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
"""
    states = _states_before(twice, EventKind.SCALER_UNSCALE)
    assert {s.stage("scaler", "optimizer")[0] for s in states} == {UNSCALED}
    assert all("scaler" in s.scaled for s in states)  # the gradients are still scaled
    # update() is not pending before the step, and resets the optimizer to ready after it
    updated = _states_before(twice, EventKind.SCALER_UPDATE)
    assert {s.stage("scaler", "optimizer")[0] for s in updated} == {STEPPED}
    alternatives = """
for x in loader:
    scaler.scale(loss).backward()
    if use_amp:
        scaler.unscale_(optimizer)
    if not use_amp:
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
"""
    # The same test both ways: the second unscale_ never follows the first.
    assert {s.stage("scaler", "optimizer") for s in _states_before(alternatives, EventKind.SCALER_UNSCALE)} == {None}
