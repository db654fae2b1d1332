"""Issue 46: correct code that looks like a mistake (its section 7), and the false positives of round
fourteen's fresh hunt (bench/results/hunt-r14-judged.md), each as a shape of our own named for the principle
it breaks. The false-positive tests keep a true-positive twin beside them so that the principle cannot be
bought by silencing the rule."""

from __future__ import annotations

import textwrap

from amp_lint.engine.checker import Checker


def _findings(source: str, *codes: str, show_assumed: bool = False):
    options = {"show_assumed": True} if show_assumed else {}
    result = Checker(frozenset(codes), **options).check(textwrap.dedent(source), "example.py")
    assert not result.errors, result.errors
    return result.diagnostics


def _codes(source: str, *codes: str, show_assumed: bool = False):
    return sorted(d.code for d in _findings(source, *codes, show_assumed=show_assumed))


# --- 7a: correlated flags (AMP001) --------------------------------------------------------------------

CORRELATED_FLAG = """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
for x in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", enabled=use_amp):
        loss = model(x).sum()
        if use_amp:
            scaled = scaler.scale(loss)
        else:
            {backward}
            optimizer.step()
    if use_amp:
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_correlated_flags_plain_backward_on_the_else_of_the_autocast_flag():
    # Principle 7a, correlated flags: under `autocast(enabled=use_amp)` the `else:` of `if use_amp:` runs
    # only with autocast off, so its plain backward is not inside autocast.
    assert _codes(CORRELATED_FLAG.format(backward="loss.backward()"), "AMP001") == []


def test_correlated_flags_true_twin_the_backward_on_the_flag_branch_is_inside():
    # Principle 7a's twin: the same backward on the `if use_amp:` side runs with autocast on.
    source = CORRELATED_FLAG.replace("if use_amp:\n            scaled", "if not use_amp:\n            scaled")
    assert _codes(source.format(backward="loss.backward()"), "AMP001") == ["AMP001"]


# --- 7b: skip branches (AMP043) -------------------------------------------------------------------------

SKIP_THEN_STEP_AND_BREAK = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        {clear}
        scaler.step(optimizer)
        scaler.update()
        break
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""


def test_skip_branches_grads_cleared_after_unscale_then_step_update_break():
    # Principle 7b, skip branches: after `unscale_` has recorded the inf checks, zeroing or `None`-ing the
    # gradients and then stepping, updating and breaking is a deliberate skipped step.
    for clear in ("optimizer.zero_grad()", "for p in model.parameters():\n            p.grad = None"):
        assert _codes(SKIP_THEN_STEP_AND_BREAK.format(clear=clear), "AMP043") == [], clear


SKIP_BY_RETURN = """
import torch

class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward_step(self, loss):
        self.scaler.scale(loss).backward()

    def update_step(self, model, optim):
        if self.clip > 0:
            self.scaler.unscale_(optim)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip)
            if not torch.isfinite(norm):
                optim.zero_grad()
                return
        self.scaler.step(optim)
        self.scaler.update()
        optim.zero_grad()

    def fit(self, model, optim, loader):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            self.backward_step(loss)
            self.update_step(model, optim)
"""


def test_skip_branches_zero_grad_then_return_in_a_step_helper():
    # Principle 7b, skip branches: `zero_grad(); return` leaves the helper before `scaler.step`, so no
    # step reads the cleared gradients on that path.
    assert _codes(SKIP_BY_RETURN, "AMP043") == []


def test_skip_branches_true_twin_zero_grad_that_falls_through_to_the_step():
    # Principle 7b's twin: without the `return`, the step reads the cleared gradients.
    source = SKIP_BY_RETURN.replace("optim.zero_grad()\n                return", "optim.zero_grad()")
    assert _codes(source, "AMP043") == ["AMP043"]


# --- 7c: linear operations keep the scale (AMP030) ------------------------------------------------------

GRADIENT_SYNC = """
import torch
import torch.distributed as dist
from torch.nn.utils import clip_grad_norm_

class Agent:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def sync_and_step(self):
        if self.multi_gpu:
            flat = []
            for param in self.model.parameters():
                if param.grad is not None:
                    flat.append(param.grad.view(-1))
            everything = torch.cat(flat)
            dist.all_reduce(everything, op=dist.ReduceOp.SUM)
            offset = 0
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.data.copy_(everything[offset : offset + param.numel()].view_as(param.grad.data) / self.world_size)
                    offset += param.numel()
        if self.clip:
            self.scaler.unscale_(self.optimizer)
            clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def train(self, batches):
        for x in batches:
            with torch.autocast("cuda"):
                loss = self.model(x).sum()
            self.optimizer.zero_grad()
            self.scaler.scale(loss).backward()
            self.sync_and_step()
"""


def test_linear_operations_keep_the_scale_all_reduce_divide_copy_back():
    # Principle 7c, linear operations keep the scale: an all-reduce of the scaled gradients, a division by
    # the world size and a copy back into `.grad` before `unscale_` is what DDP does itself.
    assert _codes(GRADIENT_SYNC, "AMP030", show_assumed=True) == []


def test_linear_operations_true_twin_a_norm_of_the_collected_gradients():
    # Principle 7c's twin: the same collected gradients read as a norm need true magnitudes.
    source = GRADIENT_SYNC.replace(
        "dist.all_reduce(everything, op=dist.ReduceOp.SUM)", "print(everything.norm())"
    )
    assert _codes(source, "AMP030") == ["AMP030"]


def test_linear_operations_true_twin_a_threshold_on_one_gradient():
    # Principle 7c's twin: a comparison against a threshold needs true magnitudes.
    source = GRADIENT_SYNC.replace("flat.append(param.grad.view(-1))", "flat.append(param.grad.view(-1))\n                    if param.grad.abs().max() > 10.0:\n                        print('large')")
    assert _codes(source, "AMP030") == ["AMP030"]


# --- 7d: two complete cycles per iteration (AMP023) -----------------------------------------------------

def test_two_complete_cycles_per_iteration_weights_then_architecture():
    # Principle 7d, two complete cycles: scale -> backward -> step(opt_a) -> update, then the same for
    # opt_b, is legal: each update follows its own step.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss_w = model(x).sum()
        scaler.scale(loss_w).backward()
        scaler.step(w_optimizer)
        scaler.update()
        w_optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss_a = model(y).sum()
        scaler.scale(loss_a).backward()
        scaler.step(a_optimizer)
        scaler.update()
        a_optimizer.zero_grad()
    """
    assert _codes(source, "AMP023", "AMP022", "AMP021", show_assumed=True) == []


def test_skip_branches_true_twin_zero_grad_after_unscale_on_the_normal_path():
    # Principle 7b's twin: the same zero_grad after unscale_ on the path every iteration takes (no branch
    # that leaves) makes every step one on cleared gradients.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        optimizer.zero_grad()
        scaler.step(optimizer)
        scaler.update()
    """
    assert _codes(source, "AMP043") == ["AMP043"]


def test_two_complete_cycles_true_twin_second_backward_before_the_first_update():
    # Principle 7d's twin: the second optimizer's gradients were scaled before the first update and are
    # unscaled after it with another scale: one update too many.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss_w, loss_a = model(x).sum(), model(y).sum()
        scaler.scale(loss_w).backward()
        scaler.scale(loss_a).backward()
        scaler.step(w_optimizer)
        scaler.update()
        scaler.step(a_optimizer)
        scaler.update()
    """
    assert _codes(source, "AMP023") == ["AMP023"]


def test_two_complete_cycles_true_twin_update_per_optimizer_in_a_loop():
    # Principle 7d's twin: one backward, then step and update per optimizer of a loop.
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        for opt in optimizers:
            scaler.step(opt)
            scaler.update()
    """
    assert _codes(source, "AMP023") == ["AMP023"]


# --- the hunt's own principles ----------------------------------------------------------------------------

CLOSURE_TRAINER = """
import torch

class Trainer:
    def __init__(self, model, optimizer, use_amp):
        self.model, self.optimizer, self.use_amp = model, optimizer, use_amp
        self.scaler = torch.amp.GradScaler("cuda") if use_amp else None

    def train_step(self, x):
        if isinstance(self.optimizer, torch.optim.LBFGS):
            def closure():
                self.optimizer.zero_grad()
                loss = self.model(x).sum()
                {closure_backward}
                return loss
            self.runner.step(self.optimizer, closure)
            return
        with torch.autocast("cuda", enabled=self.use_amp):
            loss = self.model(x).sum()
        if self.use_amp:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.runner.step(self.optimizer)
"""


def test_a_closure_backward_belongs_to_the_closure_step():
    # Hunt principle (ludwig, AMP011): a backward inside a closure defined in a method and handed to a
    # closure-taking step is no per-call `backward()` method of the class; the branch that runs it returns
    # before the scaler is touched. Its safe fix (`self.scaler.scale(loss)`) broke the code: the scaler is
    # None when AMP is off.
    assert _codes(CLOSURE_TRAINER.format(closure_backward="loss.backward()"), "AMP011", show_assumed=True) == []


def test_a_per_call_backward_method_true_twin_still_reported():
    # The twin: a sibling *method* `backward()` run once per batch while the class steps its scaler.
    source = """
    import torch

    class Engine:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")

        def backward(self, loss):
            loss.backward()

        def step(self):
            self.scaler.step(self.optimizer)
            self.scaler.update()
    """
    assert _codes(source, "AMP011") == ["AMP011"]


BCE_OFF_BY_DEFAULT = """
import torch

class MaskedBCE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.loss_f = torch.nn.BCELoss()

    def forward(self, probs, labels, enable_autocast=False):
        with torch.cuda.amp.autocast(enabled=enable_autocast):
            return self.loss_f(probs, labels)
"""


def test_an_autocast_flag_off_by_default_that_no_call_sets():
    # Hunt principle (NeMo, AMP052): `autocast(enabled=flag)` with `flag=False` by default and no call that
    # passes it switches autocast off around the BCE (that is why it is there): not a default finding.
    assert _codes(BCE_OFF_BY_DEFAULT, "AMP052") == []
    assert _codes(BCE_OFF_BY_DEFAULT, "AMP052", show_assumed=True) == ["AMP052"]


def test_an_autocast_flag_off_by_default_true_twin_a_call_turns_it_on():
    # The twin: a call in view passes `enable_autocast=True`: the BCE runs under CUDA autocast and raises.
    source = BCE_OFF_BY_DEFAULT + "\nloss = MaskedBCE()(p, y, enable_autocast=True)\n"
    assert _codes(source, "AMP052") == ["AMP052"]


# --- fixes: a safe fix never rewrites deliberate code; the fix check follows the finding through callees --

def test_a_safe_fix_never_rewrites_a_direct_step_after_an_explicit_unscale():
    # Issue 46: `optimizer.step()` right after `scaler.unscale_(optimizer)` may be deliberate (no host sync
    # of `scaler.step` for this optimizer). Reporting it is fair; rewriting it to `scaler.step` is unsafe.
    from amp_lint.diagnostics import Applicability

    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        optimizer.step()
        scaler.update()
    """
    [finding] = _findings(source, "AMP020")
    assert finding.fix is not None and finding.fix.applicability is Applicability.UNSAFE


CALLEE_UNSCALES = {
    "pkg/__init__.py": "",
    "pkg/base.py": '''
import torch


class Base:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def log_and_step(self):
        for p in self.model.parameters():
            self.writer.add_scalar("grad_norm", p.grad.norm())
        if self.clip:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
''',
    "pkg/agent.py": '''
import torch

from pkg.base import Base


class Agent(Base):
    def calc_gradients(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x).sum()
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        self.log_and_step()
''',
}


def test_the_fix_check_follows_the_finding_through_callees(tmp_path):
    # Issue 46: the callee reads scaled gradients (a true AMP030), then unscales under a flag. An unscale_
    # inserted before the call would be a second one on every run with clipping on ("unscale_() has already
    # been called"): the finding stays, the fix is refused and the file is left as it is.
    import json
    import subprocess
    import sys

    for name, text in CALLEE_UNSCALES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text.lstrip(), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--output-format", "json", "--fix", "."],
        cwd=tmp_path, capture_output=True, text=True,
    )
    findings = json.loads(run.stdout)
    assert [(f["code"], f["location"]["row"]) for f in findings] == [("AMP030", 12)], run.stderr
    assert findings[0].get("fix") is None
    assert (tmp_path / "pkg/agent.py").read_text(encoding="utf-8") == CALLEE_UNSCALES["pkg/agent.py"].lstrip()
