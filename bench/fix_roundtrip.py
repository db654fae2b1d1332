"""Run `amp-lint --fix` twice over copies of real packages, with and without `--unsafe-fixes`, and check
that nothing broke.

For each corpus folder and each mode: copy its Python files to a temporary folder, fix them, then check
that every changed file still parses (LibCST and Python's `ast`, when Python can read it), and that a
second `--fix` changes no byte, and that every changed file still runs its own import: the fixed module is
imported in a fresh process with the copy's package root on sys.path, and so is the same module of an
unfixed copy; the two outcomes must agree (both import, or both fail with the same error: a third-party
dependency missing here is not the fix's doing). The fixes that the check before writing dropped are counted
and listed, each with its reason (the run's "not fixed: ..." lines). Prints a Markdown table, one row per
corpus and mode, then the dropped fixes and any failure; exits 1 when a file does not parse, does not import
as its unfixed self does, a second --fix changed something, or amp-lint failed otherwise.

usage: python bench/fix_roundtrip.py [--select CODES] [--modes safe,unsafe] [--amp-lint CMD] [--no-import] [--venvs]
                                     FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roundtrip_venvs  # noqa: E402

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


def package_root(copy: Path) -> Path:
    """Where the copy's modules import from: the copy itself (an unpacked wheel holds its packages), or its
    parent when the copy is a package (torch's own folder)."""
    return copy.parent if (copy / "__init__.py").is_file() else copy


def module_name(path: Path, root: Path) -> str:
    """`pkg/sub/mod.py` -> `pkg.sub.mod` (`__init__.py`: the package); "" when a part is not a name."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else ""


# Imports each module named on stdin (one a line) in a child forked from a process that imported torch
# once (when it can), with the root on sys.path; prints one line per module: "ok" or the error's type and
# first line, the root's path left out so that two copies compare.
_IMPORTER = r"""
import importlib, json, os, signal, sys, traceback
root = sys.argv[1]
sys.path.insert(0, root)
sys.dont_write_bytecode = True
try:
    import torch  # noqa: F401  (shared by every child: the fork keeps it)
except Exception:
    pass
for name in sys.stdin.read().split():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        signal.alarm(120)
        try:
            importlib.import_module(name)
            outcome = "ok"
        except BaseException as error:
            text = (str(error).splitlines() or [""])[0].replace(root + os.sep, "").replace(root, "")
            outcome = type(error).__name__ + ": " + text[:200]
        os.write(write, outcome.encode("utf-8", "replace"))
        os._exit(0)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    outcome = b"".join(chunks).decode("utf-8", "replace") or "died: status %d" % status
    print(json.dumps([name, outcome]), flush=True)
"""


def import_outcomes(root: Path, modules: list, python: str = sys.executable) -> dict:
    """{module: "ok" or "ErrorType: message"}, each imported in its own fresh child process of `python`."""
    if not modules:
        return {}
    with tempfile.TemporaryDirectory(prefix="amp-lint-import-") as cwd:  # what an import writes lands here
        done = subprocess.run(
            [python, "-c", _IMPORTER, str(root)], input="\n".join(modules), capture_output=True, text=True,
            cwd=cwd, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONWARNINGS": "ignore"},
        )
    out = {}
    for line in done.stdout.splitlines():
        try:
            name, outcome = json.loads(line)
        except ValueError:
            continue
        out[name] = outcome
    return {m: out.get(m, f"importer failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}") for m in modules}


def import_check(changed: list, fixed_copy: Path, unfixed_copy: Path, python: str = sys.executable) -> tuple:
    """(imported in both, failed the same way in both, [(file, fixed outcome, unfixed outcome)] that differ,
    files that are not importable modules)."""
    fixed_root, unfixed_root = package_root(fixed_copy), package_root(unfixed_copy)
    names = {p: module_name(p, fixed_root) for p in changed}
    modules = sorted({n for n in names.values() if n})
    fixed, unfixed = import_outcomes(fixed_root, modules, python), import_outcomes(unfixed_root, modules, python)
    differ = [(p, fixed[n], unfixed[n]) for p, n in sorted(names.items()) if n and fixed[n] != unfixed[n]]
    same_ok = sum(1 for n in modules if fixed[n] == unfixed[n] == "ok")
    same_failed = sum(1 for n in modules if fixed[n] == unfixed[n] != "ok")
    return same_ok, same_failed, differ, sum(1 for n in names.values() if not n)


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
    parser.add_argument("--no-import", action="store_true", help="skip the import check of the changed files")
    parser.add_argument(
        "--venvs", action="store_true",
        help="import in a per-package venv holding the package's pinned version and its dependencies "
        "(built once under ~/.cache/amp-lint-roundtrip-venvs; see bench/roundtrip_venvs.py)",
    )
    parser.add_argument("--rebuild-venvs", action="store_true", help="with --venvs: rebuild even a cached venv")
    args = parser.parse_args()
    base = shlex.split(args.amp_lint) + [
        "check", "--isolated", "--no-cache", "--no-respect-gitignore", "--exit-zero", "--output-format", "concise",
    ] + (["--select", args.select] if args.select else [])
    failed = False
    rows, dropped_lines, problems = [], [], []
    # Each row as soon as its corpus is done (a long run shows what it has).
    print(
        "| corpus | mode | .py files | files fixed | fixes applied | fixes dropped by the check | do not parse "
        "| import (both ok) | import (both fail alike) | import differs | changed by a 2nd --fix | seconds |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    totals = {}
    interpreters, not_installed = {}, []

    def interpreter(folder: Path) -> str:
        """This interpreter, or with --venvs the package's own venv (built when a file first changes)."""
        if folder not in interpreters:
            interpreters[folder] = sys.executable
            if args.venvs:
                python, why = roundtrip_venvs.venv_for(folder.name, rebuild=args.rebuild_venvs)
                if python is None:
                    not_installed.append(f"{folder.name}: {why}")
                else:
                    interpreters[folder] = str(python)
        return interpreters[folder]

    for folder in args.folders:
        for mode in args.modes.split(","):
            command = base + MODES[mode]
            with tempfile.TemporaryDirectory(prefix="amp-lint-roundtrip-") as temporary:
                copy = Path(temporary) / folder.name
                copy_python_files(folder, copy)
                unfixed = Path(temporary) / "unfixed" / folder.name
                copy_python_files(folder, unfixed)
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
                imported = (0, 0, [], 0) if args.no_import else import_check(changed, copy, unfixed, interpreter(folder) if changed else sys.executable)
                output = first.stdout + first.stderr
                dropped = [line for line in output.splitlines() if "error: not fixed:" in line]
                errors = [
                    line for line in (output + second.stdout + second.stderr).splitlines()
                    if ": error: " in line and "not fixed:" not in line
                ]
                # Exit 2 with only "not fixed" errors is a run that did its job: it said which fixes it dropped.
                exit_ok = all(c.returncode in (0, 1) or (c.returncode == 2 and not errors) for c in (first, second))
                ok = not broken and not unstable and exit_ok and not imported[2]
                failed |= not ok
                row = (
                    folder.name, mode, len(before), len(changed), fixed_count(output), len(dropped), len(broken),
                    imported[0], imported[1], len(imported[2]), len(unstable), seconds,
                )
                rows.append(row)
                name_, mode_, *numbers, seconds_ = row
                where = " (own venv)" if changed and not args.no_import and interpreter(folder) != sys.executable else ""
                print(f"| {name_}{where} | {mode_} | " + " | ".join(str(n) for n in numbers) + f" | {seconds_:.1f} |", flush=True)
                keys = ("files", "changed", "fixes", "dropped", "broken", "import_ok", "import_same", "import_differs", "unstable")
                for key, value in zip(keys, row[2:11]):
                    totals[(mode, key)] = totals.get((mode, key), 0) + value
                dropped_lines += [f"{folder.name} ({mode}): {line.replace(str(copy) + '/', '')}" for line in dropped]
                problems += [f"{folder.name} ({mode}): does not parse: {p.relative_to(copy)}: {why}" for p, why in broken]
                problems += [f"{folder.name} ({mode}): changed by a second --fix: {p.relative_to(copy)}" for p in unstable]
                problems += [
                    f"{folder.name} ({mode}): imports differently once fixed: {p.relative_to(copy)}: fixed `{a}`, unfixed `{b}`"
                    for p, a, b in imported[2]
                ]
                problems += [f"{folder.name} ({mode}): {line.replace(str(copy) + '/', '')}" for line in errors[:10]]
                if not exit_ok:
                    problems.append(f"{folder.name} ({mode}): exit codes {first.returncode}/{second.returncode}")
    for mode in args.modes.split(","):
        t = lambda key: totals.get((mode, key), 0)  # noqa: E731
        cells = " | ".join(str(t(k)) for k in ("files", "changed", "fixes", "dropped", "broken", "import_ok", "import_same", "import_differs", "unstable"))
        print(f"| **all** | {mode} | {cells} | |")
    if not_installed:
        print("\nPackages whose venv could not be built (their imports ran under this interpreter):")
        for line in not_installed:
            print(f"- {line}")
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
