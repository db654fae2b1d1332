"""`amp-lint verify` judges the runs of one seed pairwise: an AdamW classifier (tests/verify_cases.py), its right
AMP version and a clip before `scaler.unscale_`, in one verify run shared by this module. Adam normalises the
gradients, so the broken clip's gap sits far inside fp32's seed-to-seed spread: only the pairing shows it.

The SGD cases run in tests/test_verify_pairs_sgd.py: two modules, so two xdist workers share the work.
"""

from __future__ import annotations

import importlib.util

import pytest
from verify_cases import check_pairwise, run_cases

from amp_lint.verify import EQUIVALENT, NOT_EQUIVALENT, runner

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="amp-lint verify runs training scripts, which needs torch"
)


@pytest.fixture(scope="module")
def adamw_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adamw_cases")
    results, report, progress = run_cases(folder, ["adamw_correct", "adamw_clip_before_unscale"])
    return results, report, progress, folder


@needs_torch
@pytest.mark.parametrize(("case", "status"), [("adamw_correct", EQUIVALENT), ("adamw_clip_before_unscale", NOT_EQUIVALENT)])
def test_verify_compares_the_runs_of_one_seed_pairwise_adamw(adamw_runs, case, status):
    results, _, _, folder = adamw_runs
    check_pairwise(results, folder, case, status)


@needs_torch
def test_the_text_report_shows_what_was_judged(adamw_runs):
    _, report, _, _ = adamw_runs

    text = runner.format_text(report)

    header = text.splitlines()[0].split()
    assert header[:4] == ["script", "device/dtype", "steps", "x"] and "allowed" in header and "fell" in header
    assert "skipped" in header and "parted" in header
    assert "allowed: the band it must stay within (3 x the seed-to-seed error of those paired differences" in text
    row = next(line for line in text.splitlines() if line.startswith("adamw_clip_before_unscale.py"))
    assert row.split()[-2:] == ["not", "equivalent"] and "0/0/0" in row
