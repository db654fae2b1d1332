"""The server's units (`amp_lint.engine.units`): for random edit sequences on real training files, every result
is identical to a full check of the edited text, and a result is reused when an edit leaves the core alone."""

from __future__ import annotations

import os
import random
import textwrap
from pathlib import Path

import pytest

from amp_lint import rules as registry
from amp_lint.engine.runner import CheckConfig, check_text
from amp_lint.engine.unit_split import HEADER, MEMBER, TOP
from amp_lint.engine.units import OWN, UnitChecker

ROOT = Path(__file__).resolve().parent.parent
CONFIG = CheckConfig(frozenset(registry.default_codes()), False, False, False, False)
REAL = Path.home() / ".cache" / "amp-lint-realworld" / "src"
REAL_FILES = [
    "allennlp/allennlp/nn/parallel/ddp_accelerator.py",
    "composer/composer/algorithms/sam/sam.py",
    "monai/monai/engines/workflow.py",
]
FIXTURES = sorted((ROOT / "fixtures" / "check").glob("bad_amp0[12]*.py"))[:6]


def _seen(outcome):
    return (
        [(d.code, d.location, d.end_location, d.message, d.source_line, d.related, d.fix) for d in outcome.diagnostics],
        [(e.message, e.location) for e in outcome.errors],
    )


