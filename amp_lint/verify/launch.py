"""How the bootstrap runs a training script: as ``python ORIGINAL args`` would, from ORIGINAL's folder, with the
code of PATH (the AMP version) and the converted local modules in place of the originals; and the seeding of each
run (seed 0: the script as written; seed k offsets the script's own seeds by k). See
:mod:`amp_lint.verify.bootstrap`."""

from __future__ import annotations

import builtins
import functools
import importlib.abc
import importlib.util
import linecache
import os
import random
import sys
import types
from pathlib import Path
from typing import Any

#: Both runs of a script start from this seed (the scripts usually seed themselves as well).
SEED = 0


def script_site(depth: int = 2) -> dict[str, Any] | None:
    # Where the script (or a module of its folder) made the call being recorded: file, line and code, the line's
    # source as it ran (the converted line, for a converted script). None when no such frame is found.
    frame: Any = sys._getframe(depth)
    root = os.getcwd()  # the script's folder, while it runs
    torch = sys.modules.get("torch")
    torch_dir = os.path.dirname(torch.__file__) if torch is not None and torch.__file__ else "<no torch>"
    while frame is not None:
        filename = frame.f_code.co_filename
        own = filename.startswith(_PACKAGE_DIR) and not filename.startswith(_BUNDLED_SCRIPTS)
        if filename.startswith(root) and not own and not filename.startswith(torch_dir):
            line = frame.f_lineno
            return {"file": filename, "line": line, "code": linecache.getline(filename, line).strip()}
        frame = frame.f_back
    return None


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)  # amp_lint/
_BUNDLED_SCRIPTS = str(Path(__file__).resolve().parent / "scripts")


def _register_source(filename: str, source: str) -> None:
    # Tracebacks and call sites then show the code that runs (the AMP version), not the original file's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)


def run_script(script: str, origin: str, script_args: list[str], modules: dict[str, str] | None = None) -> None:
    """Run ``script``'s code as ``python origin args`` would run ``origin``, from ``origin``'s folder."""
    origin_path = Path(origin).resolve()
    os.chdir(origin_path.parent)
    sys.argv = [str(origin_path), *script_args]
    sys.path[0] = str(origin_path.parent)
    if modules:
        _install_module_overrides(modules, origin_path.parent)
    source, _ = read_python_source(Path(script))
    _register_source(str(origin_path), source)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=str(origin_path), __builtins__=builtins, __spec__=None, __package__=None)
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(source, str(origin_path), "exec"), main.__dict__)
    finally:
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def read_python_source(path: Path) -> tuple[str, str]:
    """A Python file's text and encoding, decoded as Python decodes it: by its BOM or PEP 263 coding cookie, else
    UTF-8 (``tokenize.open``)."""
    import tokenize

    with tokenize.open(path) as handle:
        return handle.read(), handle.encoding


class _ConvertedModuleLoader(importlib.abc.SourceLoader):
    """Loads a module's converted code while the module keeps its original file name."""

    def __init__(self, origin: str, code_path: str) -> None:
        self.origin, self.code_path = origin, code_path

    def get_filename(self, fullname: str) -> str:
        return self.origin

    def get_data(self, path: str) -> bytes:
        data = Path(self.code_path).read_bytes()
        _register_source(self.origin, importlib.util.decode_source(data))  # by its coding cookie, as Python
        return data

    def path_stats(self, path: str) -> Any:  # no bytecode cache for converted code
        raise OSError


class _ConvertedModuleFinder(importlib.abc.MetaPathFinder):
    def __init__(self, modules: dict[str, str], root: Path) -> None:
        self.modules, self.root = modules, root

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        code_path = self.modules.get(fullname)
        if code_path is None:
            return None
        relative = Path(*fullname.split("."))
        package = (self.root / relative / "__init__.py").exists()
        origin = self.root / relative / "__init__.py" if package else self.root / relative.with_suffix(".py")
        return importlib.util.spec_from_file_location(
            fullname,
            origin,
            loader=_ConvertedModuleLoader(str(origin), code_path),
            submodule_search_locations=[str(origin.parent)] if package else None,
        )


def _install_module_overrides(modules: dict[str, str], root: Path) -> None:
    if not any(isinstance(finder, _ConvertedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ConvertedModuleFinder(modules, root))


def seed_everything(torch: Any, seed: int) -> None:
    """Seed random, numpy and torch; offset the script's own seeding by ``seed`` (seed 0 changes nothing)."""
    random.seed(SEED + seed)
    torch.manual_seed(SEED + seed)
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None:
        numpy.random.seed(SEED + seed)
    if seed == 0:
        return

    def offset(original: Any) -> Any:
        @functools.wraps(original)
        def seeded(value: Any = None, *args: Any, **kwargs: Any) -> Any:
            if isinstance(value, int) and not isinstance(value, bool):
                value = (value + seed) % 2**32
            return original(value, *args, **kwargs)

        return seeded

    random.seed = offset(_ORIGINAL_SEEDERS.setdefault("random", random.seed))
    torch.manual_seed = offset(_ORIGINAL_SEEDERS.setdefault("torch", torch.manual_seed))
    torch.random.manual_seed = torch.manual_seed
    for name in ("manual_seed", "manual_seed_all"):
        original = _ORIGINAL_SEEDERS.setdefault(f"cuda.{name}", getattr(torch.cuda, name))
        setattr(torch.cuda, name, offset(original))
    if numpy is not None:
        numpy.random.seed = offset(_ORIGINAL_SEEDERS.setdefault("numpy", numpy.random.seed))


def restore_seeders(torch: Any) -> None:
    random.seed = _ORIGINAL_SEEDERS.get("random", random.seed)
    torch.manual_seed = _ORIGINAL_SEEDERS.get("torch", torch.manual_seed)
    torch.random.manual_seed = torch.manual_seed
    for name in ("manual_seed", "manual_seed_all"):
        setattr(torch.cuda, name, _ORIGINAL_SEEDERS.get(f"cuda.{name}", getattr(torch.cuda, name)))
    if "numpy" in _ORIGINAL_SEEDERS:
        import numpy

        numpy.random.seed = _ORIGINAL_SEEDERS["numpy"]


_ORIGINAL_SEEDERS: dict[str, Any] = {}
