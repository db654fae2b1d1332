"""Run `amp-lint --fix` twice over copies of real packages, with and without `--unsafe-fixes`, and check
that nothing broke.

For each corpus folder and each mode: copy its Python files to a temporary folder, fix them, then check
that every changed file still parses (LibCST and Python's `ast`, when Python can read it), and that a
second `--fix` changes no byte. The fixes that the check before writing dropped are counted and listed,
each with its reason (the run's "not fixed: ..." lines). Prints a Markdown table, one row per corpus and
mode, then the dropped fixes and any failure; exits 1 when a file does not parse, a second --fix changed
something, or amp-lint failed otherwise.

usage: python bench/fix_roundtrip.py [--select CODES] [--modes safe,unsafe] [--amp-lint CMD] FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

MODES = {"safe": ["--fix"], "unsafe": ["--fix", "--unsafe-fixes"]}


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


def copy_python_files(folder: Path, target: Path) -> None:
    """The folder's .py files (a package such as torch also holds large binaries, which amp-lint never reads)."""

    def ignore(directory: str, names: list) -> list:
        return [n for n in names if n == "__pycache__" or (not n.endswith(".py") and not os.path.isdir(os.path.join(directory, n)))]

    shutil.copytree(folder, target, symlinks=True, ignore=ignore)


def run(command: list, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command + [str(folder)], capture_output=True, text=True)


def fixed_count(output: str) -> int:
    match = re.search(r"Fixed (\d+) error", output)
    return int(match.group(1)) if match else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--select", default="", help="rules to fix (default: the default set)")
    parser.add_argument("--modes", default="safe,unsafe")
    parser.add_argument("--amp-lint", default=f"{sys.executable} -m amp_lint")
    args = parser.parse_args()
    base = shlex.split(args.amp_lint) + [
        "check", "--isolated", "--no-cache", "--no-respect-gitignore", "--exit-zero", "--output-format", "concise",
    ] + (["--select", args.select] if args.select else [])
    failed = False
    rows, dropped_lines, problems = [], [], []
    totals = {}
    for folder in args.folders:
        for mode in args.modes.split(","):
            command = base + MODES[mode]
            with tempfile.TemporaryDirectory(prefix="amp-lint-roundtrip-") as temporary:
                copy = Path(temporary) / folder.name
                copy_python_files(folder, copy)
                before = digests(copy)
                start = time.perf_counter()
                first = run(command, copy)
                seconds = time.perf_counter() - start
                after = digests(copy)
                changed = [p for p in after if before.get(p) != after[p]]
                broken = [(p, why) for p in changed if (why := parses(p))]
                second = run(command, copy)
                again = digests(copy)
                unstable = [p for p in again if again[p] != after.get(p)]
                output = first.stdout + first.stderr
                dropped = [line for line in output.splitlines() if "error: not fixed:" in line]
                errors = [
                    line for line in (output + second.stdout + second.stderr).splitlines()
                    if ": error: " in line and "not fixed:" not in line
                ]
                # Exit 2 with only "not fixed" errors is a run that did its job: it said which fixes it dropped.
                exit_ok = all(c.returncode in (0, 1) or (c.returncode == 2 and not errors) for c in (first, second))
                ok = not broken and not unstable and exit_ok
                failed |= not ok
                row = (folder.name, mode, len(before), len(changed), fixed_count(output), len(dropped), len(broken), len(unstable), seconds)
                rows.append(row)
                for key, value in zip(("files", "changed", "fixes", "dropped", "broken", "unstable"), row[2:8]):
                    totals[(mode, key)] = totals.get((mode, key), 0) + value
                dropped_lines += [f"{folder.name} ({mode}): {line.replace(str(copy) + '/', '')}" for line in dropped]
                problems += [f"{folder.name} ({mode}): does not parse: {p.relative_to(copy)}: {why}" for p, why in broken]
                problems += [f"{folder.name} ({mode}): changed by a second --fix: {p.relative_to(copy)}" for p in unstable]
                problems += [f"{folder.name} ({mode}): {line.replace(str(copy) + '/', '')}" for line in errors[:10]]
                if not exit_ok:
                    problems.append(f"{folder.name} ({mode}): exit codes {first.returncode}/{second.returncode}")
    print("| corpus | mode | .py files | files fixed | fixes applied | fixes dropped by the check | do not parse | changed by a 2nd --fix | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, mode, files, changed, fixes, dropped, broken, unstable, seconds in rows:
        print(f"| {name} | {mode} | {files} | {changed} | {fixes} | {dropped} | {broken} | {unstable} | {seconds:.1f} |")
    for mode in args.modes.split(","):
        t = lambda key: totals.get((mode, key), 0)  # noqa: E731
        print(f"| **all** | {mode} | {t('files')} | {t('changed')} | {t('fixes')} | {t('dropped')} | {t('broken')} | {t('unstable')} | |")
    if dropped_lines:
        print("\nFixes dropped by the check before writing:")
        for line in dropped_lines:
            print(f"- {line}")
    if problems:
        print("\nProblems:")
        for line in problems:
            print(f"- {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
