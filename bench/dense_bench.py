"""Dense training code (`bench/dense_gen.py`) checked beside a bare `libcst.parse_module` of the same file.

    python bench/run.py --dense                  # 1k, 3k and 6k lines, 3 alternating runs each
    python bench/dense_bench.py --lines 3000 --repeat 5

Each measurement is a fresh process (the pair alternates: parse, check, parse, check, ...):
- `parse`: `libcst.parse_module(text)`, the floor of a LibCST analyser;
- `check`: amp-lint's in-process check of the file with the default rules (`engine.runner.check_text`, what one
  worker does with one file: prefilter, parse, model, rules, positions), after its imports and a warm-up check of
  another file (what every run pays once, not per line);
- `cli`: `amp-lint --no-cache --no-respect-gitignore FILE` as a user runs it (the interpreter, the imports and
  the run's set-up included), for reference.

CPU seconds are the process's own (user + system) around the call: the noise of a shared machine moves them far
less than the wall clock. Memory: the peak RSS of the process (`ru_maxrss`) minus its RSS just before the call,
per line of the file. Standard library only in the parent.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from dense_gen import dense_training_file  # noqa: E402

SIZES = (1000, 3000, 6000)

# Run in a fresh interpreter: prints one JSON line {cpu, wall, rss_before_kb, rss_peak_kb, findings}.
_CHILD = r"""
import gc, json, os, resource, sys, time
kind, path = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()

def rss_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

findings = None
if kind == "parse":
    import libcst
    run = lambda: libcst.parse_module(text)
else:
    from amp_lint import rules as registry
    from amp_lint.engine.runner import CheckConfig, check_text
    from amp_lint.engine.warm_up import check_warm_up
    check_warm_up()  # imports every rule and LibCST's parser: paid once per process, not per line
    config = CheckConfig(frozenset(registry.default_codes()), False, False, False, False)
    run = lambda: check_text(text, os.path.basename(path), config, path=None)
gc.collect()
before = rss_kb()
cpu0, wall0 = time.process_time(), time.perf_counter()
result = run()
cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
if kind != "parse":
    findings = [d.code for d in result.diagnostics] + ["error: " + e.message for e in result.errors]
print(json.dumps({"cpu": cpu, "wall": wall, "rss_before_kb": before,
                  "rss_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "findings": findings}))
"""


CODE = [REPO_ROOT]  # whose amp_lint the children import (`--code`)


def _child(kind: str, path: Path, python: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(CODE[0]), os.environ.get("PYTHONPATH")])))
    # Run beside the file, not in the checkout: `python -c` puts its folder first on sys.path, before `--code`.
    done = subprocess.run([python, "-c", _CHILD, kind, str(path)], capture_output=True, text=True, env=env, check=False, cwd=str(path.parent))
    if done.returncode != 0:
        raise RuntimeError(f"{kind} of {path} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cli(path: Path, python: str) -> dict:
    """`amp-lint --no-cache FILE` as its own process: its wall time and findings."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [python, "-m", "amp_lint", "--no-cache", "--no-respect-gitignore", "--output-format", "json", "--exit-zero", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(path.parent),
        env=dict(os.environ, PYTHONPATH=str(CODE[0])),
    )  # fmt: skip
    out, _ = process.communicate()
    wall = time.perf_counter() - started
    try:
        findings = [f["code"] for f in json.loads(out or b"[]")]
    except ValueError:
        findings = ["unreadable output"]
    return {"wall": wall, "findings": findings}


def measure(lines: int, repeat: int, python: str = sys.executable, folder: Path = None, cli: bool = True) -> Dict[str, object]:
    """The medians of `repeat` alternating parse and check runs on a dense file of `lines` lines."""
    with tempfile.TemporaryDirectory(prefix="amp-lint-dense-") as name:
        path = Path(folder or name) / f"dense_{lines}.py"
        path.write_text(dense_training_file(lines), encoding="utf-8")
        parse: List[dict] = []
        check: List[dict] = []
        for _ in range(repeat):
            parse.append(_child("parse", path, python))
            check.append(_child("check", path, python))
        cli_runs = [_cli(path, python) for _ in range(max(1, repeat // 2))] if cli else []
    median = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
    check_cpu, parse_cpu = median(check, "cpu"), median(parse, "cpu")
    check_mem = median([{"m": r["rss_peak_kb"] - r["rss_before_kb"]} for r in check], "m")
    parse_mem = median([{"m": r["rss_peak_kb"] - r["rss_before_kb"]} for r in parse], "m")
    return {
        "lines": lines,
        "check_cpu_s": check_cpu,
        "check_wall_s": median(check, "wall"),
        "parse_cpu_s": parse_cpu,
        "ratio": check_cpu / parse_cpu if parse_cpu else float("nan"),
        "ratios": [c["cpu"] / p["cpu"] for c, p in zip(check, parse)],
        "check_mem_kb_per_line": check_mem / lines,
        "parse_mem_kb_per_line": parse_mem / lines,
        "check_peak_mb": median(check, "rss_peak_kb") / 1024,
        "cpu_ms_per_line": check_cpu * 1000 / lines,
        "findings": check[0]["findings"],
        "cli_wall_s": statistics.median(r["wall"] for r in cli_runs) if cli_runs else None,
        "cli_findings": cli_runs[0]["findings"] if cli_runs else None,
    }


def report(rows: List[Dict[str, object]]) -> str:
    out = [
        "| lines | check CPU | per line | libcst parse CPU | ratio (median; each run) | memory per line (check / parse) | peak RSS | `amp-lint --no-cache FILE` wall | findings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        each = ", ".join(f"{x:.2f}" for x in r["ratios"])
        cli = f"{r['cli_wall_s']:.2f} s" if r["cli_wall_s"] is not None else "-"
        out.append(
            f"| {r['lines']:,} | {r['check_cpu_s']:.2f} s | {r['cpu_ms_per_line']:.2f} ms | {r['parse_cpu_s']:.2f} s | "
            f"**{r['ratio']:.2f}x** ({each}) | {r['check_mem_kb_per_line']:.1f} / {r['parse_mem_kb_per_line']:.1f} KB | "
            f"{r['check_peak_mb']:.0f} MB | {cli} | {' '.join(r['findings']) or 'none'} |"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = (last["check_cpu_s"] / first["check_cpu_s"]) / (last["lines"] / first["lines"])
        out.append("")
        out.append(f"growth: CPU per line at {last['lines']:,} lines is {growth:.2f}x that at {first['lines']:,} (1.00 = linear)")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-cli", action="store_true", help="skip the `amp-lint --no-cache FILE` rows")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="check with this checkout's amp_lint (or an export of one)")
    args = parser.parse_args(argv)
    CODE[0] = args.code.resolve()
    rows = []
    for lines in args.lines:
        rows.append(measure(lines, args.repeat, cli=not args.no_cli))
        print(f"{lines:,} lines: check {rows[-1]['check_cpu_s']:.2f} s CPU, parse {rows[-1]['parse_cpu_s']:.2f} s, ratio {rows[-1]['ratio']:.2f}x", flush=True)
    print(report(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
