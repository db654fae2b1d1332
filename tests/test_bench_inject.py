"""bench/inject.py (issues 26 and 27): each operator applies to correct AMP code and its mutant parses; the
caught / fix-back classification works on the real amp-lint, checked in place in a project copy."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import inject  # noqa: E402
import inject_compare  # noqa: E402
import inject_ops  # noqa: E402

TRAIN = textwrap.dedent(
    """\
    import torch

    from .helpers import make_model


    def train(loader, optimizer, loss_fn, epochs=1):
        model = make_model()
        scaler = torch.amp.GradScaler("cuda")
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    out = model(x)
                    loss = loss_fn(out, y)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
    """
)
HELPERS = "import torch\n\n\ndef make_model():\n    return torch.nn.Linear(2, 2)\n"


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    package = tmp_path / "proj" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(TRAIN)
    (package / "helpers.py").write_text(HELPERS)
    return tmp_path / "proj"


def test_each_operator_applies_once_and_parses():
    found = inject_ops.mutants(TRAIN, "pkg/train.py", inject_ops.FIRST_TEN)
    by_op = {}
    for mutant in found:
        by_op.setdefault(mutant.operator, []).append(mutant)
        ast.parse(mutant.text)
        assert mutant.text != TRAIN
        assert mutant.function == "train"
    assert sorted(by_op) == sorted(inject_ops.FIRST_TEN)
    assert all(len(ms) == 1 for ms in by_op.values()), {k: len(v) for k, v in by_op.items()}
    text = {op: ms[0].text for op, ms in by_op.items()}
    assert "scaler.update()" not in text["update_dropped"]
    assert text["update_doubled"].count("scaler.update()") == 2
    assert text["update_before_step"].index("scaler.update()") < text["update_before_step"].index("scaler.step(optimizer)")
    assert "unscale_" not in text["unscale_dropped"]
    assert text["unscale_doubled"].count("scaler.unscale_(optimizer)") == 2
    assert "optimizer.step()" in text["step_direct"] and "scaler.step" not in text["step_direct"]
    body = text["zero_grad_between"]
    assert body.index("scaler.scale(loss).backward()") < body.index("optimizer.zero_grad()") < body.index("scaler.unscale_")
    assert "                scaler.scale(loss).backward()" in text["backward_in_autocast"]  # indented into the with
    assert "loss.backward()" in text["unscaled_backward"] and "scaler.scale" not in text["unscaled_backward"]
    assert 'torch.autocast("cuda:0"' in text["indexed_device"]


def test_a_block_left_empty_gets_pass_and_misreads_are_skipped():
    code = "def f(scaler, opt):\n    if True:\n        scaler.update()\n"
    (dropped,) = [m for m in inject_ops.mutants(code, "f.py", ["update_dropped"])]
    assert dropped.text == "def f(scaler, opt):\n    if True:\n        pass\n"
    # torch.cuda.amp.autocast's first argument is `enabled`, not a device: no indexed-device site.
    legacy = "import torch\nfrom torch.cuda.amp import autocast\n\ndef f(x, amp):\n    with autocast(amp):\n        return x\n"
    assert inject_ops.mutants(legacy, "f.py", ["indexed_device"]) == []


def test_operators_make_the_mistake_whose_one_fix_is_the_original():
    """Issue 27: an injected bug whose right fix is not the original measures nothing about the fix. Detection
    counts every mutant; the ones marked `one_answer` are those whose one right fix is the original."""
    code = textwrap.dedent(
        """\
        import torch

        def f(model, x, device_type, scaler, opt, clip):
            with torch.autocast(x.device.type, enabled=False):
                a = model(x.float())
            with torch.autocast(device_type=device_type):
                b = model(x)
            with torch.autocast("cuda"):
                loss = model(x)
            total = loss + a + b
            scaler.scale(total).backward()
            scaler.unscale_(opt)
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
        """
    )
    devices = {m.description.split("`")[1]: m.one_answer for m in inject_ops.mutants(code, "f.py", ["indexed_device"])}
    # A device's type becomes the string of the device, a literal "cuda" an indexed literal: one answer each.
    # A name given an indexed literal is detected, but its fix is "cuda", not the name that was there.
    assert devices == {"x.device.type": True, "'cuda'": True, "device_type": False}
    # Forward work between the block and the backward: which of it runs under autocast is not one answer.
    (moved,) = [m for m in inject_ops.mutants(code, "f.py", ["backward_in_autocast"]) if "block of line 8" in m.description]
    assert not moved.one_answer and "        total = loss + a + b\n        scaler.scale(total)" in moved.text
    adjacent = code.replace("    total = loss + a + b\n    scaler.scale(total)", "    scaler.scale(loss)")
    (moved,) = [m for m in inject_ops.mutants(adjacent, "f.py", ["backward_in_autocast"]) if "block of line 8" in m.description]
    assert moved.one_answer and "        loss = model(x)\n        scaler.scale(loss).backward()\n" in moved.text
    # An unscale_ before an `if` that holds the clip: before the `if` and inside it are both right.
    (dropped,) = inject_ops.mutants(code, "f.py", ["unscale_dropped"])
    assert not dropped.one_answer
    same_block = code.replace("    if clip:\n        torch.nn", "    torch.nn")
    (dropped,) = inject_ops.mutants(same_block, "f.py", ["unscale_dropped"])
    assert dropped.one_answer
    # The other operators' mutants have one answer, but for those whose mistake has two right fixes by its
    # nature (an update moved before the step: right after the step, or where it was).
    assert all(m.one_answer for m in inject_ops.mutants(code, "f.py", ["update_dropped", "step_direct", "unscaled_backward"]))
    moved = inject_ops.mutants(code, "f.py", ["update_before_step", "zero_grad_between"])
    assert moved and not any(m.one_answer for m in moved)


def test_line_map_follows_insertions_and_deletions():
    old = "a\nb\nc\nd\n"
    to_old = inject_compare.line_map(old, "a\nb\nx\nc\nd\n")
    assert [to_old(n) for n in (1, 2, 4, 5)] == [1, 2, 3, 4]
    to_old = inject_compare.line_map(old, "a\nc\nd\n")
    assert [to_old(n) for n in (1, 2, 3)] == [1, 3, 4]


def test_fix_classes_on_texts():
    (mutant,) = inject_ops.mutants(TRAIN, "pkg/train.py", ["update_dropped"])
    classify = inject_compare.classify_fix
    assert classify(mutant, TRAIN, TRAIN, [], [], "")["class"] == "restored"
    assert classify(mutant, TRAIN, mutant.text, [], [], "refused: x")["class"] == "refused"
    assert classify(mutant, TRAIN, mutant.text + "def (:\n", [], [], "")["class"] == "broken"
    other = mutant.text.replace("scaler.step(optimizer)", "scaler.step(optimizer)\n            scaler.update(); pass")
    assert classify(mutant, TRAIN, other, [], [], "")["class"] == "fixed otherwise"
    new_finding = [{"code": "AMP023", "location": {"row": 17}, "confidence": "high"}]
    assert classify(mutant, TRAIN, other, [], new_finding, "")["class"] == "broken"


def test_caught_and_fixed_back_with_the_real_amp_lint(project: Path):
    worker = inject.Worker(sys.executable)
    try:
        todo = [m for m in inject_ops.mutants(TRAIN, "pkg/train.py") if m.operator in ("update_dropped", "update_before_step")]
        for mutant in todo:
            mutant.project = "proj"
        results = inject.run_project(worker, "proj", project, todo, True, lambda record: None)
        base = inject.check(worker, project, "pkg/train.py")
    finally:
        worker.close()
    assert (project / "pkg" / "train.py").read_text() == TRAIN  # the source project is never touched
    by_op = {r["operator"]: r for r in results}
    assert not any(r.get("error") for r in results), results
    dropped = by_op["update_dropped"]
    assert dropped["caught"], dropped
    assert dropped["fix_back"]["class"] == "restored", dropped["fix_back"]
    moved = by_op["update_before_step"]
    # `unscale_(); update(); step()` (update moved before step after an unscale_) raises on the next
    # iteration's unscale_; whether amp-lint sees it is what the benchmark measures, not this test.
    assert isinstance(moved["caught"], bool)
    assert not moved["caught"] or moved["fix_back"]["class"] in inject_compare.FIX_CLASSES, moved
    # The original, judged against itself, is caught by nothing and changes nothing.
    verdict = inject_compare.judge_catch(
        inject_ops.Mutant("update_dropped", "pkg/train.py", 19, 19, "train", "", TRAIN), TRAIN, base["findings"], base["findings"]
    )
    assert not verdict["caught"] and not verdict["other_changes"]


BRANCHES = textwrap.dedent(
    """\
    def step(scaler, optimizer, loss, hvd):
        scaler.scale(loss).backward()
        if hvd:
            optimizer.synchronize()
            scaler.step(optimizer)
        else:
            scaler.step(optimizer)
        scaler.update()
    """
)


def test_a_finding_the_mutant_had_before_the_fix_is_not_the_fix_breaking_code():
    """Issue 27: an operator that moves `update()` into one branch also takes it from the other branch; the
    finding that leaves is the mutant's own second bug, there before any fix, not what the fix broke."""
    mutant = inject_ops.Mutant(
        "update_before_step", "f.py", 8, 7, "step", "moved",
        BRANCHES.replace("        scaler.step(optimizer)\n    scaler.update()\n", "        scaler.update()\n        scaler.step(optimizer)\n"),
    )
    fixed = BRANCHES.replace("        scaler.step(optimizer)\n    scaler.update()\n", "        scaler.step(optimizer)\n        scaler.update()\n")
    assert fixed != BRANCHES and "scaler.update()\n        scaler.step" in mutant.text
    lost_update = {"code": "AMP021", "location": {"row": 5}, "confidence": "high"}
    classify = inject_compare.classify_fix
    # Judged against the original only, the finding looks new: broken.
    assert classify(mutant, BRANCHES, fixed, [], [lost_update], "")["class"] == "broken"
    # The mutant already had it at the same place: the fix did its part.
    outcome = classify(mutant, BRANCHES, fixed, [], [lost_update], "", mutant_findings=[lost_update])
    assert outcome["class"] == "fixed otherwise" and "AMP021@5" in outcome["why"]
    # One the fix adds (another rule, not in the mutant) is still the fix breaking code.
    added = {"code": "AMP023", "location": {"row": 8}, "confidence": "high"}
    assert classify(mutant, BRANCHES, fixed, [], [lost_update, added], "", mutant_findings=[lost_update])["class"] == "broken"


