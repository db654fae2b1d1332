"""How CI services want a checked file named: from the repository root, or as an absolute `file:` URI.

A run started in a subfolder (`cd pkg_a && amp-lint --output-format github .`) names files relative to that
folder; GitHub places an annotation by its path from the repository root, and SARIF readers resolve a
relative URI against a base they must be told. These helpers name the file so that it is found wherever the
run started.
"""

from __future__ import annotations

import functools
import os
from pathlib import PurePath
from typing import Optional


@functools.lru_cache(maxsize=None)
def _repository_root(folder: str) -> Optional[str]:
    """The closest folder at or above `folder` that holds `.git` (a folder, or a file for a worktree)."""
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def repository_path(path: str) -> str:
    """`path` from the root of its repository (`GITHUB_WORKSPACE` or `CI_PROJECT_DIR` when the file is under it, else
    the closest folder above with `.git`), with `/` separators; as given when it is in none."""
    absolute = os.path.abspath(path)
    # The checkout GitHub Actions or GitLab CI runs in, when the file is under it.
    roots = [os.path.abspath(os.environ[name]) for name in ("GITHUB_WORKSPACE", "CI_PROJECT_DIR") if os.environ.get(name)]
    root = _repository_root(os.path.dirname(absolute))
    if root is not None:
        roots.append(root)
    for root in roots:
        relative = os.path.relpath(absolute, root)
        if not relative.startswith(os.pardir + os.sep) and relative != os.pardir:
            return PurePath(relative).as_posix()
    return PurePath(path).as_posix()


def file_uri(path: str) -> str:
    """The absolute `file:` URI of `path` (percent-encoded)."""
    return PurePath(os.path.abspath(path)).as_uri()


def folder_uri(path: str) -> str:
    """The `file:` URI of a folder, ending with `/` (a base that relative URIs resolve against)."""
    uri = file_uri(path)
    return uri if uri.endswith("/") else uri + "/"
