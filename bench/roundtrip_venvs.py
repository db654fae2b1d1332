"""Per-package virtual environments for bench/fix_roundtrip.py's import check (issue 27).

Without a package's dependencies, a changed module fails to import alike fixed and unfixed (numpy, a sibling
library missing), and the check proves nothing. `venv_for(folder)` builds (once, cached under
~/.cache/amp-lint-roundtrip-venvs/<folder>) a venv holding the package at its pinned version and its
dependencies, on top of the torch 2.13 CPU install:

- a base venv (`_base`) gets `pip install torch==2.13.0` (the local wheel);
- each package's venv sees the base's site-packages through a `.pth` file (torch is not copied 26 times) and
  gets `pip install <pkg>==<pin>` under the constraint `torch==2.13.0`, so that a package that needs
  another torch fails to install (and says so) instead of replacing the torch under test.

The outcome is kept in the venv's `amp-lint-status.json`: {"ok": bool, "why": "the pip error's last line"};
a failed build is not retried unless `--rebuild-venvs`. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

HERE = Path(__file__).resolve().parent
VENVS = Path(os.environ.get("AMP_LINT_ROUNDTRIP_VENVS", Path.home() / ".cache" / "amp-lint-roundtrip-venvs"))
TORCH = "torch==2.13.0"


def pins() -> Dict[str, str]:
    """{folder name: "dist==version"} for the packages of ../shared/realworld.sh and the injection corpus."""
    specs = []
    sys.path.insert(0, str(HERE))
    try:
        import inject_corpus

        specs += list(inject_corpus.EXTRA_PACKAGES)
    finally:
        sys.path.remove(str(HERE))
    for script in (HERE.parent.parent / "shared" / "realworld.sh", Path("/work/shared/realworld.sh")):
        if script.is_file():
            block = re.search(r"PACKAGES=\((.*?)\)", script.read_text(encoding="utf-8"), re.S)
            specs += re.findall(r"^\s*([A-Za-z0-9_.-]+==[^\s]+)\s*$", block.group(1), re.M) if block else []
            break
    return {spec.split("==")[0].replace("-", "_"): spec for spec in specs}


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _site_packages(venv: Path) -> Path:
    out = subprocess.run(
        [str(_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )
    return Path(out.stdout.strip())


def _pip(venv: Path, *args: str, log: Path) -> Tuple[bool, str]:
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ pip {' '.join(args)}\n")
        out.flush()
        done = subprocess.run(
            [str(_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", *args],
            stdout=out, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )
    if done.returncode == 0:
        return True, ""
    lines = [l.strip() for l in log.read_text(encoding="utf-8", errors="replace").splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("ERROR") or "error:" in l.lower()]
    return False, " | ".join((errors or lines)[-2:])[:400]


def _make(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)


def base_venv() -> Tuple[Optional[Path], str]:
    base = VENVS / "_base"
    status = base / "amp-lint-status.json"
    if status.is_file():
        record = json.loads(status.read_text(encoding="utf-8"))
        return (base if record["ok"] else None), record["why"]
    base.parent.mkdir(parents=True, exist_ok=True)
    _make(base)
    ok, why = _pip(base, "-q", TORCH, log=base / "amp-lint-pip.log")
    status.write_text(json.dumps({"ok": ok, "why": why}), encoding="utf-8")
    return (base if ok else None), why


def venv_for(folder: str, rebuild: bool = False) -> Tuple[Optional[Path], str]:
    """(the python of `folder`'s venv, "") or (None, why it could not be built). Two builders of one venv
    (two runs at once) take turns: the second finds the first's result."""
    import fcntl

    if folder not in pins():
        return None, f"no pinned version known for {folder}"
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _venv_for(folder, rebuild)


def _venv_for(folder: str, rebuild: bool) -> Tuple[Optional[Path], str]:
    spec = pins().get(folder)
    if spec is None:
        return None, f"no pinned version known for {folder}"
    venv = VENVS / folder
    status = venv / "amp-lint-status.json"
    if status.is_file() and not rebuild:
        record = json.loads(status.read_text(encoding="utf-8"))
        if record.get("spec") == spec:
            return (_python(venv) if record["ok"] else None), record["why"]
    base, why = base_venv()
    if base is None:
        return None, f"the torch base venv could not be built: {why}"
    if venv.exists():
        import shutil

        shutil.rmtree(venv)
    _make(venv)
    (_site_packages(venv) / "_amp_lint_torch_base.pth").write_text(str(_site_packages(base)) + "\n", encoding="utf-8")
    constraint = venv / "amp-lint-constraints.txt"
    constraint.write_text(TORCH + "\n", encoding="utf-8")
    ok, why = _pip(venv, "-q", "-c", str(constraint), spec, log=venv / "amp-lint-pip.log")
    status.write_text(json.dumps({"ok": ok, "why": why, "spec": spec}), encoding="utf-8")
    return (_python(venv) if ok else None), why


if __name__ == "__main__":  # build the venvs named (default: all), print one line each
    names = sys.argv[1:] or sorted(pins())
    for name in names:
        python, reason = venv_for(name)
        print(f"{name}: {'ok ' + str(python) if python else 'not installed: ' + reason}", flush=True)
