"""Issue 43, the editor where users type: a comment typed on the training step's lines (`scaler.step(...)`, the
scaled backward) keeps the document's verified grouping (`engine.unit_signature`): only the edited unit's group is
checked again, and every result is still the cold check's of the edited text, noqa comments included."""

from __future__ import annotations

import textwrap

from amp_lint import rules as registry
from amp_lint.engine.runner import CheckConfig, check_text
from amp_lint.engine.unit_signature import signature_lines
from amp_lint.engine.units import UnitChecker

CONFIG = CheckConfig(frozenset(registry.default_codes()), False, False, False, False)

# A class-based trainer, as the real ones are: the training step in one method, with findings (a clip on scaled
# gradients, a deprecated constructor), the checkpoint methods and helpers beside it.
TRAINER = textwrap.dedent(
    """\
    import os

    import torch
    from torch.cuda.amp import GradScaler, autocast


    class Trainer:
        def __init__(self, model, optimizer, loader, args):
            self.model = model
            self.optimizer = optimizer
            self.loader = loader
            self.args = args
            self.scaler = GradScaler(enabled=args.fp16)

        def log(self, step, loss):
            if step % self.args.log_every == 0:
                print(step, loss)

        def train_epoch(self, epoch):
            self.model.train()
            for step, (inputs, labels) in enumerate(self.loader):
                with autocast(enabled=self.args.fp16):
                    loss = self.model(inputs, labels)
                self.scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_norm)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad()
                self.log(step, loss.item())

        def evaluate(self, loader):
            self.model.eval()
            with torch.no_grad():
                return sum(self.model(x, y).item() for x, y in loader)

        def save(self, path):
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, os.path.join(path, "ckpt.pt"))
    """
)


def _seen(outcome):
    return (
        [(d.code, d.location, d.end_location, d.message, d.source_line, d.related, d.fix) for d in outcome.diagnostics],
        [(e.message, e.location) for e in outcome.errors],
        outcome.unsafe_fixable,
    )


def _settled(checker: UnitChecker, text: str):
    """Check as the server does (`eager=False`), then verify in its idle time."""
    outcome = checker.check(text, "trainer.py", "doc")
    while checker.settle("doc"):
        pass
    return outcome


def test_a_comment_on_the_step_line_keeps_the_verified_grouping_and_checks_one_group():
    checker = UnitChecker(CONFIG, eager=False)
    _settled(checker, TRAINER)
    assert "doc" not in checker.pending and checker.verified["doc"][1] is not None
    before = dict(checker.stats)
    edited = TRAINER.replace("self.scaler.step(self.optimizer)", "self.scaler.step(self.optimizer)  # step once per batch")
    outcome = checker.check(edited, "trainer.py", "doc")
    assert _seen(outcome) == _seen(check_text(edited, "trainer.py", CONFIG))
    assert "doc" not in checker.pending  # nothing to verify again
    assert checker.stats["whole"] == before["whole"] and checker.stats["core"] - before["core"] == 1


def test_results_after_edits_of_the_training_step_are_the_cold_checks_noqa_included():
    """Comments, arguments, the backward line, a `# noqa` that silences a finding and its removal: after every edit
    (and after the verification the server runs in its idle time), the findings are the cold check's."""
    checker = UnitChecker(CONFIG, eager=False)
    _settled(checker, TRAINER)
    step = "self.scaler.step(self.optimizer)"
    backward = "self.scaler.scale(loss).backward()"
    clip = "torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_norm)"
    edits = [
        (step, step + "  # edit 1"),
        (step + "  # edit 1", step + "  # edit 2"),
        (backward, backward + "  # scale first"),
        (step + "  # edit 2", "self.scaler.step(self.optimizer_2)"),
        ("self.scaler.step(self.optimizer_2)", step),
        (clip, clip + "  # noqa: AMP030"),  # silences a finding: the grouping is verified again
        (clip + "  # noqa: AMP030", clip + "  # noqa: AMP030, AMP099"),
        (clip + "  # noqa: AMP030, AMP099", clip + "  # clip # noqa"),
        (clip + "  # clip # noqa", clip + '  # "#" in a comment'),
        (backward + "  # scale first", "self.scaler.scale(loss * 2).backward()"),
        ('"model": self.model.state_dict()', '"model": self.model.state_dict(),  # "scaler": self.scaler.state_dict()'),
    ]
    text = TRAINER
    codes = set()
    for number, (old, new) in enumerate(edits):
        assert old in text, old
        text = text.replace(old, new)
        expected = _seen(check_text(text, "trainer.py", CONFIG))
        assert _seen(checker.check(text, "trainer.py", "doc")) == expected, number
        assert _seen(_settled(checker, text)) == expected and _seen(checker.check(text, "trainer.py", "doc")) == expected, number
        codes |= {finding[0] for finding in expected[0]}
    assert {"AMP030"} <= codes


def test_the_signature_keeps_code_and_suppression_comments_and_drops_other_comments():
    import re

    pattern = re.compile(r"noqa|amp-lint|scaler")
    lines = [
        "    def f(self):",
        "        self.scaler.step(opt)  # a comment",
        "        self.scaler.update()  # noqa: AMP022",
        "        s = 'scaler # not a comment'  # a comment",
        "        x = 1  # amp-lint: ignore",
        '        """scaler',
        '        # inside a string"""',
    ]
    relevant = tuple(line for line in lines if pattern.search(line))
    assert signature_lines(lines, relevant) == (
        "        self.scaler.step(opt)",
        "        self.scaler.update()  # noqa: AMP022",
        "        s = 'scaler # not a comment'",
        "        x = 1  # amp-lint: ignore",
        '        """scaler',
    )
    assert signature_lines(["    broken = (scaler  # open"], ("    broken = (scaler  # open",)) == ("    broken = (scaler  # open",)
    assert signature_lines(lines[:2], (lines[0],)) == (lines[0],)  # no comment in them: as they are


def test_an_edit_while_the_verification_is_pending_does_not_run_the_verification_first():
    """Typing goes on while the server verifies the groups in its idle time: an edit with the same signature gets
    the whole core's check (one check), and the verification stays pending (in a big class it is as many checks,
    each nearly the class, as the class has members)."""
    checker = UnitChecker(CONFIG, eager=False)
    checker.check(TRAINER, "trainer.py", "doc")
    assert "doc" in checker.pending
    groups = checker.stats["groups"]
    edited = TRAINER.replace("self.scaler.step(self.optimizer)", "self.scaler.step(self.optimizer)  # typing")
    assert _seen(checker.check(edited, "trainer.py", "doc")) == _seen(check_text(edited, "trainer.py", CONFIG))
    assert "doc" in checker.pending and checker.stats["groups"] == groups
    assert _seen(_settled(checker, edited)) == _seen(check_text(edited, "trainer.py", CONFIG))
    assert "doc" not in checker.pending and checker.verified["doc"][1] is not None
