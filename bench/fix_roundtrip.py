"""Run `amp-lint --fix --unsafe-fixes` twice over copies of real packages and check nothing broke.

For each corpus folder: copy it to a temporary folder, fix it, then check that every changed file still
parses (LibCST and Python's `ast`, when Python can read it), and that a second `--fix` changes no byte.
Prints one line per corpus with the counts; exits 1 when any check failed.

usage: python bench/fix_roundtrip.py [--select CODES] [--amp-lint CMD] FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def digests(root: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*.py") if p.is_file()}


def parses(path: Path) -> str:
    import libcst

    text = path.read_bytes()
    try:
        libcst.parse_module(text)
    except Exception as error:  # noqa: BLE001 - any failure is the finding
        return f"libcst: {type(error).__name__}: {str(error).splitlines()[0]}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError:
        pass  # newer syntax than this Python reads; LibCST's verdict stands
    return ""


def run(command: list, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command + [str(folder)], capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--select", default="ALL")
    parser.add_argument("--amp-lint", default=f"{sys.executable} -m amp_lint")
    args = parser.parse_args()
    base = shlex.split(args.amp_lint) + [
        "check", "--isolated", "--no-cache", "--no-respect-gitignore", "--fix", "--unsafe-fixes",
        "--select", args.select, "--exit-zero", "--output-format", "concise",
    ]
    failed = False
    for folder in args.folders:
        with tempfile.TemporaryDirectory(prefix="amp-lint-roundtrip-") as temporary:
            copy = Path(temporary) / folder.name
            shutil.copytree(folder, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            before = digests(copy)
            start = time.perf_counter()
            first = run(base, copy)
            seconds = time.perf_counter() - start
            after = digests(copy)
            changed = [p for p in after if before.get(p) != after[p]]
            broken = [(p, why) for p in changed if (why := parses(p))]
            second = run(base, copy)
            again = digests(copy)
            unstable = [p for p in again if again[p] != after.get(p)]
            errors = [line for line in (first.stderr + second.stderr).splitlines() if "error" in line.lower()]
            ok = not broken and not unstable and first.returncode in (0, 1) and second.returncode in (0, 1)
            failed |= not ok
            print(
                f"{folder.name}: {len(before)} files, {len(changed)} fixed in {seconds:.1f}s, "
                f"{len(broken)} do not parse, {len(unstable)} changed by a second --fix, "
                f"exit codes {first.returncode}/{second.returncode}, {len(errors)} error lines"
            )
            for path, why in broken:
                print(f"    does not parse: {path.relative_to(copy)}: {why}")
            for path in unstable:
                print(f"    not idempotent: {path.relative_to(copy)}")
            for line in errors[:10]:
                print(f"    {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
