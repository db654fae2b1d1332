"""Tests for amp_lint.guard, the runtime guard of the GradScaler / autocast protocol: one test per rule it checks,
the right patterns it must leave alone, its modes, `python -m amp_lint.guard`, the pytest option, and its table
(the static rules' IDs and wording).

Everything runs on CPU: torch 2.13's GradScaler("cpu") with float16 autocast, a 4-1 linear model, a few steps.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from amp_lint.analysis import protocol as table
from amp_lint.guard import breaches

torch = pytest.importorskip("torch")

import amp_lint.guard as guard  # noqa: E402
from amp_lint.guard import hooks  # noqa: E402

RULES_DIR = Path(__file__).resolve().parent.parent / "amp_lint" / "rules"
GUARD_DIR = RULES_DIR.parent / "guard"


@pytest.fixture
def record():
    """The guard in record mode for one test; yields its report, and always takes the hooks off again."""
    report = guard.install("record")
    try:
        yield report
    finally:
        guard.uninstall()


def setup(optimizers: int = 1):
    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 1) for _ in range(optimizers)]
    opts = [torch.optim.SGD(model.parameters(), lr=0.1) for model in models]
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    return models, opts, x, y


def loss_of(model, x, y):
    with torch.autocast("cpu", dtype=torch.float16):
        return torch.nn.functional.mse_loss(model(x), y)


def rules(report):
    return sorted({violation.rule for violation in report.violations})


def line_of(function, text):
    """The line number of the first line of ``function``'s source containing ``text``."""
    import inspect

    lines, start = inspect.getsourcelines(function)
    return start + next(index for index, line in enumerate(lines) if text in line)


# --- the right patterns: nothing to report -------------------------------------------------------------------


def canonical_loop(steps=3, clip=True):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()


def accumulation_loop(steps=3, micro=2):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        for _ in range(micro):
            scaler.scale(loss_of(model, x, y) / micro).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()


def gan_loop(steps=3, update_each=False):
    (net_d, net_g), (opt_d, opt_g), x, y = setup(2)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt_d.zero_grad()
        scaler.scale(loss_of(net_d, x, y)).backward()
        scaler.step(opt_d)
        if update_each:
            scaler.update()
        opt_g.zero_grad()
        scaler.scale(loss_of(net_g, x, y)).backward()
        scaler.unscale_(opt_g)
        torch.nn.utils.clip_grad_norm_(net_g.parameters(), 1.0)
        scaler.step(opt_g)
        scaler.update()


def resumed_per_epoch(epochs=3):
    """A scaler per epoch that loads the previous one's state: it does not restart."""
    [model], [opt], x, y = setup()
    state = None
    for _ in range(epochs):
        scaler = torch.amp.GradScaler("cpu")
        if state is not None:
            scaler.load_state_dict(state)
        for _ in range(2):
            opt.zero_grad()
            scaler.scale(loss_of(model, x, y)).backward()
            scaler.step(opt)
            scaler.update()
        state = scaler.state_dict()


@pytest.mark.parametrize(
    "loop",
    [canonical_loop, accumulation_loop, gan_loop, lambda: gan_loop(update_each=True), resumed_per_epoch],
    ids=["canonical", "accumulation", "gan", "gan-update-each", "resumed-per-epoch"],
)
def test_the_right_patterns_are_left_alone(record, loop):
    loop()

    assert record.violations == []


# --- one test per rule -----------------------------------------------------------------------------------------


def clip_before_unscale(steps=3):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()


def test_amp030_clipping_before_unscale_from_the_first_iteration_on(record):
    clip_before_unscale()

    [violation] = record.violations
    assert violation.rule == "AMP030" and violation.count == 3
    assert violation.line == line_of(clip_before_unscale, "clip_grad_norm_")
    assert violation.message == (
        "`torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)` clips gradients before `scaler.unscale_(opt)`: "
        "the gradients read are still multiplied by the scale"
    )


def unscale_twice():
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(loss_of(model, x, y)).backward()
    scaler.unscale_(opt)
    scaler.unscale_(opt)


def unscale_after_step():
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(loss_of(model, x, y)).backward()
    scaler.step(opt)
    scaler.unscale_(opt)


