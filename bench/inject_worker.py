"""A warm amp-lint runner for bench/inject.py (runs under the `--amp-lint-python` being measured).

It imports amp-lint once, then for each request (one JSON line on stdin: {"cwd", "args"}) forks a child that
runs the command line interface in-process, exactly as `python -m amp_lint ARGS` would, and answers one JSON
line {"rc", "stdout", "stderr"}. Each check starts from a clean process state (the fork of a process that
only imported amp-lint), so no analysis cache outlives one check: whole-project analysis as the CLI does it,
without paying the interpreter's start and the imports per check.
"""

import json
import os
import sys
import tempfile


def _run(cwd: str, args: list, after: str = "") -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            try:
                os.chdir(cwd)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.argv = ["amp-lint", *args]
                from amp_lint.cli import main

                try:
                    main()
                    code = 0
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                if after:
                    exec(after, {})
            except BaseException as error:  # a crash of amp-lint itself: what the benchmark reports
                import traceback

                traceback.print_exc()
                print(f"crash: {type(error).__name__}: {error}", file=sys.stderr)
                code = 71
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"rc": rc, "stdout": out.read().decode("utf-8", "replace"), "stderr": err.read().decode("utf-8", "replace")}


_WARM_UP = "import torch\n\ndef f(model, opt, x):\n    scaler = torch.amp.GradScaler()\n    for _ in range(2):\n        with torch.autocast('cuda'):\n            loss = model(x)\n        scaler.scale(loss).backward()\n        scaler.step(opt)\n        scaler.update()\n"


def _warm() -> None:
    """Import what a check imports lazily, once, here: a first check runs in a child, which names the
    modules it loaded (only the names: no state of that check reaches this process)."""
    import importlib

    import amp_lint.cli  # noqa: F401

    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "warm.py"), "w") as file:
            file.write(_WARM_UP)
        before = set(sys.modules)
        probe = "import sys; sys.stderr.write(chr(10).join(sorted(sys.modules)))"
        result = _run(folder, ["--no-cache", "--isolated", "--exit-zero", "--output-format", "json", "warm.py"], probe)
    for name in result["stderr"].splitlines():
        if name.startswith(("amp_lint", "libcst", "click", "pathspec")) and name not in before:
            try:
                importlib.import_module(name)
            except Exception:  # an optional module that does not import here: the child imports it itself
                pass


def main() -> None:
    _warm()
    stdout = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        stdout.write(json.dumps(_run(request["cwd"], request["args"])) + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()
