"""The package is laid out by pipeline stage, and nothing imports upwards.

files -> parse -> analysis -> fixes -> conversion -> rules -> engine -> reports -> (verify, server, cli).
Each stage's `__init__` docstring says what it may import; this test holds the code to it, for imports at
module level and inside functions alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "amp_lint"

# Lower number = lower stage. A module may import its own stage or a lower one.
STAGES = {
    "diagnostics": 0,
    "files": 1,
    "parse": 2,
    "analysis": 3,
    "guard": 3,  # runs the analysis' protocol table (pure data; tests/test_guard.py: no LibCST, no torch)
    "fixes": 4,
    "conversion": 5,
    "rules": 6,
    "engine": 7,
    "reports": 8,
    "verify": 9,
    "server": 10,
    "cli": 11,
    "__main__": 12,
}


def _stage_of(module: str) -> int:
    parts = module.split(".")
    assert parts[0] == "amp_lint"
    if len(parts) == 1:
        return -1  # `import amp_lint` (the version)
    return STAGES[parts[1]]


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        if relative.parts[1:2] == ("verify",) and "scripts" in relative.parts:
            continue  # bundled training scripts, not part of the package's code
        name = ".".join(relative.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        if name == "amp_lint":
            continue
        yield name, path


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("amp_lint"):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("amp_lint"):
            if node.module == "amp_lint":
                for alias in node.names:
                    yield node.lineno, f"amp_lint.{alias.name}" if alias.name in STAGES else "amp_lint"
            else:
                yield node.lineno, node.module


def test_every_top_level_entry_is_a_known_stage():
    for entry in PACKAGE.iterdir():
        if entry.name.startswith(("_", ".")) or entry.name in ("py.typed",):
            continue
        if entry.is_dir() and not any(entry.rglob("*.py")):
            continue  # a folder left behind by a branch switch (only __pycache__)
        assert entry.stem in STAGES, f"{entry.name} is in no pipeline stage; add it to a stage folder"


@pytest.mark.parametrize("name,path", list(_modules()), ids=lambda value: value if isinstance(value, str) else "")
def test_no_upward_imports(name, path):
    own = _stage_of(name)
    upward = [
        f"line {line}: {target}" for line, target in _imports(path) if _stage_of(target) > own
    ]
    assert not upward, f"{name} imports a later stage: {upward}"


def test_stage_packages_say_what_they_may_import():
    for stage in STAGES:
        package = PACKAGE / stage / "__init__.py"
        if package.exists():
            assert "May import" in package.read_text(encoding="utf-8"), f"{stage}/__init__.py lacks its import rule"