def test_a_fix_that_drops_an_import_is_broken():
    (mutant,) = inject_ops.mutants(TRAIN, "pkg/train.py", ["update_dropped"])
    fixed = TRAIN.replace("from .helpers import make_model\n", "").replace("model = make_model()", "model = None")
    outcome = inject_compare.classify_fix(mutant, TRAIN, fixed, [], [], "", mutant_findings=[])
    assert outcome["class"] == "broken" and "make_model" in outcome["why"]


def test_the_roundtrip_import_runs_under_the_packages_own_venv(tmp_path: Path):
    """Issue 27: without a package's dependencies a changed module fails to import alike fixed and unfixed,
    which proves nothing; `--venvs` imports it under a venv that has them (bench/roundtrip_venvs.py)."""
    import subprocess

    import fix_roundtrip
    import roundtrip_venvs

    pins = roundtrip_venvs.pins()
    assert len(pins) >= 26 and pins["transformers"].startswith("transformers==") and pins["timm"].startswith("timm==")
    assert roundtrip_venvs.venv_for("no_such_package_here") == (None, "no pinned version known for no_such_package_here")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(site, "a_dependency_installed_there.py").write_text("X = 1\n")
    fixed, unfixed = tmp_path / "fixed" / "proj", tmp_path / "unfixed" / "proj"
    for root, body in ((fixed, "X = undefined_name\n"), (unfixed, "X = 1\n")):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "uses_dep.py").write_text("import a_dependency_installed_there\n" + body)
    changed = [fixed / "pkg" / "uses_dep.py"]
    # Here the dependency is missing: both fail alike and the broken fix goes unseen.
    assert fix_roundtrip.import_check(changed, fixed, unfixed)[:3] == (0, 1, [])
    # Under the venv that has it, the fixed module's own error shows.
    _, _, differ, _ = fix_roundtrip.import_check(changed, fixed, unfixed, str(venv / "bin" / "python"))
    assert [(p.name, a.split(":")[0], b) for p, a, b in differ] == [("uses_dep.py", "NameError", "ok")]


