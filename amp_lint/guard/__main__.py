"""``python -m amp_lint.guard [--mode warn|raise|record] [--report PATH] [--grad-reads] SCRIPT [ARGS...]``.

Runs SCRIPT as ``python SCRIPT ARGS`` would (its folder first on ``sys.path``, not the current folder;
``__name__ == "__main__"``; a ``sys.exit("message")`` prints its message), with every GradScaler guarded. At the
end it prints one line per breach to stderr and writes the JSON report to PATH. The report is written at the start
too, marked ``"complete": false``, and again at each new breach: a run killed before its end leaves it so. A script
that leaves with ``os._exit`` still gets its summary and report (``"ending": "os._exit(0)"``). Exit status: the
script's own when it failed; else 1 when the guard saw a breach, 0 when it saw none; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import functools
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

    script = os.path.abspath(options.script)
    # As `python SCRIPT` would: the script's folder first on the path, never the current folder (`python -m` put it
    # there), and before torch is imported, so that a `torch.py` in the current folder is not taken for torch.
    sys.path[0] = os.path.dirname(script)
    from amp_lint.guard import install, uninstall

    report = install(options.mode, grad_reads=options.grad_reads)
    if options.report:
        try:
            report.write_as_it_goes(options.report)
        except OSError as error:
            uninstall()
            parser.exit(2, f"python -m amp_lint.guard: cannot write the report {options.report}: {error.strerror}\n")
    sys.argv = [options.script, *options.args]
    status = 0
    exit_message = None

    def finish(ending: str | None = None) -> None:
        uninstall()
        report.finish(options.report, ending)
        print(report.summary(), file=sys.stderr)

    real_exit = os._exit
    guard_pid = os.getpid()

    @functools.wraps(real_exit)
    def exit_now(code: int) -> None:
        # `os._exit` skips every `finally`: the summary and the report are written here first. A forked worker
        # (a DataLoader's) leaves the same way: only this process's own exit ends the guard.
        if os.getpid() != guard_pid:
            real_exit(code)
        os._exit = real_exit
        try:
            finish(f"os._exit({code})")
            sys.stderr.flush()
        finally:
            real_exit(code or (1 if report.violations else 0))

    os._exit = exit_now
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            status = exc.code or 0
        else:  # `sys.exit("fatal: bad config")`: Python prints the message and exits 1
            status, exit_message = 1, exc.code
    finally:  # a crash of the script still shows its traceback, after the guard's summary
        os._exit = real_exit
        finish()
        if exit_message is not None:
            print(exit_message, file=sys.stderr)
    return status or (1 if report.violations else 0)


if __name__ == "__main__":
    sys.exit(main())
