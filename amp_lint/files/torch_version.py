"""The oldest torch a project supports: the `target-torch` setting, or the lower bound of the project's own
torch requirement, as Ruff reads `requires-python` for its `target-version`.

The requirement is read from `[project].dependencies` of the `pyproject.toml` in the project's root folder, then
from its `requirements*.txt` files, whatever marks that root (see `project_root_above`). `torch>=2.1`, `torch>=2.1,<3`, `torch~=2.2`, `torch==2.3.*` give 2.1, 2.1, 2.2
and 2.3; `torch>2.0` gives 2.0 (2.0.1 is allowed); a requirement without a lower bound gives none.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Iterable, Optional, Tuple


Version = Tuple[int, int, int]

_VERSION = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_TORCH_REQUIREMENT = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*(?P<specifiers>[^;#]*)", re.I)
_SPECIFIER = re.compile(r"(===|==|~=|>=|>|<=|<|!=)\s*([0-9][0-9a-zA-Z.*+!-]*)")
# Bigger than any requirement file a project writes by hand; a larger one is not read.
_MAX_REQUIREMENTS_BYTES = 1 << 20


def parse_version(text: str) -> Optional[Version]:
    """`"2.3"` -> (2, 3, 0); `"2.4.1+cu121"` -> (2, 4, 1); anything else -> None."""
    match = _VERSION.match(text)
    if match is None:
        return None
    major, minor, micro = (int(part) if part else 0 for part in match.groups())
    return (major, minor, micro)


def is_version(text: str) -> bool:
    """Is `text` a plain release number (`2`, `2.3`, `2.3.1`), as `target-torch` accepts?"""
    return re.fullmatch(r"\d+(\.\d+){0,2}", text) is not None


def format_version(version: Version) -> str:
    major, minor, micro = version
    return f"{major}.{minor}" + (f".{micro}" if micro else "")


def supports(target: Optional[str], needed: str) -> bool:
    """Does every torch from `target` on have an API new in `needed`? No target: the latest torch, yes."""
    if not target:
        return True
    have, want = parse_version(target), parse_version(needed)
    return have is None or want is None or have >= want


@functools.lru_cache(maxsize=16)
def _requirement_pattern(package: str) -> "re.Pattern":
    """A requirement line of `package`, its name spelled any way PEP 503 allows (`-`, `_`, `.`, any case)."""
    if package == "torch":
        return _TORCH_REQUIREMENT
    name = r"[-_.]+".join(re.escape(part) for part in re.split(r"[-_.]+", package))
    return re.compile(rf"^\s*{name}\s*(?:\[[^\]]*\])?\s*(?P<specifiers>[^;#]*)", re.I)


def lower_bound(requirement: str, package: str = "torch") -> Optional[Version]:
    """The lowest release of `package` a requirement line (`torch>=2.1,<3`) admits, or None for other lines."""
    match = _requirement_pattern(package).match(requirement)
    if match is None:
        return None
    rest = match.group("specifiers")
    if rest.strip().startswith(("-", "_", ".")) or re.match(r"^\s*[A-Za-z0-9]", rest):
        return None  # `torchvision`, `torch-geometric`: another package
    bounds = []
    for operator, version_text in _SPECIFIER.findall(rest):
        if operator in ("<", "<=", "!="):
            continue
        version = parse_version(version_text.rstrip(".*"))
        if version is not None:
            bounds.append(version)
    return max(bounds) if bounds else None


def floor_from_lines(lines: Iterable[str], package: str = "torch") -> Optional[Version]:
    """The lower bound of the first requirement of `package` with one, over requirement lines."""
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        bound = lower_bound(line, package)
        if bound is not None:
            return bound
    return None


# The other packages whose own deprecations the rules know (AMP095), read from the same requirements.
FRAMEWORK_PACKAGES = ("transformer-engine", "accelerate")


def project_package_floors(folder: str) -> Tuple[Tuple[str, str], ...]:
    """((package, "2.9"), ...) for the FRAMEWORK_PACKAGES the project in `folder` requires with a lower bound."""
    found = []
    for package in FRAMEWORK_PACKAGES:
        floor = project_floor(folder, package)
        if floor is not None:
            found.append((package, floor[0]))
    return tuple(found)


def toml_parser():
    """The TOML parser (`tomllib`), imported when a TOML file is read: a run that finds none never imports it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python < 3.11
        import tomli as tomllib
    return tomllib


