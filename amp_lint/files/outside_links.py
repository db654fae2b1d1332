"""Files that a symlink leads out of the checked paths: checked, never written.

A cloned repository may hold `train.py -> ~/.bashrc.py` or a folder link `vendor -> /etc`; a pre-commit fix hook
or a CI autofix run in it would then rewrite a file anywhere the user can write. Black skips such links; amp-lint
checks them (the findings are real) but does not fix them, and says so.

The checked tree is what the command line names, resolved: a folder given, or the folder of a file given (its
folder's real path, so that `src/train.py` under a linked `src` is inside). A file is inside when its real path
is within one of them.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, Sequence, Set

OUTSIDE_LINK = "symlink to a file outside the checked paths"


def links_out_of(paths: Sequence[str], files: Iterable[str]) -> Set[str]:
    """The `files` whose real path is outside every one of the command-line `paths` (as each is named)."""
    roots: Set[str] = set()
    for path in paths:
        absolute = os.path.abspath(path)
        real = os.path.realpath(absolute)
        roots.add(real if os.path.isdir(real) else os.path.realpath(os.path.dirname(absolute)))
    real_folders: Dict[str, str] = {}  # a file's real path from its folder's: one realpath per folder
    outside = set()
    for file in files:
        absolute = os.path.abspath(file)
        folder, name = os.path.split(absolute)
        if folder not in real_folders:
            real_folders[folder] = os.path.realpath(folder)
        real = os.path.realpath(absolute) if os.path.islink(absolute) else os.path.join(real_folders[folder], name)
        if not _within_any(real, roots):
            outside.add(file)
    return outside


def _within_any(path: str, roots: Set[str]) -> bool:
    folder = os.path.dirname(path)
    while True:
        if folder in roots:
            return True
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent
