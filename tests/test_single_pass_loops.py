"""Issue 26, principle 2 (an iteration is not only a loop body): a loop that does not repeat an iteration. A
retry loop (its body leaves on every path with no handled failure, and goes round again only after one) and
a loop over optimizers (each optimizer stepped once) run once per call, so a function whose only loops are
these is one part of its caller's iteration; a genuine `while True:` training loop is still a loop. The
shapes are our own."""

from __future__ import annotations

import textwrap

import libcst as cst

from amp_lint.analysis.single_pass_loops import is_retry_loop
from amp_lint.engine.checker import Checker


def _first_loop(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    found = []

    class _Loops(cst.CSTVisitor):
        def visit_While(self, node):
            found.append(node)

        def visit_For(self, node):
            found.append(node)

    module.visit(_Loops())
    return found[0]


RETRY_WHILE = """
def train_batch(batch, micro):
    while True:
        try:
            loss = run(batch, micro)
        except RuntimeError as error:
            if "out of memory" not in str(error):
                raise
            micro //= 2
            continue
        return loss
"""

RETRY_FOR = """
def train_batch(batch):
    for attempt in range(3):
        try:
            loss = run(batch)
            break
        except RuntimeError:
            log(attempt)
"""

# the retry decided after the try, from a flag the handler set (a failure on another rank)
RETRY_FLAG = """
def train_batch(batch):
    while True:
        failed = 0
        try:
            loss = run(batch)
        except RuntimeError:
            failed = 1
        failed = all_reduce(failed)
        if failed:
            shrink()
            continue
        return loss
"""

TRAINING_WHILE = """
def fit(loader):
    it = iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            break
        run(batch)
"""

TRAINING_WHILE_BREAK_LAST = """
def fit(loader):
    step = 0
    while True:
        try:
            run(loader[step])
        except RuntimeError:
            pass
        step += 1
        if step == len(loader):
            break
"""


def test_a_retry_while_that_continues_only_after_a_handled_failure_runs_once():
    assert is_retry_loop(_first_loop(RETRY_WHILE))


def test_a_retry_for_over_attempts_that_breaks_on_success_runs_once():
    assert is_retry_loop(_first_loop(RETRY_FOR))


def test_a_retry_decided_by_a_flag_after_the_try_runs_once():
    assert is_retry_loop(_first_loop(RETRY_FLAG))


def test_a_while_true_training_loop_is_still_a_loop():
    # reads the next batch, steps, goes round again: falls through the end of its body when nothing fails
    assert not is_retry_loop(_first_loop(TRAINING_WHILE))
    assert not is_retry_loop(_first_loop(TRAINING_WHILE_BREAK_LAST))


def test_what_is_not_a_retry_loop():
    no_try = RETRY_WHILE.replace("        try:\n", "        if True:\n").replace("        except RuntimeError as error:\n", "        else:\n")
    assert not is_retry_loop(_first_loop(no_try))  # no failure handled
    with_else = RETRY_FOR + "    else:\n        raise RuntimeError('gave up')\n"
    assert not is_retry_loop(_first_loop(with_else))
    over_data = RETRY_FOR.replace("range(3)", "loader")
    assert not is_retry_loop(_first_loop(over_data))  # a loop over data, not attempts
    never_leaves = RETRY_WHILE.replace("        return loss\n", "        continue\n")
    assert not is_retry_loop(_first_loop(never_leaves))  # no pass ends the loop


TRAINER = """
import torch


class Trainer:
    def __init__(self, model, optimizers):
        self.model = model
        self.optimizers = optimizers
        self.scaler = torch.amp.GradScaler("cuda")
        self.micro = 8

    def _train_batch(self, batch):
        while True:
            try:
                loss = self.model(batch)
                self.scaler.scale(loss).backward()
                for optimizer in self.optimizers:
                    self.scaler.step(optimizer)
            except RuntimeError as error:
                if "out of memory" not in str(error):
                    raise
                self.micro //= 2
                continue
            return loss

    def fit(self, loader):
        for batch in loader:
            self._train_batch(batch)
            self.scaler.update()
"""


def _codes(source: str, select: str = "AMP021,AMP022,AMP023"):
    result = Checker(frozenset(select.split(","))).check(textwrap.dedent(source), "train.py")
    return [(d.code, d.location.row) for d in result.diagnostics]


def test_a_helper_whose_loops_run_once_is_one_part_of_its_callers_iteration():
    # the retry loop with the backward is not the helper's iteration, and its loop over optimizers steps
    # each once: the caller's update after the call completes the protocol
    assert _codes(TRAINER) == []


def test_the_caller_that_drops_the_update_is_reported():
    dropped = TRAINER.replace("            self.scaler.update()\n", "")
    found = _codes(dropped, "AMP021")
    assert found and all(code == "AMP021" for code, _ in found)


def test_a_helper_with_a_training_loop_of_its_own_is_not_one_step():
    # the helper loops over the batches itself (its loop falls through): it is a training loop, judged alone
    helper = TRAINER.replace("    def _train_batch(self, batch):\n        while True:", "    def _train_batch(self, loader):\n        for batch in loader:")
    helper = helper.replace("            return loss\n", "            self.scaler.update()\n")
    helper = helper.replace("            self._train_batch(batch)\n            self.scaler.update()\n", "            self._train_batch(batch)\n")
    assert _codes(helper) == []


NO_BACKWARD_CALLER = """
import torch


class Trainer:
    def __init__(self, model, optimizers):
        self.model = model
        self.optimizers = optimizers
        self.scaler = torch.amp.GradScaler("cuda")

    def _backward(self, batch):
        for micro in batch:
            self.scaler.scale(self.model(micro)).backward()

    def _train_batch(self, batch):
        for attempt in range(3):
            try:
                self._backward(batch)
                for optimizer in self.optimizers:
                    self.scaler.step(optimizer)
                break
            except RuntimeError:
                self.model.zero_grad()

    def fit(self, loader):
        for batch in loader:
            self._train_batch(batch)
            self.scaler.update()
"""


def test_a_loop_that_calls_a_once_per_call_step_repeats_it():
    # the backward is a helper's training loop (micro-batches), so the caller has none of its own: the loop
    # calling the step helper is still the iteration, and each pass steps again
    assert _codes(NO_BACKWARD_CALLER) == []
    dropped = textwrap.dedent(NO_BACKWARD_CALLER.replace("            self.scaler.update()\n", ""))
    result = Checker(frozenset({"AMP021"})).check(dropped, "train.py")
    # reported at the step the helper runs, reached through the loop's call of it (line 27)
    assert [(d.code, d.location.row) for d in result.diagnostics] == [("AMP021", 20)]
    assert "in this loop" in result.diagnostics[0].message and "at line 27" in result.diagnostics[0].message


def test_a_loop_handing_each_optimizer_to_the_step_helper_steps_each_once():
    # `for opt in opts: self.step_one(opt)`: each pass steps another optimizer; the update after the loop
    # is the iteration's one update
    source = NO_BACKWARD_CALLER.replace(
        "                for optimizer in self.optimizers:\n                    self.scaler.step(optimizer)\n",
        "                self.scaler.step(self.optimizers[0])\n",
    )
    source = source.replace("    def _train_batch(self, batch):", "    def _step_one(self, optimizer):\n        self.scaler.step(optimizer)\n\n    def _train_batch(self, batch):")
    source = source.replace(
        "            self._train_batch(batch)\n            self.scaler.update()\n",
        "            self._backward(batch)\n            for optimizer in self.optimizers:\n                self._step_one(optimizer)\n            self.scaler.update()\n",
    )
    assert _codes(source) == []


def test_an_update_after_a_step_at_the_iterations_first_statement_is_after_it():
    # the helper call that steps is the loop body's first statement: every path to the update passes it
    source = """
    import torch


    class Trainer:
        def __init__(self, model, optimizer):
            self.model = model
            self.optimizer = optimizer
            self.scaler = torch.amp.GradScaler("cuda")

        def _train_batch(self, batch):
            self.scaler.scale(self.model(batch)).backward()
            self.scaler.step(self.optimizer)

        def fit(self, loader):
            for batch in loader:
                self._train_batch(batch)
                self.scaler.update()
    """
    assert _codes(source) == []


STEPS_MODULE = """
def train_batch(model, scaler, optimizers, batch):
    for attempt in range(3):
        try:
            loss = model(batch)
            scaler.scale(loss).backward()
            for optimizer in optimizers:
                scaler.step(optimizer)
            return loss
        except RuntimeError:
            model.zero_grad()
    raise RuntimeError("out of memory three times")
"""

TRAIN_MODULE = """
import torch
from pkg.steps import train_batch


def fit(model, optimizers, loader):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        train_batch(model, scaler, optimizers, batch)
        scaler.update()
"""


def test_a_helper_of_another_module_whose_loops_run_once_is_summarised_at_its_call(tmp_path):
    # the summary of another module's function: its retry loop and its loop over optimizers run once per
    # call, so its step is part of the caller's iteration and the update after the call follows it (it was
    # taken as a training loop of its own: the scaler looked never stepped, AMP022)
    from package_check import check_in_package, write_package

    write_package(tmp_path, {"steps.py": STEPS_MODULE, "train.py": TRAIN_MODULE})
    assert check_in_package(tmp_path, "pkg/train.py", "AMP021,AMP022,AMP023") == []
