"""`amp-lint verify` end to end on bundled scripts, with amp-lint's own conversion (its own module, so an xdist
worker runs it beside tests/test_verify.py and the pairwise modules)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amp_lint.verify import BUNDLED_SCRIPTS, EQUIVALENT
from amp_lint.verify import cli as verify_cli

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="amp-lint verify runs training scripts, which needs torch"
)


@pytest.fixture(autouse=True)
def one_thread_per_child(monkeypatch):
    """The training runs here are tiny: one thread each is fastest, and steady on a busy machine."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@needs_torch
def test_verify_bundled_scripts_end_to_end(tmp_path):
    """amp-lint's own conversion of bundled scripts, as `--fix` writes it (the scripts' own device expression).

    Two of them (the cheapest, one with accumulation): all six take minutes on a CI machine's two cores."""
    scripts = [str(BUNDLED_SCRIPTS / "mlp_regression.py"), str(BUNDLED_SCRIPTS / "grad_accumulation.py")]
    result = CliRunner().invoke(
        verify_cli.verify,
        ["--device", "cpu", "--steps", "40", "--warmup", "5", "--output-format", "json",
         "--output-dir", str(tmp_path), *scripts],
    )  # fmt: skip

    report = json.loads(result.stdout)
    verdicts = {
        Path(entry["script"]).name: (entry["status"], entry["reasons"], entry["crash"]) for entry in report["scripts"]
    }
    assert len(verdicts) == 2
    assert all(status == EQUIVALENT for status, _, _ in verdicts.values()), verdicts
    assert result.exit_code == 0