def test_equivalent_mutants_are_left_out_and_a_finding_on_one_is_called_a_false_positive(tmp_path: Path):
    import json
    import types

    import inject_report

    def record(line, caught):
        return {
            "project": "p", "file": "t.py", "line": line, "operator": "step_direct", "function": "train",
            "mutation": "`scaler.step(opt)` -> `opt.step()`", "caught": caught, "assumed_only": False,
            "elsewhere": False, "other_changes": False, "error": "",
        }

    results = [record(1, True), record(2, False), record(3, False), record(4, True)]
    notes = tmp_path / "causes.json"
    notes.write_text(json.dumps({
        "p/t.py:3 step_direct": {"equivalent": True, "cause": "a manual inf check proves the step right"},
        "p/t.py:4 step_direct": {"equivalent": True, "cause": "no bug here"},
        "p/t.py:2 step_direct": {"principle": 3, "cause": "open world"},
    }), encoding="utf-8")
    inject.attach_causes(results, notes)
    args = types.SimpleNamespace(jobs=1, seed=0, per_operator=4)
    text = inject_report.render(results, ["step_direct"], 0.0, args)
    assert "**1 caught (50%)**" in text and "2 equivalent mutants" in text
    assert "| step_direct | AMP020, AMP022 | 1 / 2 |" in text
    assert "p/t.py:3 (train)" in text and "p/t.py:4 (train)" in text
    assert text.count("a false positive**") == 1  # line 4, reported although no bug