@pytest.mark.parametrize(
    ("program", "message"),
    [
        (unscale_twice, "`scaler.unscale_(opt)` runs again after `scaler.unscale_(opt)` with no `scaler.update()` "
         "between: RuntimeError: unscale_() has already been called on this optimizer since the last update()"),
        (unscale_after_step, "`scaler.unscale_(opt)` runs after `scaler.step(opt)` with no `scaler.update()` between: "
         "RuntimeError: unscale_() is being called after step()"),
    ],
    ids=["twice", "after-step"],
)
def test_amp024_a_second_unscale_raises_before_torch_does(program, message):
    guard.install("raise")
    try:
        with pytest.raises(guard.AmpProtocolError) as raised:
            program()
    finally:
        guard.uninstall()
    assert raised.value.violation.rule == "AMP024"
    assert raised.value.violation.message == message


def step_without_update(steps=2):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        scaler.step(opt)


def test_amp021_a_step_without_update_is_named_before_torchs_runtime_error():
    guard.install("raise")
    try:
        with pytest.raises(guard.AmpProtocolError, match="AMP021") as raised:
            step_without_update()
    finally:
        guard.uninstall()
    assert raised.value.violation.message == (
        "`scaler.step(opt)` is never followed by `scaler.update()` in this loop: RuntimeError: step() has already "
        "been called since the last update()"
    )


def unscale_and_step_without_update(steps=2):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        scaler.unscale_(opt)
        scaler.step(opt)


def test_the_next_iterations_unscale_names_the_missing_update(record):
    """The table's violation at the next iteration's `unscale_` (after step: what torch raises), reported as the
    static rules report that loop: AMP021, the update the previous iteration lacked."""
    with pytest.raises(RuntimeError):
        unscale_and_step_without_update()
    [violation] = record.violations
    assert violation.rule == table.rule_of("step-twice") == "AMP021"
    assert violation.line == line_of(unscale_and_step_without_update, "scaler.unscale_(opt)")
    assert violation.message.startswith("`scaler.step(opt)` is never followed by `scaler.update()` in this loop; ")
    assert violation.message.endswith(table.VIOLATIONS["unscale-after-step"][1])


def test_update_with_a_new_scale_needs_no_inf_checks(record):
    """`update(new_scale)` sets the scale: the table's UPDATE_NEW_SCALE records no need for inf checks."""
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))
    scaler.update(1024.0)
    assert record.violations == []
    scaler.scale(torch.ones(()))
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()
    assert rules(record) == ["AMP022"]


def update_before_step(steps=2):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        scaler.unscale_(opt)
        scaler.update()
        scaler.step(opt)


def update_twice(steps=2):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        scaler.step(opt)
        scaler.update()
        scaler.update()


@pytest.mark.parametrize(
    ("program", "rule", "wording"),
    [(update_before_step, "AMP022", "update() must come after every step() of the iteration"),
     (update_twice, "AMP023", "runs again later in the same iteration; update() once, after the last step()")],
    ids=["before-step", "twice"],
)  # fmt: skip
def test_amp022_amp023_update_in_the_wrong_place(record, program, rule, wording):
    try:
        program()
    except (RuntimeError, AssertionError):
        pass  # torch's own error, after the guard's record (update twice: 'No inf checks were recorded')

    assert rule in rules(record)
    violation = next(v for v in record.violations if v.rule == rule)
    assert violation.message.startswith("`scaler.update()` ") and wording in violation.message


def zero_grad_before_step():
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        scaler.scale(loss_of(model, x, y)).backward()
        opt.zero_grad(set_to_none=False)
        scaler.step(opt)
        scaler.update()


def test_amp043_zero_grad_between_the_scaled_backward_and_the_step(record):
    zero_grad_before_step()

    [violation] = record.violations
    assert violation.rule == "AMP043" and violation.line == line_of(zero_grad_before_step, "scaler.step(opt)")
    assert violation.message.startswith(
        "`opt.zero_grad(set_to_none=False)` clears the gradients of `scaler.scale(loss_of(model, x, y)).backward()` "
        "before `scaler.step(opt)` reads them"
    )


def backward_in_autocast():
    [model], [opt], x, y = setup()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
    opt.step()


