"""A checked file's trees are freed by refcounting when its check ends, not left for the cyclic collector.

Each collection after a file scanned whatever the file left behind: the kept `ast` tree, the relevance pass's
units (a class and its methods point at each other), the def-use index of the file's values (a function's
binding points at its scope, the scope at its parent). On torch's package that was a tenth of the workers'
time. The findings do not depend on any of this; these tests pin that nothing of a check is left in a cycle.
"""

from __future__ import annotations

import ast
import gc

import libcst as cst

from amp_lint import rules as registry
from amp_lint.analysis.def_use import NameScope
from amp_lint.engine.runner import CheckConfig, check_text
from amp_lint.parse import python_ast, relevant

CONFIG = CheckConfig(frozenset(registry.default_codes()), False, False, True, False)

# A clean training class (no finding, so no fix is built) whose autocast device the analysis resolves through
# the file's values (a module-level name, a method's local), padded past `relevant.MIN_CHARS` with classes
# and functions the relevance pass drops.
_TRAINER = '''import torch

DEVICE = "cuda"


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler(DEVICE)

    def step(self, batch):
        device = DEVICE

        def forward():
            return self.model(batch).sum()

        with torch.autocast(device_type=device, dtype=torch.float16):
            loss = forward()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
'''
_PADDING = '''

class Unrelated{i}:
    def first(self):
        return self.second() + {i}

    def second(self):
        def inner(value):
            return value * 2

        return inner({i})


def helper_{i}(values):
    total = 0
    for value in values:
        total += value
    return total
'''


def _text() -> str:
    text = _TRAINER + "".join(_PADDING.format(i=i) for i in range(200))
    assert len(text) > relevant.MIN_CHARS
    return text


def _left_in_cycles(run) -> list:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, (ast.AST, cst.CSTNode, relevant._Unit, NameScope))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_a_checked_files_trees_and_indexes_are_not_left_in_cycles():
    text = _text()
    check_text(text, "train.py", CONFIG)  # modules imported, memos filled: not what is measured
    outcomes = []
    assert _left_in_cycles(lambda: outcomes.append(check_text(text, "train.py", CONFIG))) == []
    assert outcomes[0].diagnostics == [] and outcomes[0].errors == []


def test_the_kept_ast_tree_is_dropped_when_the_check_ends():
    check_text(_text(), "train.py", CONFIG)
    assert python_ast._last is None
