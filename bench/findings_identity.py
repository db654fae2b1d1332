#!/usr/bin/env python3
"""Are the findings (fixes included) the same as before a change? Saves them once, compares every run after.

    python bench/findings_identity.py save bench/.work/findings-before      # before the change
    python bench/findings_identity.py compare bench/.work/findings-before   # after it: exit 1 on any difference

For every corpus folder (each package of the real-world corpus, `~/.cache/amp-lint-realworld/src/*`, which
`/work/shared/realworld.sh` downloads; each package of the injection corpus, `~/.cache/amp-lint-extra/src/*`,
which `bench/inject_corpus.py`'s `ensure()` downloads; and the repository's `fixtures/`), and for each rule
selection (`default`: the default rules; `all`: `--select ALL --preview`), it runs

    amp-lint --output-format json --exit-zero --no-cache --no-respect-gitignore [selection] FOLDER

(`AMP_LINT`: the command, default `python -m amp_lint` of this interpreter) and keeps the JSON, with the paths
made relative to the folder and the list sorted. Every field of a finding is compared: code, message, place,
end, the fix with its edits. `compare` prints, per folder and selection, what was only before, only after, or
changed, and exits 1 when anything differs (0 when all is the same).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

REPO_ROOT = Path(__file__).resolve().parent.parent
REALWORLD = Path(os.environ.get("REALWORLD_DIR", Path.home() / ".cache" / "amp-lint-realworld")) / "src"
EXTRA = Path(os.environ.get("AMP_LINT_EXTRA_DIR", Path.home() / ".cache" / "amp-lint-extra")) / "src"
SELECTIONS = {"default": [], "all": ["--select", "ALL", "--preview"]}


def folders() -> Dict[str, Path]:
    """{label: folder} of every corpus that is there."""
    out: Dict[str, Path] = {}
    for corpus, root in (("realworld", REALWORLD), ("inject", EXTRA)):
        if root.is_dir():
            for folder in sorted(root.iterdir()):
                if folder.is_dir():
                    out[f"{corpus}/{folder.name}"] = folder
    try:  # the installed torch package, as realworld.sh checks it
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            out["realworld/torch"] = Path(spec.origin).parent
    except ImportError:
        pass
    out["fixtures"] = REPO_ROOT / "fixtures"
    return out


def command() -> List[str]:
    return shlex.split(os.environ["AMP_LINT"]) if os.environ.get("AMP_LINT") else [sys.executable, "-m", "amp_lint"]


CODE = [REPO_ROOT]  # where `python -m amp_lint` imports amp_lint from (`--code`)


def findings_of(folder: Path, selection: List[str], jobs: int) -> Tuple[List[dict], str]:
    """The sorted findings of a run over `folder` (paths relative to it), and its stderr's tail."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(CODE[0]), os.environ.get("PYTHONPATH")])))
    argv = command() + ["--output-format", "json", "--exit-zero", "--no-cache", "--no-respect-gitignore"]
    argv += ["--jobs", str(jobs)] if jobs else []
    done = subprocess.run(argv + selection + ["."], cwd=str(folder), capture_output=True, text=True, env=env, check=False)
    try:
        found = json.loads(done.stdout or "[]")
    except ValueError:
        found = [{"unreadable output": done.stdout[-2000:], "returncode": done.returncode}]
    found.sort(key=lambda f: json.dumps(f, sort_keys=True))
    return found, "\n".join(done.stderr.strip().splitlines()[-5:])


def _key(finding: dict) -> tuple:
    return (finding.get("filename"), json.dumps(finding.get("location")), finding.get("code"))


def save(directory: Path, jobs: int, only: List[str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for label, folder in folders().items():
        if only and label not in only:
            continue
        for name, selection in SELECTIONS.items():
            found, stderr = findings_of(folder, selection, jobs)
            target = directory / f"{label.replace('/', '__')}.{name}.json"
            target.write_text(json.dumps({"findings": found, "stderr": stderr}, indent=0, sort_keys=True) + "\n")
            print(f"{label:40s} {name:8s} {len(found):6d} findings", flush=True)
    return 0


def compare(directory: Path, jobs: int, only: List[str]) -> int:
    differing = 0
    for label, folder in folders().items():
        if only and label not in only:
            continue
        for name, selection in SELECTIONS.items():
            saved = directory / f"{label.replace('/', '__')}.{name}.json"
            if not saved.is_file():
                print(f"{label:40s} {name:8s} no saved findings, skipped")
                continue
            before = json.loads(saved.read_text())["findings"]
            after, stderr = findings_of(folder, selection, jobs)
            if before == after:
                print(f"{label:40s} {name:8s} {len(after):6d} findings, identical", flush=True)
                continue
            differing += 1
            old = {_key(f): f for f in before}
            new = {_key(f): f for f in after}
            print(f"{label:40s} {name:8s} DIFFERENT: {len(before)} before, {len(after)} after", flush=True)
            for key in sorted(set(old) | set(new), key=str):
                if old.get(key) != new.get(key):
                    print(f"    before: {json.dumps(old.get(key), sort_keys=True)[:600]}")
                    print(f"    after:  {json.dumps(new.get(key), sort_keys=True)[:600]}")
            if stderr:
                print(f"    stderr: {stderr}")
    print("all identical" if not differing else f"{differing} runs differ")
    return 1 if differing else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--jobs", type=int, default=0, help="amp-lint's --jobs (0: its default)")
    parser.add_argument("--only", nargs="*", default=[], help="labels to run (realworld/monai, inject/timm, fixtures)")
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="a checkout (or an export of one) whose amp_lint to run")
    args = parser.parse_args(argv)
    CODE[0] = args.code.resolve()
    return (save if args.action == "save" else compare)(args.directory, args.jobs, args.only)


if __name__ == "__main__":
    sys.exit(main())