def test_a_projects_own_scaler_class_gives_no_sites():
    # thinc's PyTorchGradScaler: named like torch's, derived from nothing, its own protocol (no step()).
    own = textwrap.dedent(
        """\
        class PyTorchGradScaler:
            def update(self):
                self._found_inf = False
        class Wrapped(torch.amp.GradScaler):
            pass
        """
    )
    foreign = inject_ops.own_scaler_classes([own])
    assert foreign == frozenset({"PyTorchGradScaler"})
    shim = textwrap.dedent(
        """\
        import torch
        from .scaler import PyTorchGradScaler

        class Shim:
            def __init__(self, grad_scaler: PyTorchGradScaler = None):
                if grad_scaler is None:
                    grad_scaler = PyTorchGradScaler(True)
                self._grad_scaler = grad_scaler
                self.scaler = torch.amp.GradScaler("cuda")

            def finish(self, opt):
                self._grad_scaler.update()
                self.scaler.step(opt)
                self.scaler.update()
        """
    )
    sites = {(m.operator, m.line) for m in inject_ops.mutants(shim, "shim.py", ["update_dropped"], foreign)}
    assert sites == {("update_dropped", 14)}
    assert {(m.operator, m.line) for m in inject_ops.mutants(shim, "shim.py", ["update_dropped"])} == {
        ("update_dropped", 12),
        ("update_dropped", 14),
    }


