"""Every fixed file is checked before it is written: fixes made to fail on purpose are dropped, the file
keeps the other fixes, and the report says which fix and why (text, JSON, SARIF)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Iterable

import libcst as cst
import pytest
from click.testing import CliRunner

from amp_lint import cli
from amp_lint import rules as registry
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.engine import runner
from amp_lint.engine.checker import Checker
from amp_lint.engine.fix_check import regression
from amp_lint.fixes.builder import FixBuilder
from amp_lint.fixes.verify_fix import hazards, new_hazards
from amp_lint.rules.base import Finding, Rule

# AMP001 (backward inside autocast) with a safe fix that works, and `scaler.scale(loss)` for the test rule.
TRAIN = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
)
TRAIN_FIXED_FOR_AMP001 = TRAIN.replace("        scaler.scale(loss).backward()\n", "    scaler.scale(loss).backward()\n")


class _BrokenFix(Rule):
    """A test-only rule: a finding on each `scaler.scale(...)` call, with a fix that breaks the code in the
    way `BREAK` says."""

    code = "AMP999"
    name = "test-broken-fix"
    summary = "test only"
    severity = Severity.WARNING
    default_enabled = False
    fix_applicability = Applicability.SAFE
    BREAK = "double-scale"

    def check(self, model) -> Iterable[Finding]:
        for call in _scale_calls(model.module):
            builder = FixBuilder(model.module)
            statement = _statement_of(call, model.parents)
            if self.BREAK == "double-scale":
                builder.replace(call, lambda node: node.with_changes(args=[cst.Arg(node)]))
            elif self.BREAK == "new-finding":  # a GradScaler built in the loop: a new AMP013 (a default rule)
                builder.insert_before(statement, builder.statement('scaler = torch.amp.GradScaler("cuda")\n'))
            elif self.BREAK == "unscale-twice":
                twice = [builder.statement("scaler.unscale_(optimizer)\n") for _ in range(2)]
                builder.insert_after(statement, *twice)
            elif self.BREAK == "parse-error":
                builder.replace(call, lambda node: _unparsable_name())
            yield self.finding(call, "`scaler.scale(...)` (test)", fix=builder.build("break it", Applicability.SAFE))


def _unparsable_name() -> cst.Name:
    name = cst.Name("placeholder")
    object.__setattr__(name, "value", "not valid python")  # past LibCST's validation: code that does not parse
    return name


def _scale_calls(module: cst.Module):
    found = []

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "scale":
                found.append(node)

    module.visit(Visitor())
    return found


def _statement_of(node, parents):
    while not isinstance(node, cst.SimpleStatementLine):
        node = parents[id(node)]
    return node


@pytest.fixture
def broken(monkeypatch):
    """Registers the test rule; yields a function that sets how its fix breaks."""
    from amp_lint.rules._table import RuleEntry

    monkeypatch.setattr(registry, "ALL_RULES", list(registry.ALL_RULES) + [_BrokenFix])
    # The registry's table (what the command line validates codes against, and the prefilter reads).
    entry = RuleEntry(_BrokenFix.code, "", "_BrokenFix", False, (), ())
    monkeypatch.setattr(registry, "RULES", registry.RULES + (entry,))
    monkeypatch.setattr(runner, "_CHECKERS", {})
    monkeypatch.setattr(runner, "_PREFILTERS", {})

    def set_break(kind: str) -> None:
        monkeypatch.setattr(_BrokenFix, "BREAK", kind)

    return set_break


def _run(tmp_path: Path, *args: str):
    result = CliRunner().invoke(cli.main, ["check", "--no-cache", "--isolated", *args], catch_exceptions=False)
    return result


REASONS = {
    "double-scale": "the fixed code scales a loss twice (scaler.scale of a scaled loss)",
    "new-finding": "the fixed code has a new AMP013 (grad-scaler-built-in-loop)",
    "unscale-twice": "the fixed code calls scaler.unscale_(optimizer) twice before scaler.update()",
    "parse-error": "the fixed code does not parse",
}


@pytest.mark.parametrize("kind", sorted(REASONS))
def test_a_fix_that_fails_the_check_leaves_the_file_untouched_and_says_why(broken, tmp_path, monkeypatch, kind):
    broken(kind)
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(TRAIN)
    result = _run(tmp_path, "--fix", "--select", "AMP999", "train.py")
    assert Path("train.py").read_text() == TRAIN  # byte for byte
    assert result.exit_code == 1, result.output  # the finding is left (issue 44.9: a refused fix is no failure)
    assert "train.py:7:9: error: not fixed: AMP999 at train.py:7: " + REASONS[kind] in result.output
    assert "Found 1 error" in result.output or "AMP999" in result.output


def test_unscale_twice_is_named(broken, tmp_path, monkeypatch):
    broken("unscale-twice")
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(TRAIN)
    result = _run(tmp_path, "--fix", "--select", "AMP999", "train.py")
    assert Path("train.py").read_text() == TRAIN
    assert "not fixed: AMP999 at train.py:7: the fixed code calls scaler.unscale_(optimizer) twice before scaler.update()" in result.output


def test_the_file_keeps_the_fixes_that_pass(broken, tmp_path, monkeypatch):
    broken("double-scale")
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(TRAIN)
    result = _run(tmp_path, "--fix", "--select", "AMP001,AMP999", "train.py")
    assert Path("train.py").read_text() == TRAIN_FIXED_FOR_AMP001
    assert "not fixed: AMP999" in result.output
    assert "AMP001" not in result.output.replace("AMP001,", "")  # fixed: no longer reported
    again = _run(tmp_path, "--fix", "--select", "AMP001,AMP999", "train.py")
    assert Path("train.py").read_text() == TRAIN_FIXED_FOR_AMP001  # and a second run keeps it
    assert "not fixed: AMP999" in again.output


@pytest.mark.parametrize("output_format", ["json", "sarif"])
def test_the_reason_reaches_the_machine_formats(broken, tmp_path, monkeypatch, output_format):
    broken("double-scale")
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(TRAIN)
    result = _run(tmp_path, "--fix", "--select", "AMP999", "--output-format", output_format, "train.py")
    assert Path("train.py").read_text() == TRAIN
    assert "not fixed: AMP999 at train.py:7: the fixed code scales a loss twice" in result.output
    document = json.loads(result.stdout)
    assert document  # valid JSON


def test_the_finding_of_a_dropped_fix_is_reported_without_a_fix(broken):
    broken("double-scale")
    result = Checker(frozenset({"AMP999"}), fix=True).check(TRAIN, "train.py")
    assert result.fixed_source is None and not result.fixed
    assert [d.code for d in result.diagnostics] == ["AMP999"]
    assert result.diagnostics[0].fix is None
    assert [e.message for e in result.errors] == [
        "not fixed: AMP999 at train.py:7: the fixed code scales a loss twice (scaler.scale of a scaled loss)"
    ]


# --- the comparison itself ---
def test_findings_are_compared_by_rule_function_and_message_shape_not_by_line():
    before = [("AMP030", "train", "clip at line 12"), ("AMP024", "train", "x")]
    moved = [("AMP024", "train", "x")]  # AMP030 fixed
    assert regression(before, moved, [before[0]], {}) is None
    assert regression(before, before, [before[0]], {}) == "the AMP030 finding is still there after the fix"
    added = moved + [("AMP023", "train", "update twice")]
    assert regression(before, added, [before[0]], {"AMP023": "update-more-than-once"}) == (
        "the fixed code has a new AMP023 (update-more-than-once) in train(): update twice"
    )
    # A message that quotes code the fix changed is the same finding.
    requoted = [("AMP030", "train", "clip at line 12"), ("AMP024", "train", "y")]
    assert regression(before, requoted, [], {}) is None


SCALER_LOOP = textwrap.dedent(
    """\
    def train(model, optimizer, scaler, data, clip):
        for x in data:
            optimizer.zero_grad()
            loss = model(x)
            scaler.scale(loss).backward()
            if clip:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
    """
)


@pytest.mark.parametrize(
    "change, kind",
    [
        (("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n", "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n            scaler.unscale_(optimizer)\n"), "unscale-twice"),
        (("scaler.update()\n", "scaler.update()\n        scaler.update()\n"), "update-twice"),
        (("scaler.step(optimizer)\n", "scaler.step(optimizer)\n        scaler.step(optimizer)\n"), "step-twice"),
        (("scaler.scale(loss).backward()", "loss = scaler.scale(loss)\n        scaler.scale(loss.mean()).backward()"), "scale-twice"),
        (("scaler.scale(loss).backward()", "scaler.scale(cast(Tensor, scaler.scale(loss))).backward()"), "scale-twice"),
        (("        scaler.update()\n", ""), "unscale-after-step"),  # the next iteration's unscale_ follows step()
        (("        scaler.update()\n", "        if x is None:\n            continue\n        scaler.update()\n"), "unscale-after-step"),
    ],
)
def test_the_path_check_sees_each_hazard(change, kind):
    assert hazards(SCALER_LOOP) == ()
    broken = SCALER_LOOP.replace(*change)
    assert kind in [h.kind for h in new_hazards(SCALER_LOOP, broken)]


@pytest.mark.parametrize(
    "fine",
    [
        # one unscale_ per branch, optimizers stepped in a loop, a scaler per optimizer, a scheduler's step(epoch)
        SCALER_LOOP.replace("        scaler.step(optimizer)", "        else:\n            scaler.unscale_(optimizer)\n        scaler.step(optimizer)"),
        SCALER_LOOP.replace("scaler.step(optimizer)", "for opt in [optimizer]:\n            scaler.step(opt)"),
        SCALER_LOOP.replace("scaler.update()", "scaler.update()\n        scheduler.step(epoch)\n        scheduler.step(epoch)"),
        SCALER_LOOP.replace("scaler.scale(loss).backward()", "scaled = scaler.scale(loss)\n        scaled.backward()"),
    ],
)
def test_the_path_check_is_quiet_on_correct_loops(fine):
    assert fine != SCALER_LOOP
    assert hazards(fine) == ()


# --- the check as a safety net: issue 16's real-world shapes, whatever the rules decide about them ---
SAFETY_NET = Path(__file__).parent / "data" / "fix_safety_net"


@pytest.mark.parametrize("name", ["ignite.py", "alf.py", "icefall.py", "dlrm.py"])
def test_fixes_that_would_break_correct_code_are_never_written(name):
    """ignite (`cast(Tensor, scaler.scale(loss)).backward()`) and alf (`loss = scaler.scale(loss)` then
    `loss.mean().backward()`): wrapping the loss again scales it twice. icefall (`update(new_scale)` every
    100 batches after the per-batch `update()`): deleting the per-batch one makes the next `step()` raise.
    DLRM (two optimizers under two flags, one `update()`): moving it into one flag's branch makes the other
    optimizer's next `step()` raise. Whether or not a rule reports these, --fix must leave them as they are."""
    source = (SAFETY_NET / name).read_text()
    result = Checker(frozenset(registry.default_codes()), fix=True, unsafe_fixes=True).check(source, name)
    assert result.fixed_source is None
    assert all(e.message.startswith("not fixed: ") for e in result.errors), result.errors