def test_amp001_backward_inside_autocast_warns_at_the_users_line():
    guard.install("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            backward_in_autocast()
    finally:
        guard.uninstall()
    [warning] = [w for w in caught if issubclass(w.category, guard.AmpGuardWarning)]
    assert warning.filename == __file__ and warning.lineno == line_of(backward_in_autocast, "loss.backward()")
    assert str(warning.message) == (
        'AMP001 `loss.backward()` runs inside the block of `torch.autocast("cpu", dtype=torch.bfloat16)`; '
        "run the backward pass after leaving autocast"
    )


def scaler_per_epoch(epochs=3):
    [model], [opt], x, y = setup()
    for _ in range(epochs):
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):
            opt.zero_grad()
            scaler.scale(loss_of(model, x, y)).backward()
            scaler.step(opt)
            scaler.update()


def test_amp013_a_scaler_rebuilt_every_epoch(record):
    scaler_per_epoch()

    [violation] = record.violations
    assert violation.rule == "AMP013" and violation.count == 2
    assert violation.line == line_of(scaler_per_epoch, "GradScaler(")
    assert violation.message.startswith('`scaler = torch.amp.GradScaler("cpu")` builds a new GradScaler')
    assert "the scale restarts at its initial value and never calibrates; build it once, before the loop" in (
        violation.message
    )


def overflowing(steps):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y) * float("inf")).backward()
        scaler.step(opt)
        scaler.update()


def test_ampg01_the_scale_collapsing(record, monkeypatch):
    """Every step overflows: the scale halves each update, 65536 -> below 1 after 17; read every 32 updates."""
    overflowing(hooks.SCALE_CHECK_EVERY)

    [violation] = record.violations
    assert violation.rule == "AMPG01" and "fell to" in violation.message and "nearly every step overflows" in (
        violation.message
    )


def test_a_few_overflows_are_not_a_collapse(record):
    overflowing(3)
    canonical_loop(hooks.SCALE_CHECK_EVERY)

    assert record.violations == []


# --- gradient reads (opt-in) -----------------------------------------------------------------------------------


def reads(none_test_only):
    [model], [opt], x, y = setup()
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        opt.zero_grad()
        scaler.scale(loss_of(model, x, y)).backward()
        norms = []
        for parameter in model.parameters():
            if parameter.grad is not None and not none_test_only:
                norms.append(parameter.grad.norm())
        scaler.step(opt)
        scaler.update()


def test_amp030_a_gradient_read_before_unscale_but_not_a_none_test():
    report = guard.install("record", grad_reads=True)
    try:
        reads(none_test_only=True)
        assert report.violations == []
        reads(none_test_only=False)
    finally:
        guard.uninstall()
    assert "grad" not in torch.Tensor.__dict__  # the property is gone again
    [violation] = report.violations
    assert violation.rule == "AMP030" and violation.line == line_of(reads, "norms.append")
    assert violation.message.startswith("`norms.append(parameter.grad.norm())` reads gradients before `scaler.unscale_(opt)`")


# --- wrap, modes, report ---------------------------------------------------------------------------------------