def test_every_default_rule_family_of_issue_46_has_an_operator_that_applies_once_and_parses():
    """bench/inject_ops_more.py: each added operator finds its one site in the training template, its mutant
    parses and differs, and names the default rule it expects."""
    import inject_ops_more

    more = [op for op in inject_ops.OPERATORS if op in inject_ops_more.OPERATORS_MORE]  # inject_ops_rules: its own test
    assert sorted(more) == sorted(inject_ops_more.OPERATORS_MORE)
    # float32 is an accepted CUDA autocast dtype (AMP054 leaves it): its sites are other devices' autocasts.
    on_cpu = TRAIN.replace('torch.autocast("cuda"', 'torch.autocast("cpu"')
    assert not inject_ops.mutants(TRAIN, "pkg/train.py", ["float32_autocast"])
    (cpu,) = inject_ops.mutants(on_cpu, "pkg/train.py", ["float32_autocast"])
    assert 'torch.autocast("cpu", dtype=torch.float32)' in cpu.text
    more.remove("float32_autocast")
    found = inject_ops.mutants(TRAIN, "pkg/train.py", more)
    by_op = {}
    for mutant in found:
        by_op.setdefault(mutant.operator, []).append(mutant)
        ast.parse(mutant.text)
        assert mutant.text != TRAIN
    assert sorted(by_op) == sorted(more)
    assert all(len(ms) == 1 for ms in by_op.values()), {k: len(v) for k, v in by_op.items()}
    text = {op: ms[0].text for op, ms in by_op.items()}
    loop = text["scaler_in_loop"].split("for x, y in loader:")[1]
    assert 'scaler = torch.amp.GradScaler("cuda")' in loop
    assert 'GradScaler("cpu")' in text["scaler_device_cpu"]
    assert "dtype=torch.bfloat16" in text["bf16_with_scaler"]
    assert "error_if_nonfinite=True" in text["nonfinite_clip"]
    assert "scaled_loss.item()" in text["scaled_loss_logged"]
    assert text["grad_norm_before_unscale"].index("p.grad.norm()") < text["grad_norm_before_unscale"].index("scaler.unscale_")
    assert "growth_factor=0.5" in text["invalid_growth_factor"]
    assert 'AMP_DEVICE = "cuda:0"' in text["device_constant"] and "torch.autocast(AMP_DEVICE" in text["device_constant"]
    assert "torch.autocast(amp_device()" in text["device_helper"]
    assert '**{"device_type": "cuda:0"}' in text["device_kwargs"]
    assert "def bce_term(" in text["bce_in_helper"]
    assert "AMP_CONTEXT = torch.cuda.amp.autocast\n" in text["deprecated_reference"]
    for op in more:
        assert inject_ops.EXPECTED[op] and op in inject_ops.PRINCIPLE


def test_a_bce_reached_through_the_added_helper_is_caught_in_the_helper():
    """bce_in_helper: AMP052 reports the BCE in the helper the operator adds (outside the site's function);
    the catch counts a new finding of the rule anywhere in the file."""
    (mutant,) = inject_ops.mutants(TRAIN, "pkg/train.py", ["bce_in_helper"])
    helper_line = mutant.text.splitlines().index(
        "    return torch.nn.functional.binary_cross_entropy(scores.sigmoid(), torch.ones_like(scores))"
    ) + 1
    after = [{"code": "AMP052", "location": {"row": helper_line}, "confidence": "high"}]
    assert inject_compare.judge_catch(mutant, TRAIN, [], after)["caught"]
    other = inject_ops.mutants(TRAIN, "pkg/train.py", ["nonfinite_clip"])[0]
    far = [{"code": "AMP031", "location": {"row": 500}, "confidence": "high"}]
    assert not inject_compare.judge_catch(other, TRAIN, [], far)["caught"]