def _edit(lines, rng):
    """One random editor-like edit: a line duplicated, deleted, changed, or a statement typed in."""
    index = rng.randrange(len(lines))
    kind = rng.choice(["duplicate", "delete", "append", "insert", "break"])
    if kind == "duplicate":
        lines.insert(index, lines[index])
    elif kind == "delete" and len(lines) > 3:
        del lines[index]
    elif kind == "append":
        lines[index] = lines[index] + "  # edited"
    elif kind == "insert":
        indent = len(lines[index]) - len(lines[index].lstrip())
        lines.insert(index, " " * indent + rng.choice(["x = 1", "scaler.update()", "loss.backward()", "helper(opt)"]))
    else:
        lines[index] = lines[index][: len(lines[index]) // 2]  # half a line: often a syntax error
    return kind


def _class_script():
    """The benchmark's class-shaped training script (its training code the methods of one class), on disk
    (written at collection time, so not under a test's tmp_path)."""
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    from lsp_latency import training_script

    path = Path(tempfile.gettempdir()) / f"amp-lint-tests-{os.getuid() if hasattr(os, 'getuid') else 0}" / "bench_class_300.py"
    path.parent.mkdir(exist_ok=True)
    text = training_script(300, shape="class")
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def _files():
    found = [REAL / name for name in REAL_FILES if (REAL / name).is_file()]
    return found + FIXTURES + [_class_script()]


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_every_result_is_identical_to_a_full_check_of_the_edited_text(path):
    seed = sum(path.name.encode())  # recorded: the same edits on every run
    rng = random.Random(seed)
    checker = UnitChecker(CONFIG)
    lines = path.read_text(encoding="utf-8").split("\n")
    for step in range(10):
        kind = _edit(lines, rng)
        text = "\n".join(lines)
        assert _seen(checker.check(text, "t.py", "doc")) == _seen(check_text(text, "t.py", CONFIG)), (seed, step, kind)


def _training_files():
    """Real training files (the pinned corpora) and the benchmark's generated training script."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from lsp_latency import training_script

    extra = Path.home() / ".cache" / "amp-lint-extra" / "src"
    names = [
        extra / "yolov5/yolov5/classify/train.py",
        extra / "yolov5/yolov5/train.py",
        REAL / "composer/composer/algorithms/selective_backprop/selective_backprop.py",
        # Training code as the methods of classes (issue 31: methods are units).
        extra / "accelerate/accelerate/optimizer.py",
        REAL / "monai/monai/engines/trainer.py",
        # Class-based trainers where one method calls most others (issue 31: they collapsed into one group).
        REAL / "flair/flair/trainers/trainer.py",
        REAL / "speechbrain/speechbrain/core.py",
    ]
    found = [(p.name, p.read_text(encoding="utf-8")) for p in names if p.is_file()]
    return found + [("bench_600.py", training_script(600)), ("bench_class_600.py", training_script(600, shape="class"))]


def _edit_inside(lines, rng):
    """An edit inside a function: a line of its body changed, duplicated, deleted, or an AMP call typed."""
    bodies = [i for i, line in enumerate(lines) if line.startswith("        ") and line.strip() and not line.strip().startswith(("'", '"'))]
    index = rng.choice(bodies)
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    kind = rng.choice(["number", "duplicate", "delete", "amp", "rename"])
    if kind == "number":
        lines[index] = lines[index] + f"  # {rng.randrange(100)}"
    elif kind == "duplicate":
        lines.insert(index, lines[index])
    elif kind == "delete":
        del lines[index]
    elif kind == "amp":
        lines.insert(index, indent + rng.choice(["scaler.update()", "loss.backward()", "optimizer.step()", "x = 1"]))
    else:
        lines[index] = lines[index].replace("self", "this", 1)
    return kind


@pytest.mark.parametrize("name, text", _training_files(), ids=[name for name, _ in _training_files()])
def test_edits_inside_functions_of_training_files_publish_what_a_full_check_finds(name, text):
    """Issue 31: random edits inside the functions of real training files. Every result (group by group,
    reused or verified) is the full check's: findings, positions, messages, fixes and errors."""
    seed = sum(name.encode())
    rng = random.Random(seed)
    checker = UnitChecker(CONFIG)
    lines = text.split("\n")
    for step in range(12):
        kind = _edit_inside(lines, rng)
        edited = "\n".join(lines)
        assert _seen(checker.check(edited, "t.py", "doc")) == _seen(check_text(edited, "t.py", CONFIG)), (seed, step, kind)
    assert checker.stats["groups"] > 0


def test_an_edit_in_one_training_function_checks_that_function_alone():
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from lsp_latency import _inside_line, training_script

    text = training_script(600)
    checker = UnitChecker(CONFIG)
    first = checker.check(text, "t.py", "doc")
    assert checker.verified["doc"][1] == OWN  # every unit's own findings, together, are the whole file's
    lines = text.split("\n")
    line = _inside_line(text)
    lines[line] += " * 2"
    before = dict(checker.stats)
    edited = "\n".join(lines)
    again = checker.check(edited, "t.py", "doc")
    assert checker.stats["groups"] == before["groups"] + 1 and checker.stats["verified"] == before["verified"]
    assert checker.stats["whole"] == before["whole"] and _seen(again) == _seen(check_text(edited, "t.py", CONFIG))
    assert {d.code for d in first.diagnostics} == {d.code for d in again.diagnostics}
    # A line inserted above every function moves their findings; no group is checked again.
    moved = "# a comment\n" + edited
    before = dict(checker.stats)
    assert _seen(checker.check(moved, "t.py", "doc")) == _seen(check_text(moved, "t.py", CONFIG))
    assert checker.stats["groups"] == before["groups"]


def test_an_edit_inside_one_method_of_a_big_class_checks_that_method_alone():
    """Issue 31: a class's methods are units. An edit inside one method of a class-shaped training script
    checks one group (the method with its class's header, `__init__` and docstring, and the imports it
    uses), not the class; the result is the full check's."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from lsp_latency import _inside_line, training_script

    text = training_script(600, shape="class")
    checker = UnitChecker(CONFIG)
    checker.check(text, "t.py", "doc")
    assert checker.verified["doc"][1] == OWN
    units = checker.units(text)
    line = _inside_line(text)
    [method] = [u for u in units if u.first <= line <= u.last]
    assert method.role == MEMBER and method.last - method.first < 30  # the method, not the class
    [group] = [g for g in checker.groups(units) if units.index(method) in g]
    assert sum(units[i].last + 1 - units[i].first for i in group) < 60
    lines = text.split("\n")
    for version in range(3):
        lines[line] += f" * {version + 2}"
        edited = "\n".join(lines)
        before = dict(checker.stats)
        again = checker.check(edited, "t.py", "doc")
        assert checker.stats["groups"] == before["groups"] + 1 and checker.stats["whole"] == before["whole"]
        assert _seen(again) == _seen(check_text(edited, "t.py", CONFIG))
    # A method typed above the edited one moves every later finding; it is one group more, checked alone.
    lines.insert(line - 20, "    def added(self):\n        return self.scaler.get_scale()\n")
    edited = "\n".join(lines)
    assert _seen(checker.check(edited, "t.py", "doc")) == _seen(check_text(edited, "t.py", CONFIG))


def test_class_headers_and_members_are_units_that_parse_where_they_stand():
    text = textwrap.dedent(
        """\
        import torch


        @decorated
        class Trainer(Base, metaclass=Meta):
            \"\"\"Docs.\"\"\"

            scale = 2.0

            def __init__(self):
                self.scaler = torch.amp.GradScaler()

            @torch.no_grad()
            def step(self): self.scaler.update()


        class OneLine: x = 1
        """
    )
    units = UnitChecker(CONFIG).units(text)
    shown = [(u.first, u.last, u.role) for u in units]
    assert shown == [(0, 0, TOP), (3, 4, HEADER), (5, 5, MEMBER), (7, 7, MEMBER), (9, 10, MEMBER), (12, 13, MEMBER), (16, 16, TOP)]
    header = units[1]
    assert header.facts.binds == {"Trainer"} and {"Base", "Meta", "decorated"} <= header.facts.uses
    docstring, scale, init, step = units[2:6]
    assert docstring.facts.defines_class and scale.facts.defines_class and init.facts.defines_class
    assert not step.facts.defines_class and "scaler" in init.facts.binds and "scaler" in step.facts.uses


def test_a_question_of_the_whole_file_keeps_it_checked_whole():
    """AMP080 asks whether the file builds a GradScaler anywhere: `save` alone says no, the file says yes.
    The verification sees the groups' union differ, and the document is checked whole."""
    options = (("show_assumed", True),)
    config = CheckConfig(frozenset(registry.default_codes()) | {"AMP080"}, False, False, False, False, options)
    text = textwrap.dedent(
        """\
        import torch

        scaler = torch.amp.GradScaler("cuda")


        def save(model, optimizer, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        """
    )
    checker = UnitChecker(config)
    outcome = checker.check(text, "t.py", "doc")
    assert "AMP080" in {d.code for d in outcome.diagnostics}
    assert checker.verified["doc"] == (checker.verified["doc"][0], None)
    edited = text.replace("(model, optimizer, path)", "(model, optimizer, path, extra=None)")
    assert _seen(checker.check(edited, "t.py", "doc")) == _seen(check_text(edited, "t.py", config))


def test_the_server_mode_publishes_the_whole_check_first_and_verifies_step_by_step():
    checker = UnitChecker(CONFIG, eager=False)
    checked = checker.check(TRAINING, "t.py", "doc")
    assert _seen(checked) == _seen(check_text(TRAINING, "t.py", CONFIG)) and "doc" in checker.pending
    steps = 0
    while checker.settle("doc"):
        steps += 1
    assert steps >= 1 and "doc" not in checker.pending and checker.verified["doc"][1] is not None


TRAINING = textwrap.dedent(
    """\
    import json
    import torch

    LIMIT = 3


    def load(path):
        with open(path) as handle:
            return json.load(handle)


    def helper(opt):
        opt.step()


    def train(model, data, opt):
        scaler = torch.cuda.amp.GradScaler()
        for x in data:
            with torch.autocast("cuda"):
                loss = model(x)
            scaler.scale(loss).backward()
            helper(opt)
            scaler.update()
    """
)


def test_an_edit_outside_the_core_reuses_the_result_and_one_inside_checks_again():
    checker = UnitChecker(CONFIG)
    core = checker.core_text(TRAINING)
    assert "json.load" not in core and "opt.step()" in core and "LIMIT" not in core  # helper is called: in the core
    assert core.count("\n") == TRAINING.count("\n")
    first = checker.check(TRAINING, "t.py", "doc")
    assert {"AMP020", "AMP072"} <= {d.code for d in first.diagnostics}
    edited = TRAINING.replace("LIMIT = 3", "LIMIT = 4").replace("json.load(handle)", "json.loads(handle.read())")
    checks = checker.stats["core"]
    again = checker.check(edited, "t.py", "doc")
    assert checker.stats["core"] == checks and _seen(again) == _seen(check_text(edited, "t.py", CONFIG))
    inside = edited.replace("helper(opt)\n", "helper(opt)\n        print(x)\n")
    assert _seen(checker.check(inside, "t.py", "doc")) == _seen(check_text(inside, "t.py", CONFIG))
    assert checker.stats["core"] == checks + 1  # the group of `train` and `helper`, nothing else


def test_unsure_texts_are_checked_whole():
    checker = UnitChecker(CONFIG)
    assert checker.core_text("# amp-lint: noqa\n" + TRAINING) is None
    assert checker.core_text(TRAINING.replace("\n", "\r\n")) is None
    assert checker.core_text(TRAINING + "def broken(:\n") is None


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_units_found_after_an_edit_are_those_of_a_fresh_split(path):
    """The incremental split (only the edited lines and their neighbours parsed again) is the full split."""
    seed = sum(path.name.encode()) + 1
    rng = random.Random(seed)
    checker = UnitChecker(CONFIG)
    lines = path.read_text(encoding="utf-8").split("\n")
    checker.units("\n".join(lines), "doc")
    for step in range(60):
        kind = _edit(lines, rng)
        if rng.random() < 0.2:  # a decorator, a dedented line, a string opened: edits that move unit borders
            lines.insert(rng.randrange(len(lines)), rng.choice(["@decorator", "    y = 2", '"""', "def g():", ""]))
        text = "\n".join(lines)
        incremental = checker.units(text, "doc")
        fresh = UnitChecker(CONFIG).units(text)
        shown = lambda units: None if units is None else [(u.first, u.last, u.digest, u.role) for u in units]  # noqa: E731
        assert shown(incremental) == shown(fresh), (seed, step, kind)


ALIASED = textwrap.dedent(
    """\
    import torch
    from torch.cuda.amp import autocast as ac


    def evaluate(model, loader):
        for x, y in loader:
            with ac():
                model(x)


    def predict(model, x):
        with ac(dtype=torch.bfloat16):
            return model(x)
    """
)


def test_the_users_of_a_relevant_import_are_in_the_core_and_its_groups():
    """`from torch.cuda.amp import autocast as ac`: the import names what the rules look for, so every unit
    that uses `ac` is seen by them (AMP070's fix edits each `ac()`), though `ac` alone matches no pattern."""
    checker = UnitChecker(CONFIG)
    core = checker.core_text(ALIASED)
    assert "with ac():" in core and "with ac(dtype" in core
    units = checker.units(ALIASED)
    grouped = {i for group in checker.groups(units) for i in group}
    assert {i for i, unit in enumerate(units) if "evaluate" in unit.facts.binds} <= grouped
    whole = check_text(ALIASED, "t.py", CONFIG)
    assert _seen(check_text(core, "t.py", CONFIG)) == _seen(whole)
    assert _seen(checker.check(ALIASED, "t.py", "doc")) == _seen(whole)


def test_a_long_edit_session_keeps_the_latest_units_facts_and_results_not_every_versions():
    """Issue 31, the server's memory after 200 edits: the facts of an edited function's superseded versions
    and the results of superseded groups are dropped (a few kept for an undo), and an undo still reuses."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from lsp_latency import _inside_line, training_script

    from amp_lint.engine import units as units_module

    text = training_script(300)
    checker = UnitChecker(CONFIG)
    checker.check(text, "t.py", "doc")
    lines = text.split("\n")
    line = _inside_line(text)
    original = lines[line]
    count = len(checker.previous["doc"][1])
    for version in range(150):
        lines[line] = f"{original} * {version}"
        checker.check("\n".join(lines), "t.py", "doc")
    assert len(checker.facts) <= count + units_module._SUPERSEDED_KEPT
    groups = checker.groups(checker.previous["doc"][1])
    assert len(checker.group_results["doc"]) <= len(groups) + units_module._RESULTS_PER_DOCUMENT
    checks = checker.stats["core"]
    lines[line] = f"{original} * 148"  # an undo: the version before the last
    assert _seen(checker.check("\n".join(lines), "t.py", "doc")) == _seen(check_text("\n".join(lines), "t.py", CONFIG))
    assert checker.stats["core"] == checks
    checker.forget("doc")
    assert not checker.held and len(checker.facts) <= units_module._SUPERSEDED_KEPT


CALLER_AND_CALLEES = textwrap.dedent(
    """\
    import torch


    class Trainer:
        def __init__(self, model, optimizer):
            self.model = model
            self.optimizer = optimizer
            self.scaler = torch.cuda.amp.GradScaler()

        def fit(self, loader):
            for batch in loader:
                loss = self.forward_pass(batch)
                self.backward_pass(loss)
                self.log_loss(loss)

        def forward_pass(self, batch):
            with torch.autocast("cuda"):
                return self.model(batch).mean()

        def backward_pass(self, loss):
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

        def log_loss(self, loss):
            total = 0.0
            total += loss.item() * 1
            print(total)
    """
)


def test_callers_are_checked_again_only_when_a_callees_summary_changes():
    """Issue 31: `fit` calls every other method, so its own group is the class. An edit inside `log_loss`
    that leaves what a caller can learn of it as it was (a number in a statement that writes a local) checks
    `log_loss`'s own group alone and reuses `fit`'s findings; an edit that changes it (a call typed) checks
    `fit`'s group again. Every result is the full check's."""
    checker = UnitChecker(CONFIG)
    checker.check(CALLER_AND_CALLEES, "t.py", "doc")
    assert checker.verified["doc"][1] == OWN
    units = checker.units(CALLER_AND_CALLEES)
    lines = CALLER_AND_CALLEES.split("\n")
    [fit] = [i for i, u in enumerate(units) if "def fit" in lines[u.first]]
    [log_loss] = [i for i, u in enumerate(units) if "def log_loss" in lines[u.first]]
    own = dict(checker.own_groups(units))
    assert log_loss in own[fit] and fit not in own[log_loss]
    text = CALLER_AND_CALLEES
    for version in (2, 3):
        text = text.replace(f"loss.item() * {version - 1}", f"loss.item() * {version}")
        before = dict(checker.stats)
        assert _seen(checker.check(text, "t.py", "doc")) == _seen(check_text(text, "t.py", CONFIG))
        assert checker.stats["groups"] == before["groups"] + 1 and checker.stats["whole"] == before["whole"]
    text = text.replace("        print(total)\n", "        print(total)\n        self.flush(total)\n")
    before = dict(checker.stats)
    assert _seen(checker.check(text, "t.py", "doc")) == _seen(check_text(text, "t.py", CONFIG))
    assert checker.stats["groups"] == before["groups"] + 2  # `log_loss`'s own group, and `fit`'s


def test_a_summary_is_what_a_caller_can_learn_of_a_function():
    """`UnitFacts.summary`: numbers in statements that write locals, and docstrings, are left out; the flow
    (a loop, a return), a name read, an attribute written, a `global`, a module-level binding and every line
    that holds a name the rules look for are in."""
    import ast
    import re

    from amp_lint.engine.unit_split import summary_of

    pattern = re.compile(r"scaler|backward")

    def summary(text):
        return summary_of(text, ast.parse(text).body, TOP, pattern)

    base = 'def f(x, y):\n    """Doc."""\n    total = 0\n    total += x.item() * 2\n    scaler.step(x)\n    return total\n'
    assert summary(base) == summary(base.replace("* 2", "* 3").replace("Doc.", "Other."))
    for changed in (
        base.replace("total = 0", "total = y"),  # a name read
        base.replace("    total += x.item() * 2\n", "    for i in x:\n        total += x.item() * 2\n"),  # a loop
        base.replace("return total", "return total + 1"),
        base.replace("scaler.step(x)", "scaler.step(y)"),
        base.replace("total = 0", "self.total = 0").replace("def f(x, y)", "def f(self, x, y)"),
        base.replace("total = 0", "global total\n    total = 0"),
    ):
        assert summary(changed) != summary(base), changed
    assert summary("LIMIT = 3\n") != summary("LIMIT = 4\n")  # a module-level binding: its users read it


def test_a_units_own_group_follows_what_it_reads_not_what_it_only_writes():
    """`UnitFacts.reads`: a method that only sets `self.steps` does not depend on the other methods that set
    it (speechbrain's `__init__` sets attributes every training method sets again); one that reads it
    (`self.steps += 1` reads it too) does."""
    text = textwrap.dedent(
        """\
        import torch


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.steps = 0
                self.scaler = torch.amp.GradScaler("cuda")

            def restart(self):
                self.steps = 0
                self.scaler.update()

            def count(self):
                self.steps += 1
                self.scaler.update()
        """
    )
    checker = UnitChecker(CONFIG)
    units = checker.units(text)
    lines = text.split("\n")
    index = {lines[u.first].strip().split("(")[0]: i for i, u in enumerate(units)}
    own = dict(checker.own_groups(units))
    assert index["def restart"] not in own[index["def __init__"]]
    assert index["def restart"] in own[index["def count"]] and index["def __init__"] in own[index["def count"]]
    assert "steps" not in units[index["def restart"]].facts.reads and "steps" in units[index["def count"]].facts.reads
    assert _seen(checker.check(text, "t.py", "doc")) == _seen(check_text(text, "t.py", CONFIG))
