"""The benchmark's issue-31 ratio: the cold check and Ruff's silent check alternate, run for run, and the
verdict reads the median of the pairs' ratios. Nothing here is timed or judged on speed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "run.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_run_for_tests", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _benchmark(bench, tmp_path: Path):
    corpus_root = tmp_path / "corpus"
    corpus_root.mkdir()
    (corpus_root / "a.py").write_text("x = 1\n")
    options = bench.Options(
        jobs=1, repeat_fast=3, repeat_peers=1, precommit_runs=1, peer_sample=0, seed=0,
        timeout_s=60, work_dir=tmp_path / "work", rows=("cold", "ruff-silent"),
    )  # fmt: skip
    amp_lint = bench.AmpLint(command=[sys.executable, "-c", "pass"], python=sys.executable)
    benchmark = bench.CorpusBenchmark(bench.Corpus.scan("tiny", corpus_root), amp_lint, None, options, lambda line: None)
    benchmark.scratch.mkdir(parents=True)
    return benchmark


def _appending(log: Path, letter: str):
    return [sys.executable, "-c", f"open({str(log)!r}, 'a').write({letter!r})"]


def test_the_two_commands_alternate_and_each_row_gets_its_median(bench, tmp_path):
    benchmark = _benchmark(bench, tmp_path)
    log = tmp_path / "order.txt"
    cold, ruff = bench.Row("cold", "cold"), bench.Row("ruff-silent", "ruff")
    first, second = benchmark.measure_alternating(cold, _appending(log, "A"), ruff, _appending(log, "B"), 3)
    assert log.read_text() == "ABABAB"
    assert first is not None and second is not None and cold.measured and ruff.measured
    assert ruff.paired_ratio is not None and ruff.paired_ratio > 0
    assert "median of 3" in cold.note and "median of 3" in ruff.note


def test_a_failing_run_stops_both_and_marks_the_row_that_failed(bench, tmp_path):
    benchmark = _benchmark(bench, tmp_path)
    log = tmp_path / "order.txt"
    cold, ruff = bench.Row("cold", "cold"), bench.Row("ruff-silent", "ruff")
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    assert benchmark.measure_alternating(cold, _appending(log, "A"), ruff, failing, 3) == (None, None)
    assert log.read_text() == "A"  # stopped at the first failure
    assert ruff.status == "error" and "exit code 3" in ruff.note and ruff.paired_ratio is None


def test_the_verdict_reads_the_paired_ratio_when_there_is_one(bench, tmp_path):
    benchmark = _benchmark(bench, tmp_path)
    cold = bench.Row("cold", "cold", seconds=1.3, peak_mb=100.0, cpu_seconds=2.0)
    ruff = bench.Row("ruff-silent", "ruff", seconds=2.0, peak_mb=50.0, cpu_seconds=3.0)
    # The medians alone: 1.3 / 2.0 = 0.65x.
    verdict = bench.judge_targets([cold, ruff], benchmark.corpus, None)["ruff-silent"]
    assert verdict.startswith("FAIL") and "0.650x" in verdict
    # The median of the pairs' ratios, when the runs alternated, is what is judged.
    ruff.paired_ratio = 0.58
    verdict = bench.judge_targets([cold, ruff], benchmark.corpus, None)["ruff-silent"]
    assert verdict.startswith("PASS") and "0.580x" in verdict and "alternating" in verdict
