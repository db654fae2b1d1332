"""The cold check parses only the relevant units of a large module (`amp_lint.parse.relevant`): the findings,
their places, fixes and source lines are those of a check of the whole text."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from amp_lint import rules as registry
from amp_lint.engine.runner import CheckConfig, check_text
from amp_lint.parse import relevant
from amp_lint.parse.prefilter import Prefilter
from amp_lint.parse.relevant import relevant_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "check").glob("*.py"))
ALL_CODES = frozenset(r.code for r in registry.ALL_RULES if r.code != "AMP900")
CONFIG = CheckConfig(frozenset(registry.default_codes()), False, False, True, False)
CONFIG_ALL = CheckConfig(ALL_CODES, False, False, True, False, (("preview", True),))
GATE = Prefilter([r for r in registry.ALL_RULES if r.code in registry.default_codes()]).gate

# Unrelated code, enough to make any fixture a large module: functions, a test class with many methods that
# share a helper, and a model class, none naming a gate word (they use `step`, `backward`, `grad` freely).
_UNRELATED_FUNCTION = '''

def unrelated_{i}(model, batch, optimizer):
    """Plain fp32 training code, nothing about mixed precision."""
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return helper_{i}(loss.item(), [p.grad for p in model.parameters()])


def helper_{i}(value, grads):
    return value + len(grads)
'''
_UNRELATED_CLASS = '''

class UnrelatedTests_{i}:
    def setUp(self):
        self.net = object()

    def _shared(self, steps):
        return [s * 2 for s in range(steps)]
''' + "".join(
    f'''
    def test_case_{j}(self):
        values = self._shared({j})
        assert len(values) == {j}, "step {j}"
'''
    for j in range(20)
)


# A module counts as large here from this many characters (`relevant.MIN_CHARS`, 40,000 in use): four units
# of padding make every fixture large, and the whole-text check each test compares with stays cheap.
SMALL_MIN_CHARS = 8_000


@pytest.fixture(autouse=True)
def _large_from_a_few_units(monkeypatch):
    monkeypatch.setattr(relevant, "MIN_CHARS", SMALL_MIN_CHARS)


def _padded(text: str) -> str:
    padding = "".join(_UNRELATED_FUNCTION.format(i=i) + _UNRELATED_CLASS.format(i=i) for i in range(4))
    return text.rstrip("\n") + "\n" + padding + "\n"


def _seen(outcome):
    return (
        [(d.code, d.location, d.end_location, d.message, d.source_line, d.related, d.fix) for d in outcome.diagnostics],
        [(e.message, e.location) for e in outcome.errors],
    )


def _whole_and_relevant(text: str, config: CheckConfig, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(relevant, "MIN_CHARS", 10**12)  # the whole text, as before
        whole = check_text(text, "train.py", config)
    return whole, check_text(text, "train.py", config)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_large_module_gets_the_findings_of_its_whole_text(path, monkeypatch):
    text = _padded(path.read_text())
    assert len(text) > relevant.MIN_CHARS
    dropped = relevant_text(text, ast.parse(text), GATE)
    assert dropped != text  # the padding is dropped: the test compares something
    whole, partial = _whole_and_relevant(text, CONFIG, monkeypatch)
    assert _seen(partial) == _seen(whole)


@pytest.mark.parametrize("path", FIXTURES[::5], ids=lambda p: p.stem)
def test_every_rule_preview_included_gets_the_findings_of_the_whole_text(path, monkeypatch):
    text = _padded(path.read_text())
    whole, partial = _whole_and_relevant(text, CONFIG_ALL, monkeypatch)
    assert _seen(partial) == _seen(whole)


def test_rows_and_columns_are_kept_and_the_irrelevant_units_hollowed():
    source = (ROOT / "fixtures" / "check" / "bad_amp020_step_without_scaler.py")
    text = _padded(source.read_text() if source.is_file() else FIXTURES[0].read_text())
    kept = relevant_text(text, ast.parse(text), GATE)
    assert len(kept.splitlines()) == len(text.splitlines())
    tree = ast.parse(kept)  # still a module
    for before, after in zip(text.splitlines(), kept.splitlines()):
        assert after == before or after.strip() in ("", '""', '"""')
    assert "def unrelated_3(" not in kept and "class UnrelatedTests_3" not in kept
    # The dropped units, one after the other, are one string statement each run of them: few nodes.
    strings = [s for s in tree.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)]
    assert strings and all(set(s.value.value) <= {"\n"} for s in strings)
    assert len(strings) < 8 and max(s.end_lineno - s.lineno for s in strings) > 50


def test_a_hollowed_unit_keeps_its_block_and_the_rows_after_it(monkeypatch):
    """Dropped units first in a class body, between kept methods, one-line ones, and last in the file:
    the text parses, and the findings (rows, columns, messages, fixes) are those of the whole text."""
    unrelated = "".join(f"    def helper_{i}(self):\n        return {i}\n\n" for i in range(300))
    text = (
        "import torch\n\n\nclass Trainer:\n" + unrelated
        + "    def one(self): return 1\n"
        "    def train(self, model, opt, x):\n"
        "        scaler = torch.amp.GradScaler()\n"
        "        with torch.autocast('cuda'):\n"
        "            loss = model(x)\n"
        "        loss.backward()\n"
        "        scaler.step(opt)\n\n" + unrelated.replace("helper_", "other_")
        + "    def last(self):\n        scaler = torch.amp.GradScaler()\n        return scaler\n"
        + "".join(f"\n\ndef tail_{i}():\n    return {i}\n" for i in range(200))
    )
    kept = relevant_text(text, ast.parse(text), GATE)
    assert kept.count("\n") == text.count("\n") and "def helper_3(" not in kept and "def tail_3(" not in kept
    ast.parse(kept)
    whole, partial = _whole_and_relevant(text, CONFIG, monkeypatch)
    assert _seen(partial) == _seen(whole) and whole.diagnostics