def test_wrap_follows_only_the_wrapped_scaler():
    [model], [opt], x, y = setup()
    watched = guard.wrap(torch.amp.GradScaler("cpu"), "record")
    other = torch.amp.GradScaler("cpu")
    try:
        for scaler in (other, watched):
            opt.zero_grad()
            scaler.scale(loss_of(model, x, y)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
    finally:
        report = guard.uninstall()
    assert [violation.rule for violation in report.violations] == ["AMP030"]
    assert torch.amp.GradScaler.step.__qualname__ == "GradScaler.step"  # put back as it was


def test_the_report_is_json_and_the_mode_is_checked(tmp_path):
    with guard.guarded("record", report_path=tmp_path / "guard.json"):
        clip_before_unscale()
    data = json.loads((tmp_path / "guard.json").read_text())
    assert data["mode"] == "record"
    assert [(v["rule"], v["count"], Path(v["file"]).name) for v in data["violations"]] == [
        ("AMP030", 3, "test_guard.py")
    ]
    with pytest.raises(ValueError, match="unknown guard mode 'loud'"):
        guard.install("loud")


# --- python -m amp_lint.guard, the pytest option, and the package's weight -------------------------------------

SCRIPT = """
import sys
import torch

print("args", sys.argv[1:])
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(8, 4), torch.randn(8, 1)
for _ in range(2):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
"""


def test_python_m_amp_lint_guard_runs_a_script_with_its_arguments(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)

    child = subprocess.run(
        [sys.executable, "-m", "amp_lint.guard", "--mode", "record", "--report", "guard.json", "train.py", "--lr", "1"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip

    assert child.returncode == 1, child.stderr
    assert "args ['--lr', '1']" in child.stdout
    assert re.search(r"train\.py:15: AMP030 `torch\.nn\.utils\.clip_grad_norm_\(.*\(2x\)", child.stderr)
    [violation] = json.loads((tmp_path / "guard.json").read_text())["violations"]
    assert violation["line"] == 15
    fixed = SCRIPT.replace("    torch.nn.utils.clip", "    scaler.unscale_(opt)\n    torch.nn.utils.clip")
    script.write_text(fixed)
    clean = subprocess.run([sys.executable, "-m", "amp_lint.guard", "train.py"], capture_output=True, text=True,
                           cwd=tmp_path)  # fmt: skip
    assert clean.returncode == 0 and "no breach of the AMP protocol seen" in clean.stderr
    missing = subprocess.run([sys.executable, "-m", "amp_lint.guard", "nothere.py"], capture_output=True, text=True,
                             cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 2 and "no such script: nothere.py" in missing.stderr


PYTEST_FILE = '''
import torch


def test_training_step():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(8, 4)).square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
'''


@pytest.mark.skipif(importlib.util.find_spec("amp_lint") is None, reason="needs amp-lint installed (entry point)")
def test_the_pytest_option_fails_the_test_that_breaks_the_protocol(tmp_path):
    (tmp_path / "test_train.py").write_text(PYTEST_FILE)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_train.py"]

    plain = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    guarded = subprocess.run([*command, "--amp-guard=raise", "--amp-guard-report=guard.json"], capture_output=True,
                             text=True, cwd=tmp_path)  # fmt: skip

    assert plain.returncode == 1 and "step() has already been called" in plain.stdout  # torch's own words
    assert guarded.returncode == 1 and "AmpProtocolError" in guarded.stdout and "AMP021" in guarded.stdout
    assert json.loads((tmp_path / "guard.json").read_text())["violations"][0]["rule"] == "AMP021"


def test_importing_the_guard_imports_neither_torch_nor_libcst():
    code = "import sys, amp_lint.guard, amp_lint.guard.pytest_plugin; print(sorted({'torch', 'libcst'} & set(sys.modules)))"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.stdout.strip() == "[]", child.stderr


# --- the table: the static rules' IDs and wording ---------------------------------------------------------------


def test_the_guard_runs_the_static_rules_table_with_its_ids_and_messages():
    """One protocol: every violation the guard reports from the table has the table's rule and ends with the
    table's own message; there is no second transition table in the guard."""
    for name in breaches.SEEN_VIOLATIONS:
        for new_iteration in (False, True):
            breach = breaches.of_violation(name, new_iteration)
            rule, reason = table.VIOLATIONS[name]
            assert breach.rule == (table.rule_of("step-twice") if new_iteration and name in ("unscale-twice", "unscale-after-step") else rule)
            assert breach.message.format_map(collections.defaultdict(str)).endswith(reason), name
    assert not hasattr(breaches, "OPTIMIZER_TRANSITIONS") and not (GUARD_DIR / "protocol.py").exists()
    assert set(breaches.RULES) == {table.rule_of(n) for n in breaches.SEEN_VIOLATIONS} | {
        b.rule for b in breaches.OWN_BREACHES}  # fmt: skip


def test_the_guards_own_checks_use_a_static_rules_id_and_its_wording():
    """The checks outside the table: each rule ID but the guard-only AMPG01 is a static rule, and the fixed words
    of the guard's message (each stretch between placeholders and code quotes, of 12 characters or more) appear in
    that rule's message."""
    for breach in breaches.OWN_BREACHES:
        if breach.rule == "AMPG01":
            continue
        [source] = [path.read_text() for path in RULES_DIR.glob(f"{breach.rule.lower()}_*.py")]
        source = re.sub(r'"\s*\n\s*f?"', "", source)  # implicitly joined string literals, as one
        pieces = [piece.strip(" ;:'") for piece in re.split(r"\{[a-z_:]+\}|`", breach.message)]
        pieces = [piece for piece in pieces if len(piece) >= 12]
        missing = [piece for piece in pieces if piece not in source]
        assert pieces and not missing, (breach.rule, missing)
