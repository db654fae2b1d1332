"""Write a small package into a folder and check one of its files with the CLI, as a user would: the tests of
whole-package analysis (a scaler followed through other modules, calls into other modules, callers)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Sequence, Tuple


def write_package(folder: Path, files: Dict[str, str], name: str = "pkg") -> List[str]:
    """`folder/name/` with an empty `__init__.py` and `files` (dedented); their paths, `__init__.py` first."""
    package = folder / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    paths = [str(package / "__init__.py")]
    for relative, text in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths.append(str(path))
    return paths


def check_in_package(folder: Path, target: str, select: str, extra: Sequence[str] = ("--no-cache",)) -> List[Tuple[str, int]]:
    """(code, row) of each finding of `select` in `target` (a path below `folder`), no traceback allowed."""
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", *extra, "--isolated", "--select", select, "--output-format", "json", target],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return [(f["code"], f["location"]["row"]) for f in json.loads(result.stdout)]