def test_two_clips_get_one_unscale():
    """waifu-diffusion: two consecutive clips, each reported, get one `unscale_` before the first."""
    source = (SAFETY_NET / "waifu.py").read_text()
    for codes in ({"AMP030"}, set(registry.default_codes())):
        result = Checker(frozenset(codes), fix=True).check(source, "waifu.py")
        assert not result.errors
        assert result.fixed_source.count("scaler.unscale_(optimizer)") == 1
        assert result.fixed_source.index("scaler.unscale_(optimizer)") < result.fixed_source.index("clip_grad_norm_(unet")


def test_the_roundtrip_bench_counts_fixed_and_dropped_fixes(tmp_path):
    import os
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.py").write_text(TRAIN)  # AMP001: fixed; AMP999 (its fix scales twice): dropped
    (corpus / "other.py").write_text("import torch\n")  # nothing to fix
    root = Path(__file__).resolve().parent.parent
    command = f"{sys.executable} {root / 'tests' / 'data' / 'cli_with_a_broken_fix.py'}"
    result = subprocess.run(
        [sys.executable, str(root / "bench" / "fix_roundtrip.py"), "--amp-lint", command, "--select", "AMP001,AMP999", str(corpus)],
        capture_output=True, text=True, timeout=900, cwd=root,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith(("| corpus | safe", "| corpus | unsafe"))]
    assert len(rows) == 2, result.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        # files, fixed, fixes, dropped, broken, then the import of the fixed file (both ok / both fail alike /
        # differs: the loop's module-level names are undefined, so both copies fail alike), unstable
        assert cells[2:11] == ["2", "1", "1", "1", "0", "0", "1", "0", "0"], row
    assert "not fixed: AMP999 at train.py:7: the fixed code scales a loss twice" in result.stdout