def _check(text: str):
    return [(d.code, d.location.row) for d in check_text(text, "train.py", CONFIG).diagnostics]


def test_the_methods_that_share_a_relevant_methods_state_are_kept(monkeypatch):
    # `train` names no gate word, but steps the optimizer that `__init__` (beside its scaler) stored.
    text = _padded(
        "import torch\n\n\nclass Trainer:\n"
        "    def __init__(self, model, optimizer):\n"
        "        self.model, self.optimizer = model, optimizer\n"
        "        self.scaler = torch.amp.GradScaler()\n\n"
        "    def train(self, batch):\n"
        "        loss = self.model(batch)\n"
        "        loss.backward()\n"
        "        self.optimizer.step()\n"
    )
    kept = relevant_text(text, ast.parse(text), GATE)
    assert "self.optimizer.step()" in kept
    whole, partial = _whole_and_relevant(text, CONFIG, monkeypatch)
    assert _seen(partial) == _seen(whole)


def test_callers_of_a_relevant_function_are_kept_and_callers_of_its_helpers_are_not():
    text = _padded(
        "import torch\n\n\ndef build():\n    return torch.amp.GradScaler()\n\n\n"
        "def fit(loader, opt):\n    scaler = build()\n    for x in loader:\n        opt.step()\n\n\n"
        "def main(loader, opt):\n    for epoch in range(10):\n        fit(loader, opt)\n"
    )
    kept = relevant_text(text, ast.parse(text), GATE)
    assert "def fit(" in kept and "def main(" in kept  # callers: an epoch loop around the scaler's builder
    assert "def helper_0(" not in kept  # called only by code that is not kept


def test_small_files_and_fixes_parse_the_whole_text():
    text = FIXTURES[0].read_text()
    assert relevant_text(text, ast.parse(text), GATE) == text  # below MIN_CHARS
    big = _padded(text)
    assert relevant_text(big, None, GATE) == big  # no `ast` tree: LibCST decides on the whole text
    assert relevant_text(big, ast.parse(big), None) == big  # no gate words: every unit may matter


def test_state_is_shared_within_a_class_family_only(monkeypatch):
    # `Trainer.train` reads `self.optimizer`, which its `__init__` (beside the scaler) stores: kept. A test
    # method whose local model class stores `self.optimizer` (that class's own instance) and an unrelated
    # class that stores the same attribute name share no state with it: not kept. A subclass in the file
    # does (its `self` is a Trainer).
    text = _padded(
        "import torch\n\n\nclass Trainer:\n"
        "    def __init__(self, model, optimizer):\n"
        "        self.model = model\n"
        "        self.scaler = torch.amp.GradScaler()\n\n"
        "    def train(self, batch):\n"
        "        loss = self.model(batch)\n"
        "        self.scaler.scale(loss).backward()\n"
        "        self.scaler.step(self.optimizer)\n"
        "        self.scaler.update()\n\n\n"
        "class Tests:\n"
        "    def test_local_model(self):\n"
        "        class Local:\n"
        "            def build(self):\n"
        "                self.optimizer = None\n"
        "        return Local()\n\n\n"
        "class Other:\n"
        "    def prepare(self):\n"
        "        self.optimizer = make()\n\n\n"
        "class Child(Trainer):\n"
        "    def setup(self):\n"
        "        self.optimizer = make()\n"
    )
    kept = relevant_text(text, ast.parse(text), GATE)
    assert "def test_local_model(" not in kept
    assert "class Other:" not in kept
    assert "class Child(Trainer):" in kept and kept.count("self.optimizer = make()") == 1
    whole, partial = _whole_and_relevant(text, CONFIG, monkeypatch)
    assert _seen(partial) == _seen(whole)


def test_a_fix_in_a_large_module_writes_the_whole_files_quotes(monkeypatch):
    """The fix's new string takes the quote the whole file mostly uses, not the quote of the units kept:
    here the kept code uses double quotes and the dropped units single ones (NeMo's flux model)."""
    text = (
        'import torch\n\n\ndef train(model, x):\n    with torch.cuda.amp.autocast():\n'
        '        return model(x, mode="fast", name="run")\n'
        + "".join(f"\n\ndef plain_{i}(a):\n    return a.get('k{i}', 'v') + 'x' + 'y'\n" for i in range(600))
    )
    assert text.count("'") > text.count('"')
    whole, partial = _whole_and_relevant(text, CONFIG, monkeypatch)
    assert whole.diagnostics and _seen(partial) == _seen(whole)
    edits = [edit.content for d in partial.diagnostics if d.fix for edit in d.fix.edits]
    assert any("'cuda'" in content for content in edits), edits
