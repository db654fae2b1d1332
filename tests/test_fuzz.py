"""The fuzzers of the torture runs, kept in the suite in a bounded form (issue 29, "Must show").

Two generators, a few hundred inputs per run: mutations of the fixtures' real AMP code (a seeded random
generator; the seed is in every failure message, and `AMP_LINT_FUZZ_SEED=<n>` replays a run), and
hypothesmith's programs from Python's grammar, put inside an AMP training step so that every rule's
analysis runs on them (Hypothesis prints the failing example and how to reproduce it).

What must hold for every input: no exception escapes, no "internal error" (a crash inside a rule or the
analysis, turned into an error line), and a fix of a file that compiles gives a file that still compiles.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import amp_lint.engine.checker  # noqa: F401  (the rules before the runner)
from amp_lint.engine import runner
from amp_lint.rules import ALL_RULES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED = int(os.environ.get("AMP_LINT_FUZZ_SEED", "20261201"))
MUTANTS = 300
ALL = frozenset(rule.code for rule in ALL_RULES)
CHECK = runner.CheckConfig(ALL, fix=False, unsafe_fixes=False, with_edits=True, write=False)
FIX = runner.CheckConfig(ALL, fix=True, unsafe_fixes=True, with_edits=False, write=False)

# Pieces a mutation inserts: AMP calls in the wrong places, brackets and blocks cut short, odd characters.
_PIECES = [
    "scaler.step(optimizer)\n", "scaler.update()\n", "scaler.scale(loss).backward()\n", "loss.backward()\n",
    "with torch.autocast('cuda', dtype=torch.float16):\n", "with torch.cuda.amp.autocast():\n", "    ",
    "optimizer.zero_grad()\n", "scaler.unscale_(optimizer)\n", "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    "(", ")", "[", "]", ":", "\n", "\\\n", "lambda: ", "if x:\n", "else:\n", "def f(*a, **k):\n", "return ", "yield ",
    "async ", "await ", "global scaler\n", "del scaler\n", "λ", "\t", "\r\n", "\f", "'''", "#", "@torch.autocast('cuda')\n",
    "scaler = torch.amp.GradScaler()\n", "for _ in range(3):\n", "while True:\n", "try:\n", "except Exception:\n", "pass\n",
]


def _seeds():
    return sorted(p for p in FIXTURES.rglob("*.py") if p.stat().st_size < 20_000)


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True) or ["\n"]
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randrange(len(lines) + 1)
        if choice < 0.3:
            lines.insert(at, rng.choice(_PIECES) * rng.randint(1, 3))
        elif choice < 0.5 and len(lines) > 1:
            del lines[min(at, len(lines) - 1) : at + rng.randint(1, 3)]
        elif choice < 0.65:
            lines[at:at] = lines[max(0, at - 3) : at]  # a block repeated
        elif choice < 0.8 and lines:
            index = min(at, len(lines) - 1)
            line = lines[index]
            cut = rng.randrange(len(line) + 1)
            lines[index] = line[:cut] + rng.choice(_PIECES) + line[cut:]
        elif lines:
            index = min(at, len(lines) - 1)
            lines[index] = "    " * rng.randint(0, 3) + lines[index].lstrip()  # indentation shifted
    return "".join(lines)


def _compiles(text: str) -> bool:
    try:
        compile(text, "<fuzz>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def _assert_sound(text: str, where: str) -> None:
    for config in (CHECK, FIX):
        outcome = runner.check_text(text, "fuzz.py", config)
        internal = [e.message for e in outcome.errors if "internal error" in e.message]
        assert not internal, f"{where}: {internal}\n--- input ---\n{text}"
        if config is FIX and outcome.fixed_text is not None and _compiles(text):
            assert _compiles(outcome.fixed_text), f"{where}: the fix broke the file\n--- input ---\n{text}"


def test_mutations_of_the_fixtures_never_crash_the_checker():
    seeds = _seeds()
    rng = random.Random(SEED)
    for number in range(MUTANTS):
        seed_file = rng.choice(seeds)
        text = _mutate(seed_file.read_text(encoding="utf-8", errors="replace"), rng)
        _assert_sound(text, f"AMP_LINT_FUZZ_SEED={SEED}, mutant {number} of {seed_file.relative_to(FIXTURES)}")


hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, given, settings  # noqa: E402

_STEP = """import torch
scaler = torch.amp.GradScaler()
for data in loader:
    with torch.autocast('cuda', dtype=torch.float16):
        loss = model(data)
{body}
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(hypothesmith.from_grammar(auto_target=False))
def test_grammar_programs_inside_a_training_step_never_crash_the_checker(program):
    body = "".join("        " + line + "\n" for line in program.splitlines()) or "        pass\n"
    if not _compiles(_STEP.format(body=body)):
        body = "        pass\n"  # a program that only works at module level: put it after the step
        program_after = program
    else:
        program_after = ""
    _assert_sound(_STEP.format(body=body) + program_after, "hypothesmith")
