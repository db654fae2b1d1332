"""``python -m amp_lint.guard [--mode warn|raise|record] [--report PATH] [--grad-reads] SCRIPT [ARGS...]``.

Runs SCRIPT as ``python SCRIPT ARGS`` would (its folder first on ``sys.path``, ``__name__ == "__main__"``), with
every GradScaler guarded. At the end it prints one line per breach to stderr and writes the JSON report to PATH.
Exit status: the script's own when it failed; else 1 when the guard saw a breach, 0 when it saw none; 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from amp_lint.guard.report import MODES, WARN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m amp_lint.guard",
        description="Run a training script with amp-lint's runtime guard of the GradScaler / autocast protocol.",
    )
    parser.add_argument("--mode", choices=MODES, default=WARN, help="what a breach does (default: warn)")
    parser.add_argument("--report", metavar="PATH", help="write the breaches to PATH (JSON)")
    parser.add_argument("--grad-reads", action="store_true", help="also check .grad reads of the script (slower)")
    parser.add_argument("script", help="the training script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(options.script):
        parser.exit(2, f"python -m amp_lint.guard: no such script: {options.script}\n")

    from amp_lint.guard import install, uninstall

    report = install(options.mode, grad_reads=options.grad_reads)
    script = os.path.abspath(options.script)
    sys.argv = [options.script, *options.args]
    sys.path[0] = os.path.dirname(script)
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:  # a crash of the script still shows its traceback, after the guard's summary
        uninstall()
        print(report.summary(), file=sys.stderr)
        if options.report:
            report.write(options.report)
    return status or (1 if report.violations else 0)


if __name__ == "__main__":
    sys.exit(main())
