"""`amp-lint verify` judges the runs of one seed pairwise: an SGD regression (tests/verify_cases.py), its right AMP
version, a clip before `scaler.unscale_`, and a scaler never updated, in one verify run shared by this module.

The AdamW cases run in tests/test_verify_pairs_adamw.py: two modules, so two xdist workers share the work.
"""

from __future__ import annotations

import importlib.util

import pytest
from verify_cases import check_pairwise, run_cases

from amp_lint.verify import EQUIVALENT, NOT_EQUIVALENT

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="amp-lint verify runs training scripts, which needs torch"
)


@pytest.fixture(scope="module")
def sgd_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sgd_cases")
    results, report, progress = run_cases(folder, ["sgd_correct", "sgd_clip_before_unscale", "sgd_never_updated"])
    return results, report, progress, folder


@needs_torch
@pytest.mark.parametrize(
    ("case", "status"),
    [("sgd_correct", EQUIVALENT), ("sgd_clip_before_unscale", NOT_EQUIVALENT), ("sgd_never_updated", NOT_EQUIVALENT)],
)
def test_verify_compares_the_runs_of_one_seed_pairwise_sgd(sgd_runs, case, status):
    results, _, _, folder = sgd_runs
    check_pairwise(results, folder, case, status)


@needs_torch
def test_progress_off_a_terminal_is_one_line_per_phase(sgd_runs):
    _, _, progress, _ = sgd_runs
    per_script = [line for line in progress if "sgd_correct.py" in line]

    assert [line.split(": ", 1)[1] for line in per_script] == ["converting", "fp32 run, seeds 0-2", "AMP run, seeds 0-2"]
    assert not any("step" in line for line in progress)
