"""Fixes proved by running: for each rule with a fix, a small buggy training script (tests/fix_pairs/) that
shows the failure or the wrong numbers the rule describes, on CPU; the real CLI fixes a copy
(`python -m amp_lint check --fix --select CODE`); the fixed script runs, and a recording GradScaler shows
GradScaler's documented order in every iteration: scale, backward, unscale_ before any clip, one step,
one update. A second `--fix` changes nothing.

Where CPU cannot show a rule's bug (CUDA-only behaviour), the pair's script says so in its docstring and
the test checks only that the fixed script runs in the documented order (AMP091's FSDP runs in one CPU
process, on gloo).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent / "fix_pairs"))
import harness  # noqa: E402

from amp_lint.engine.checker import Checker  # noqa: E402

PAIRS_DIR = Path(__file__).parent / "fix_pairs"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Pair:
    code: str
    script: str
    raises: str = ""  # the buggy script fails with this text
    warns: str = ""  # the buggy script warns with this text, the fixed one does not
    # (buggy globals, buggy recorder, fixed globals, fixed recorder) -> is the difference the rule's?
    numbers: Optional[Callable] = None
    unsafe: bool = False
    cpu_shows: bool = True  # False: the bug is CUDA's; only the fixed run and its order are checked
    scaler: bool = True  # the script trains with a GradScaler (bfloat16 needs none)


def _moved_more(buggy, _b, fixed, _f) -> bool:
    return fixed["moved"] > 100 * buggy["moved"] > 0


def _same_moved(buggy, _b, fixed, _f) -> bool:
    return abs(buggy["moved"] - fixed["moved"]) <= 1e-6 * abs(fixed["moved"]) and fixed["moved"] > 0


def _no_apex(buggy, _b, fixed, _f) -> bool:
    """AMP077: the buggy script ran on the (fake) apex, the fixed one imports no apex and moved as far."""
    import re

    text = Path(fixed["__file__"]).read_text()
    return (
        buggy["amp"].__name__ == "apex.amp"
        and "amp" not in fixed
        and not re.search(r"^\s*(import|from)\s+apex\b", text, re.MULTILINE)
        and _same_moved(buggy, _b, fixed, _f)
    )


def _steps(recorder) -> int:
    return sum(1 for what in recorder.names() if what == "step")


PAIRS = [
    Pair("AMP001", "amp001_backward_in_autocast.py", cpu_shows=False),
    Pair("AMP011", "amp011_unscaled_backward.py", raises="Attempted step but _scale is None"),
    Pair(
        "AMP013",
        "amp013_scaler_in_loop.py",
        numbers=lambda buggy, _b, fixed, _f: (buggy["final_scale"], fixed["final_scale"]) == (512.0, 4096.0),
    ),
    Pair(
        "AMP014",
        "amp014_scaler_device_mismatch.py",
        numbers=lambda buggy, _b, fixed, _f: not buggy["scaler"].is_enabled() and fixed["scaler"].is_enabled(),
        cpu_shows=not torch.cuda.is_available(),
    ),
    Pair("AMP020", "amp020_optimizer_step_on_scaled_grads.py", raises="No inf checks were recorded prior to update"),
    Pair("AMP021", "amp021_missing_update.py", raises="step() has already been called since the last update()"),
    Pair("AMP022", "amp022_update_before_step.py", raises="No inf checks were recorded prior to update"),
    Pair("AMP023", "amp023_update_twice.py", raises="No inf checks were recorded prior to update"),
    Pair("AMP024", "amp024_unscale_twice.py", raises="unscale_() has already been called on this optimizer since the last update()"),
    Pair("AMP030", "amp030_clip_without_unscale.py", numbers=_moved_more),
    Pair(
        "AMP031",
        "amp031_clip_error_if_nonfinite.py",
        raises="is non-finite, so it cannot be clipped",
        numbers=lambda _g, _b, fixed, _f: fixed["final_scale"] < 2.0**40,  # the scaler backed off instead
    ),
    Pair(
        "AMP033",
        "amp033_scaled_loss_logged.py",
        numbers=lambda buggy, _b, fixed, _f: buggy["logged"] == [1024.0 * v for v in fixed["logged"]]
        and buggy["moved"] == fixed["moved"] > 0,
    ),
    Pair(
        "AMP034",
        "amp034_loss_scaled_twice.py",
        numbers=lambda buggy, _b, fixed, _f: buggy["final_scale"] < fixed["final_scale"] == 1024.0
        and buggy["moved"] > 10 * fixed["moved"] > 0,
    ),
    Pair("AMP040", "amp040_step_every_microbatch.py", numbers=lambda _g, buggy, _h, fixed: (_steps(buggy), _steps(fixed)) == (4, 2)),
    Pair("AMP041", "amp041_unscale_outside_boundary.py", raises="unscale_() has already been called on this optimizer"),
    Pair("AMP043", "amp043_zero_grad_before_step.py", raises="No inf checks were recorded for this optimizer"),
    Pair(
        "AMP053",
        "amp053_nested_disabled_autocast.py",
        numbers=lambda buggy, _b, fixed, _f: (buggy["head_dtype"], fixed["head_dtype"]) == (torch.float16, torch.float32),
    ),
    Pair(
        "AMP054",
        "amp054_autocast_silently_disabled.py",
        raises="must be torch.dtype, not bool",
        numbers=lambda _g, _b, fixed, _f: fixed["loss_dtype"] == torch.bfloat16,  # autocast is on, in bfloat16
        scaler=False,
    ),
    Pair("AMP055", "amp055_graphed_callables_autocast_cache.py", cpu_shows=False),
    Pair(
        "AMP061",
        "amp061_custom_fwd_bwd_unpaired.py",
        numbers=lambda buggy, _b, fixed, _f: set(buggy["backward_autocast"]) == {False} and set(fixed["backward_autocast"]) == {True},
    ),
    Pair("AMP062", "amp062_custom_fwd_without_device_type.py", raises="missing 1 required keyword-only argument: 'device_type'", unsafe=True),
    Pair("AMP070", "amp070_deprecated_cuda_autocast.py", warns="`torch.cuda.amp.autocast(args...)` is deprecated"),
    Pair("AMP071", "amp071_deprecated_cpu_autocast.py", warns="`torch.cpu.amp.autocast(args...)` is deprecated",
         numbers=lambda buggy, _b, fixed, _f: buggy["moved"] == fixed["moved"]),
    Pair("AMP072", "amp072_deprecated_grad_scaler.py", warns="`torch.cpu.amp.GradScaler(args...)` is deprecated",
         numbers=lambda buggy, _b, fixed, _f: buggy["moved"] == fixed["moved"]),
    Pair("AMP073", "amp073_deprecated_custom_fwd_bwd.py", warns="`torch.cuda.amp.custom_fwd(args...)` is deprecated"),
    Pair("AMP074", "amp074_deprecated_autocast_state.py", warns="torch.is_autocast_cpu_enabled() is deprecated",
         numbers=lambda buggy, _b, fixed, _f: buggy["inside"] == fixed["inside"] == [True] * 4),
    Pair("AMP075", "amp075_autocast_device_type.py", cpu_shows=False),
    Pair("AMP077", "amp077_apex_amp.py", warns="apex.amp is deprecated", numbers=_no_apex, unsafe=True),
    Pair(
        "AMP078",
        "amp078_cuda_implicit_autocast_state.py",
        # CPU autocast is on, the no-argument call says it is not, so nothing is cast; the fix keeps that answer.
        numbers=lambda buggy, _b, fixed, _f: buggy["cpu_inside"] == [True] * 4
        and buggy["inside"] == fixed["inside"] == [False] * 4
        and buggy["input_dtypes"] == [torch.float32] * 4
        and buggy["moved"] == fixed["moved"],
    ),
    # AMP079: torch 2.13 still carries the private shim (no warning to show); same object, same numbers.
    Pair(
        "AMP079",
        "amp079_private_legacy_names.py",
        numbers=lambda buggy, _b, fixed, _f: buggy["stages"] == fixed["stages"] == [True] * 4
        and buggy["moved"] == fixed["moved"] > 0
        and "from torch.amp.grad_scaler import OptState" in Path(fixed["__file__"]).read_text(),
    ),
    Pair("AMP091", "amp091_fsdp_plain_grad_scaler.py", cpu_shows=False),
    Pair("AMP900", "amp900_unused_noqa.py", numbers=lambda buggy, _b, fixed, _f: buggy["moved"] == fixed["moved"] > 0),
]


def _fix_command(pair: Pair, path: Path) -> list:
    # --preview: a preview rule's fix is proved here too (it changes nothing for the other rules).
    command = [sys.executable, "-m", "amp_lint", "check", "--isolated", "--no-cache", "--preview", "--fix", "--select", pair.code]
    return command + (["--unsafe-fixes"] if pair.unsafe else []) + [str(path)]


@pytest.fixture(scope="module")
def fixed_copies(tmp_path_factory) -> Dict[str, tuple]:
    """Each pair's script fixed by the real CLI in a temporary folder: {code: (path, process result)}.
    The CLI runs for all pairs at once (one process each), to keep the module under a minute."""
    folder = tmp_path_factory.mktemp("fix_pairs")
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    running = {}
    for pair in PAIRS:
        copy = folder / pair.script
        shutil.copyfile(PAIRS_DIR / pair.script, copy)
        running[pair.code] = (copy, subprocess.Popen(
            _fix_command(pair, copy), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, cwd=folder
        ))
    results = {}
    for code, (copy, process) in running.items():
        out, err = process.communicate(timeout=120)
        results[code] = (copy, process.returncode, out + err)
    return results


def test_every_rule_with_a_fix_has_a_pair():
    from amp_lint import rules

    with_fix = {r.code for r in rules.ALL_RULES if r.fix_applicability is not None}
    # AMP100: the conversion, tested on its own (test_convert.py). AMP095: renames in Transformer Engine and
    # Accelerate, which are not installed here (its examples test the rewrite; its docs cite both sources).
    assert with_fix - {p.code for p in PAIRS} == {"AMP100", "AMP095"}


@pytest.mark.parametrize("pair", PAIRS, ids=[p.code for p in PAIRS])
def test_fix_pair(pair: Pair, fixed_copies):
    buggy_path = PAIRS_DIR / pair.script
    fixed_path, returncode, output = fixed_copies[pair.code]
    fixed_text = fixed_path.read_text()
    assert fixed_text != buggy_path.read_text(), output
    assert returncode == 0, output  # fixed: nothing left to report
    assert "error:" not in output, output

    # The buggy script shows the bug.
    buggy = buggy_recorder = None
    if pair.raises and pair.cpu_shows:
        with pytest.raises(Exception, match=_escaped(pair.raises)):
            harness.run_script(buggy_path)
    elif pair.cpu_shows:
        buggy, buggy_recorder = harness.run_script(buggy_path)
        if pair.warns:
            assert any(pair.warns in str(w.message) for w in buggy_recorder.caught)

    # The fixed one runs, in the documented order, every iteration.
    fixed, fixed_recorder = harness.run_script(fixed_path)
    if pair.scaler:
        assert harness.documented_order(fixed_recorder.events) == []
        assert len(harness.iterations(fixed_recorder.events)) >= 2
    else:
        assert fixed_recorder.names().count("backward") >= 2 and "scale" not in fixed_recorder.names()
    if pair.warns:
        assert not any(pair.warns in str(w.message) for w in fixed_recorder.caught)
    if pair.numbers is not None and pair.cpu_shows:
        if buggy is None:
            buggy, buggy_recorder = {}, None
        assert pair.numbers(buggy, buggy_recorder, fixed, fixed_recorder)

    # A second --fix changes nothing.
    again = Checker(frozenset({pair.code}), fix=True, unsafe_fixes=pair.unsafe).check(fixed_text, str(fixed_path))
    assert again.fixed_source is None and not again.errors, again.errors


def _escaped(text: str) -> str:
    import re

    return re.escape(text)
