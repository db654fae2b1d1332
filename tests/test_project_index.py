"""The project index: module names from folders, top-level facts, resolving imports, file dependencies."""

from __future__ import annotations

import os
from pathlib import Path

from amp_lint.analysis.project import ProjectIndex, read_module_facts, source_root_of


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def make_package(tmp_path: Path) -> Path:
    """src/trainer/{__init__,amp,loop}.py: the scaler is built in one module and stepped in another (neosr's shape)."""
    src = tmp_path / "src"
    write(src / "trainer" / "__init__.py", "from .amp import make_scaler\n__all__ = ['make_scaler']\n")
    write(
        src / "trainer" / "amp.py",
        "import torch\n\ndef make_scaler():\n    return torch.amp.GradScaler('cuda')\n\nclass Clipper:\n    pass\n",
    )
    write(
        src / "trainer" / "loop.py",
        "from . import amp as amp_helpers\nfrom .amp import Clipper as C\nfrom trainer import make_scaler\nimport torch\n"
        "\nclass Loop(C):\n    def run(self):\n        pass\n",
    )
    write(tmp_path / "scripts" / "train.py", "import sys\nfrom trainer.loop import Loop\n")
    return src


def test_module_name_and_source_root_come_from_the_package_folders(tmp_path):
    src = make_package(tmp_path)
    assert source_root_of(src / "trainer" / "loop.py") == (src.resolve(), "trainer.loop")
    assert source_root_of(src / "trainer" / "__init__.py") == (src.resolve(), "trainer")
    assert source_root_of(tmp_path / "scripts" / "train.py") == ((tmp_path / "scripts").resolve(), "train")


def test_top_level_facts_include_relative_imports_and_class_bases(tmp_path):
    src = make_package(tmp_path)
    info = ProjectIndex([src]).module_at(src / "trainer" / "loop.py")
    assert info.name == "trainer.loop"
    assert info.imports["amp_helpers"] == "trainer.amp"
    assert info.imports["C"] == "trainer.amp.Clipper"
    assert info.imports["make_scaler"] == "trainer.make_scaler"
    assert info.imports["torch"] == "torch"
    assert info.classes == {"Loop": ("C",)}


def test_relative_import_from_a_package_init_is_relative_to_the_package(tmp_path):
    text = "from .amp import make_scaler\nfrom .. import outside\n"
    info = read_module_facts(text, "trainer", "x", "d", is_package=True)
    assert info.imports == {"make_scaler": "trainer.amp.make_scaler"}  # `..` climbs out of the project: dropped


def test_resolve_follows_re_exports_and_stops_outside_the_project(tmp_path):
    src = make_package(tmp_path)
    index = ProjectIndex([src])
    module, name = index.resolve("trainer.make_scaler")
    assert (module.name, name) == ("trainer.amp", "make_scaler")
    module, name = index.resolve("trainer.amp.Clipper")
    assert (module.name, name) == ("trainer.amp", "Clipper")
    assert index.resolve("torch.amp.GradScaler") is None
    assert index.resolve("trainer.amp.missing") is None


def test_a_file_being_checked_adds_its_source_root(tmp_path):
    src = make_package(tmp_path)
    index = ProjectIndex()
    index.add_file(src / "trainer" / "loop.py")
    assert index.path_of_module("trainer.amp") == str(src.resolve() / "trainer" / "amp.py")


def test_recording_lists_the_modules_read_with_their_digests_and_they_change_with_them(tmp_path):
    from amp_lint.files.cache import dependency_digest

    src = make_package(tmp_path)
    index = ProjectIndex([src])
    amp = src / "trainer" / "amp.py"
    with index.recording() as read:
        assert index.resolve("trainer.make_scaler")[1] == "make_scaler"
    init = str((src / "trainer" / "__init__.py").resolve())
    assert read == {init: dependency_digest(init), str(amp.resolve()): dependency_digest(str(amp))}
    with index.recording() as nothing:
        pass
    assert nothing == {}  # recording is per block: the cached facts are not "read" again outside it
    before = read[str(amp.resolve())]
    amp.write_text(amp.read_text() + "\n# changed\n")
    os.utime(amp, ns=(1, 1))  # a different stamp even on coarse clocks
    with index.recording() as again:
        index.resolve("trainer.make_scaler")
    assert again[str(amp.resolve())] == dependency_digest(str(amp)) != before


def test_unreadable_and_broken_modules_give_no_facts_and_no_error(tmp_path):
    broken = write(tmp_path / "broken.py", "def f(:\n")
    index = ProjectIndex([tmp_path])
    info = index.module_at(broken)
    assert info is not None and not info.functions and not info.imports
    os.mkfifo(tmp_path / "fifo.py")
    assert index.module_at(tmp_path / "fifo.py") is None  # never opened: a FIFO would block
    assert index.module_at(tmp_path / "missing.py") is None


def test_from_an_installation_folder_only_the_checked_package_is_project_code(tmp_path):
    site = tmp_path / "lib" / "site-packages"
    write(site / "torch" / "__init__.py", "from .helpers import clip\n")
    write(site / "torch" / "helpers.py", "def clip(model):\n    pass\n")
    write(site / "numpy" / "__init__.py", "def array(x):\n    return x\n")
    index = ProjectIndex()
    index.add_file(site / "torch" / "helpers.py")
    assert index.path_of_module("torch.helpers") == str((site / "torch" / "helpers.py").resolve())
    assert index.path_of_module("numpy") is None  # another installed package: not the project's code
    index.add_file(site / "numpy" / "__init__.py")  # checking numpy too makes it project code
    assert index.path_of_module("numpy") == str((site / "numpy" / "__init__.py").resolve())