def test_the_roundtrip_bench_imports_each_fixed_module_beside_its_unfixed_self(tmp_path):
    """Issue 27: a fixed file must still run its own import; a dependency missing here fails both alike."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import fix_roundtrip

    fixed, unfixed = tmp_path / "fixed" / "proj", tmp_path / "unfixed" / "proj"
    for root, body in ((fixed, "import torch\nVALUE = undefined_name\n"), (unfixed, "import torch\nVALUE = 1\n")):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "good.py").write_text("from pkg import helper\nVALUE = helper.X\n")
        (root / "pkg" / "helper.py").write_text("X = 1\n")
        (root / "pkg" / "broken.py").write_text(body)
        (root / "pkg" / "needs_dep.py").write_text("import a_module_nobody_installed\n")
        (root / "scripts-dir").mkdir()
        (root / "scripts-dir" / "run.py").write_text("x = 1\n")
    changed = [fixed / "pkg" / n for n in ("good.py", "broken.py", "needs_dep.py")] + [fixed / "scripts-dir" / "run.py"]
    same_ok, same_failed, differ, not_modules = fix_roundtrip.import_check(changed, fixed, unfixed)
    assert (same_ok, same_failed, not_modules) == (1, 1, 1)
    assert [(p.name, a.split(":")[0], b) for p, a, b in differ] == [("broken.py", "NameError", "ok")]
    assert fix_roundtrip.module_name(fixed / "pkg" / "__init__.py", fixed) == "pkg"
    # A copy that is itself a package imports from its parent.
    assert fix_roundtrip.package_root(fixed / "pkg") == fixed


def test_a_check_marks_only_the_fixes_that_fix_would_keep():
    """`[*]` (a fix in the JSON) only where `--fix` keeps the fix: an `unscale_` before the clip would be a
    second one on the logging path, so `--fix` refuses it, and a plain check reports the finding without a
    fix (before: `[*]`, then "not fixed" from `--fix`)."""
    from amp_lint.engine.checker import Checker

    source = (
        "import torch\n"
        "scaler = torch.amp.GradScaler('cuda')\n"
        "for x in loader:\n"
        "    scaler.scale(model(x).sum()).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    if log:\n"
        "        scaler.unscale_(opt)\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    (finding,) = Checker(frozenset({"AMP030"})).check(source, "t.py").diagnostics
    assert finding.code == "AMP030" and finding.fix is None
    fixed = Checker(frozenset({"AMP030"}), fix=True).check(source, "t.py")
    assert fixed.fixed_source is None and any("not fixed" in e.message for e in fixed.errors)
    # a fix `--fix` keeps is still offered
    kept = source.replace("    if log:\n        scaler.unscale_(opt)\n", "")
    (finding,) = Checker(frozenset({"AMP030"})).check(kept, "t.py").diagnostics
    assert finding.fix is not None