@functools.lru_cache(maxsize=8)
def read_only_toml(text: str) -> dict:
    """`tomllib.loads(text)`, parsed once per run for the readers that only look (a project's pyproject.toml
    is asked whether it has an amp-lint table and what torch it requires); never to be changed in place."""
    return toml_parser().loads(text)


@functools.lru_cache(maxsize=256)
def project_floor(folder: str, package: str = "torch") -> Optional[Tuple[str, str]]:
    """(`"2.1"`, where it came from) for the project in `folder`, or None when it states no floor of `package`."""
    pyproject = os.path.join(folder, "pyproject.toml")
    if os.path.isfile(pyproject):
        tomllib = toml_parser()
        try:
            with open(pyproject, "rb") as handle:
                data = read_only_toml(handle.read(_MAX_REQUIREMENTS_BYTES).decode("utf-8-sig", errors="replace"))
        except (OSError, tomllib.TOMLDecodeError, RecursionError):
            data = {}
        project = data.get("project") if isinstance(data, dict) else None
        dependencies = project.get("dependencies") if isinstance(project, dict) else None
        if isinstance(dependencies, list):
            floor = floor_from_lines((d for d in dependencies if isinstance(d, str)), package)
            if floor is not None:
                return format_version(floor), f"{pyproject} [project].dependencies"
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("requirements") and n.endswith(".txt"))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as handle:
                text = handle.read(_MAX_REQUIREMENTS_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        floor = floor_from_lines(text.splitlines(), package)
        if floor is not None:
            return format_version(floor), path
    return None


# Folders a walk found unchanged since a listing that held no configuration file and no pyproject.toml
# (`amp_lint.files.config.note_no_config_files`): asked of their parents without a `stat`.
WITHOUT_CONFIG: set = set()

# What marks a project's root besides a pyproject.toml: most research repositories have no pyproject.toml
# and state their torch in a requirements.txt beside a setup.py or a .git (issue 44).
ROOT_MARKERS = frozenset({"pyproject.toml", "setup.py", "setup.cfg", "environment.yml", "environment.yaml", ".git"})


def _marks_project_root(folder: str) -> bool:
    if folder not in WITHOUT_CONFIG and os.path.isfile(os.path.join(folder, "pyproject.toml")):
        return True
    try:
        entries = os.listdir(folder)
    except OSError:
        return False
    return any(name in ROOT_MARKERS or _is_requirements_file(name) for name in entries if name != "pyproject.toml")


def _is_requirements_file(name: str) -> bool:
    return name.startswith("requirements") and name.endswith(".txt")


@functools.lru_cache(maxsize=4096)
def _closest_marked_folder(folder: str) -> Optional[str]:
    if _marks_project_root(folder):
        return folder
    parent = os.path.dirname(folder)
    return None if parent == folder else _closest_marked_folder(parent)


@functools.lru_cache(maxsize=4096)
def project_root_above(folder: str) -> Optional[str]:
    """The root of the project holding `folder`, whose requirements give `target-torch`, or None.

    The closest folder at or above `folder` marked as a project's root (a `pyproject.toml`, `setup.py`,
    `setup.cfg`, `requirements*.txt`, `environment.yml` or `.git`); where it states no torch requirement and is not
    the repository's root (`.git`), the next one above (a `docs/requirements.txt` is not the project's). Cached
    per folder, so that the folders of one tree share their parents' answers."""
    marked = _closest_marked_folder(folder)
    while marked is not None and project_floor(marked) is None and not os.path.exists(os.path.join(marked, ".git")):
        parent = os.path.dirname(marked)
        above = None if parent == marked else _closest_marked_folder(parent)
        if above is None:
            break
        marked = above
    return marked


def forget_project_roots() -> None:
    """Read the project roots again (`--watch`, or a test that changes the tree)."""
    WITHOUT_CONFIG.clear()
    _closest_marked_folder.cache_clear()
    project_root_above.cache_clear()
    project_floor.cache_clear()
