#!/usr/bin/env python3
"""Speed benchmark for amp-lint, with its peers run side by side on the same files.

    python bench/run.py                          # torch's package and a generated repo, all cores
    python bench/run.py --corpus torch --jobs 2  # the issue's setting: 2 cores
    python bench/run.py --no-peers --repeat 5    # amp-lint alone, median of 5
    python bench/run.py --rows cold,warm,ruff    # only some rows
    python bench/run.py --self-test              # tiny generated corpus, no peers, a few seconds
    python bench/run.py --dense                  # dense training files of 1k, 3k, 6k lines beside libcst's parse

Each row is one tool run as its own process (start-up included), timed by wall clock, with the peak
memory of its whole process tree. The table goes to the terminal and, as Markdown with the machine
and tool versions, to bench/results/speed.md. The targets from the issue (a cold check of torch's ~2,300
files as fast as `ruff check --select ALL`, 50x faster than TorchFix and Fixit, warm run under 1 s,
a 5-file pre-commit run under 0.4 s, under 400 MB, --fix within 2x of the check) are checked at the
end. Peers are installed into bench/.venvs/peers on first use; everything else the benchmark makes
lives in bench/.work. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_WORK_DIR = BENCH_DIR / ".work"
PEERS_VENV = BENCH_DIR / ".venvs" / "peers"
DEFAULT_RESULTS = BENCH_DIR / "results" / "speed.md"

PEER_REQUIREMENTS = {"ruff": "ruff", "torchfix": "torchfix==0.7.0", "fixit": "fixit==2.2.1"}
# How many files a peer says it checked, from its stdout + stderr: a check that the run did the work.
CHECKED_COUNT_PATTERNS = {
    "torchfix": re.compile(r"Finished checking (\d+) files?"),
    "fixit": re.compile(r"(\d+) files? (?:clean|checked)"),
}

# Files that certainly hold AMP code: peers' samples always include all of them.
AMP_PATTERN = re.compile(rb"autocast|GradScaler")
# Bytes that can hold a finding, when amp-lint cannot tell us its own prefilter's answer.
CANDIDATE_PATTERN = re.compile(rb"backward|autocast|GradScaler")

ROW_IDS = (
    "read", "prefilter", "cold", "warm", "precommit", "fix", "ruff", "ruff-concise", "ruff-silent", "torchfix", "fixit",
)  # fmt: skip
PEER_ROWS = ("ruff", "ruff-concise", "ruff-silent", "torchfix", "fixit")
# Ruff's rows: the command the issue names (default output: each diagnostic with its source lines),
# then the same check with less to print. amp-lint's cold row prints JSON (3 findings on torch).
RUFF_OUTPUTS = {
    "ruff": ((), "ruff check --select ALL --no-cache (default output)"),
    "ruff-concise": (("--output-format", "concise"), "ruff check --select ALL --no-cache --output-format concise"),
    "ruff-silent": (("--silent",), "ruff check --select ALL --no-cache --silent"),
}
REFERENCE_ROW = "cold"

# Both corpora sit in folders that a parent .gitignore lists (bench/.work/, often a .venv/), and
# amp-lint builds before cf16334 skipped such folders even when named on the command line. Neither
# corpus has a .gitignore of its own, so the flag only makes every build check the same files.
AMP_LINT_WALK_FLAGS = ("--no-respect-gitignore",)

SAMPLE_INTERVAL_S = 0.1
GENERATED_FILES = 20_000
GENERATOR_VERSION = 1
MEMORY_METHOD = (
    "peak MB is the largest summed resident memory (RSS) of the process and all its descendants, "
    f"sampled every {SAMPLE_INTERVAL_S * 1000:.0f} ms from /proc (pages shared between processes count "
    "once per process, so it errs high), and never less than the largest single process's ru_maxrss "
    "as reported by wait4(2) for that run alone; CPU s is the user and system CPU time of the same run "
    "(the process and the workers it waited for, from wait4(2)): other processes on a shared machine "
    "stretch the wall clock far more than they stretch it"
)


# -- measuring one process ----------------------------------------------------------------------


@dataclass
class Measurement:
    seconds: float
    peak_mb: float
    # user + system CPU seconds of the process and the children it waited for (its workers): unlike the
    # wall clock, barely moved by other processes on a shared machine.
    cpu_seconds: float
    returncode: int
    timed_out: bool
    stdout_path: Path
    stderr_path: Path

    def stdout_text(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr_tail(self, lines: int = 6) -> str:
        text = self.stderr_path.read_text(errors="replace").strip()
        return " | ".join(text.splitlines()[-lines:]) if text else "(no stderr)"


def _children_of(pid: int) -> Optional[List[int]]:
    """Direct children via /proc/PID/task/*/children, or None where the kernel lacks that file."""
    children: List[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                children.extend(int(child) for child in handle.read().split())
    except FileNotFoundError:
        return None
    except OSError:
        pass
    return children


def _parent_map() -> Dict[int, List[int]]:
    """parent pid -> child pids, from every /proc/PID/stat (for kernels without the children file)."""
    parents: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    return parents


def process_tree_rss_bytes(root_pid: int) -> int:
    """Summed RSS of a process and its descendants right now (0 where /proc is missing)."""
    parent_map = _parent_map() if _children_of(root_pid) is None else None

    def children_of(pid: int) -> List[int]:
        return parent_map.get(pid, []) if parent_map is not None else (_children_of(pid) or [])

    page_size = os.sysconf("SC_PAGE_SIZE")
    total, pending, seen = 0, [root_pid], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * page_size
        except (OSError, ValueError, IndexError):
            continue
        pending.extend(children_of(pid))
    return total


class TreeMemorySampler(threading.Thread):
    """Samples the process tree's summed RSS until stopped; keeps the peak."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.peak_bytes = 0
        self._stopped = threading.Event()

    def run(self) -> None:
        if not os.path.isdir("/proc"):
            return
        while True:
            self.peak_bytes = max(self.peak_bytes, process_tree_rss_bytes(self.root_pid))
            if self._stopped.wait(SAMPLE_INTERVAL_S):
                return

    def stop(self) -> None:
        self._stopped.set()
        self.join()


def run_measured(command: Sequence[str], *, cwd: Path, timeout_s: float, log_dir: Path, label: str) -> Measurement:
    """Run one command to completion; wall clock, peak tree memory, exit code; output to files."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = log_dir / f"{label}.out", log_dir / f"{label}.err"
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # its own process group, so a timeout kills the whole tree
        )
        sampler = TreeMemorySampler(process.pid)
        sampler.start()
        timed_out = threading.Event()

        def kill_tree() -> None:
            timed_out.set()
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout_s, kill_tree)
        timer.start()
        # wait4 rather than Popen.wait: it returns this child's own rusage (a blocking wait also keeps
        # the wall clock exact, where polling would add up to one poll interval).
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        timer.cancel()
        sampler.stop()
    process.returncode = os.waitstatus_to_exitcode(status)
    if timed_out.is_set():
        kill_tree()  # workers the leader left behind
    max_rss_bytes = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return Measurement(
        seconds=seconds,
        peak_mb=max(sampler.peak_bytes, max_rss_bytes) / 2**20,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        returncode=process.returncode,
        timed_out=timed_out.is_set(),
        stdout_path=stdout_path,
        stderr_path=stderr_path,
    )


def busy_cpu_seconds() -> Optional[float]:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, from /proc/stat)."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(value) for value in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds used by this process and every child it has waited for."""
    import resource

    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def run_quietly(command: Sequence[str], timeout_s: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """An untimed helper run (versions, --help, installs); never raises for the command's failure."""
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s, **kwargs)
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(list(command), 127, "", str(error))


# -- corpora ------------------------------------------------------------------------------------


@dataclass
class Corpus:
    name: str
    root: Path
    files: List[Path]  # relative to root, sorted
    sizes: Dict[Path, int]
    amp_files: List[Path]  # containing autocast|GradScaler
    candidate_bytes: int  # bytes of the files that match CANDIDATE_PATTERN
    description: str = ""

    @classmethod
    def scan(cls, name: str, root: Path, description: str = "") -> "Corpus":
        files = sorted(path.relative_to(root) for path in root.rglob("*.py") if path.is_file())
        sizes, amp_files, candidate_bytes = {}, [], 0
        for relative in files:
            content = (root / relative).read_bytes()
            sizes[relative] = len(content)
            if AMP_PATTERN.search(content):
                amp_files.append(relative)
            if CANDIDATE_PATTERN.search(content):
                candidate_bytes += len(content)
        return cls(name, root, files, sizes, amp_files, candidate_bytes, description)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())

    def bytes_of(self, files: Sequence[Path]) -> int:
        return sum(self.sizes[path] for path in files)

    def peer_sample(self, size: int, seed: int) -> List[Path]:
        """Every AMP file plus `size` others chosen by a fixed seed (the whole corpus if size is 0)."""
        if size <= 0:
            return list(self.files)
        amp = set(self.amp_files)
        others = [path for path in self.files if path not in amp]
        picked = random.Random(seed).sample(others, min(size, len(others)))
        return sorted(amp.union(picked))

    def precommit_files(self, seed: int, count: int = 5) -> List[Path]:
        """A typical pre-commit change: mid-sized files, one of them with AMP code if there is one."""
        by_size = sorted(self.files, key=lambda path: (self.sizes[path], path))
        middle = by_size[len(by_size) // 4 : max(len(by_size) * 3 // 4, 1)] or by_size
        rng = random.Random(seed)
        amp = set(self.amp_files)
        amp_in_middle = [path for path in middle if path in amp]
        chosen = [rng.choice(amp_in_middle)] if amp_in_middle else []
        rest = [path for path in middle if path not in chosen]
        chosen += rng.sample(rest, min(count - len(chosen), len(rest)))
        return sorted(chosen)

    def copy_to(self, destination: Path, files: Optional[Sequence[Path]] = None) -> None:
        """A fresh copy of the corpus's .py files (or of `files`), for --fix to rewrite, say."""
        if destination.exists():
            shutil.rmtree(destination)
        for relative in self.files if files is None else files:
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.root / relative, target)

    def count_changed(self, copy: Path) -> int:
        return sum((copy / rel).read_bytes() != (self.root / rel).read_bytes() for rel in self.files)


def find_torch_package(python: str) -> Optional[Path]:
    # Same answer as `import torch, os; os.path.dirname(torch.__file__)`, without importing torch.
    probe = "import importlib.util as u; s = u.find_spec('torch'); print(s.origin if s else '')"
    result = run_quietly([python, "-c", probe])
    origin = result.stdout.strip()
    return Path(origin).parent if result.returncode == 0 and origin else None


# -- the generated repository ------------------------------------------------------------------

WORDS = (
    "alpha",
    "batch",
    "cache",
    "delta",
    "epoch",
    "frame",
    "graph",
    "hidden",
    "index",
    "joint",
    "kernel",
    "layer",
    "model",
    "node",
    "output",
    "param",
    "query",
    "record",
    "sample",
    "token",
    "update",
    "value",
    "weight",
    "vector",
    "window",
    "buffer",
    "config",
    "loader",
    "metric",
    "shape",
)
STDLIB_IMPORTS = (
    "import os",
    "import re",
    "import json",
    "import math",
    "import logging",
    "import itertools",
    "import functools",
    "from pathlib import Path",
    "from collections import defaultdict",
    "from dataclasses import dataclass, field",
    "from typing import Dict, List, Optional",
)


def _name(rng: random.Random, parts: int = 2) -> str:
    return "_".join(rng.choice(WORDS) for _ in range(parts))


def _function(rng: random.Random) -> str:
    name, arg, other = _name(rng), rng.choice(WORDS), rng.choice(WORDS) + "s"
    body = rng.choice(
        [
            f"    result = []\n    for item in {other}:\n        if item % {rng.randint(2, 9)}:\n"
            f"            result.append(item * {arg})\n    return result\n",
            f"    total = 0\n    for index, item in enumerate({other}):\n        total += index * item\n"
            f"    return total / max(len({other}), 1) + {arg}\n",
            f"    return {{key: value * {arg} for key, value in zip({other}, range(len({other})))}}\n",
            f'    if not {other}:\n        raise ValueError("no {other} given")\n'
            f"    return max({other}) - min({other}) + {arg}\n",
        ]
    )
    return f'def {name}({arg}, {other}):\n    """Compute the {name.replace("_", " ")}."""\n{body}'


def _class(rng: random.Random) -> str:
    name = "".join(word.capitalize() for word in (rng.choice(WORDS), rng.choice(WORDS)))
    attributes = sorted({rng.choice(WORDS) for _ in range(rng.randint(2, 4))})
    init = "".join(f"        self.{attr} = {attr}\n" for attr in attributes)
    methods = "".join(
        f"\n    def {_name(rng)}(self, amount):\n        self.{attr} = self.{attr} + amount\n"
        f"        return self.{attr}\n"
        for attr in attributes
    )
    return (
        f'class {name}:\n    """A {name} holds {", ".join(attributes)}."""\n\n'
        f"    def __init__(self, {', '.join(attributes)}):\n{init}{methods}"
    )


def _constants(rng: random.Random) -> str:
    entries = ", ".join(f'"{rng.choice(WORDS)}": {rng.randint(0, 999)}' for _ in range(rng.randint(3, 8)))
    return f"{_name(rng).upper()} = {{{entries}}}\n"


def ordinary_module(rng: random.Random) -> str:
    imports = "\n".join(sorted(rng.sample(STDLIB_IMPORTS, rng.randint(1, 4))))
    parts = [rng.choice((_function, _function, _class, _constants))(rng) for _ in range(rng.randint(2, 7))]
    return f'"""Module for {_name(rng, 3).replace("_", " ")}."""\n\n{imports}\n\n\n' + "\n\n".join(parts)


def plain_training_module(rng: random.Random) -> str:
    """A full-precision training loop: `backward` without any AMP."""
    return ordinary_module(rng) + (
        "\n\nimport torch\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
        "    model.train()\n    for inputs, targets in loader:\n        optimizer.zero_grad()\n"
        "        loss = loss_fn(model(inputs), targets)\n        loss.backward()\n"
        f"        torch.nn.utils.clip_grad_norm_(model.parameters(), {rng.choice(['0.5', '1.0', '5.0'])})\n"
        "        optimizer.step()\n"
    )


# Each AMP loop is correct, or carries one of the mistakes amp-lint looks for.
AMP_LOOPS = (
    # correct, modern API
    "import torch\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
    '    scaler = torch.amp.GradScaler("cuda")\n    for inputs, targets in loader:\n'
    '        optimizer.zero_grad()\n        with torch.autocast("cuda", dtype=torch.float16):\n'
    "            loss = loss_fn(model(inputs), targets)\n        scaler.scale(loss).backward()\n"
    "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "        scaler.step(optimizer)\n        scaler.update()\n",
    # deprecated torch.cuda.amp, imported by name
    "from torch.cuda.amp import GradScaler, autocast\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
    "    scaler = GradScaler()\n    for inputs, targets in loader:\n        optimizer.zero_grad()\n"
    "        with autocast():\n            loss = loss_fn(model(inputs), targets)\n"
    "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n",
    # scaler.update() missing
    "import torch\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
    "    scaler = torch.amp.GradScaler()\n    for inputs, targets in loader:\n"
    '        with torch.autocast(device_type="cuda"):\n            loss = loss_fn(model(inputs), targets)\n'
    "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        optimizer.zero_grad()\n",
    # backward on the unscaled loss
    "import torch\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
    '    scaler = torch.amp.GradScaler("cuda")\n    for inputs, targets in loader:\n'
    '        with torch.autocast("cuda"):\n            loss = loss_fn(model(inputs), targets)\n'
    "        loss.backward()\n        scaler.step(optimizer)\n        scaler.update()\n        optimizer.zero_grad()\n",
    # clipping scaled gradients (no unscale_)
    "import torch\nimport torch.cuda.amp as tca\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
    "    scaler = tca.GradScaler()\n    for inputs, targets in loader:\n"
    "        with tca.autocast():\n            loss = loss_fn(model(inputs), targets)\n"
    "        scaler.scale(loss).backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "        scaler.step(optimizer)\n        scaler.update()\n        optimizer.zero_grad()\n",
    # a GradScaler with bfloat16, where it is not needed
    "import torch\n\n\ndef train(model, loader, optimizer, loss_fn):\n"
    '    scaler = torch.amp.GradScaler("cuda")\n    for inputs, targets in loader:\n'
    '        with torch.autocast("cuda", dtype=torch.bfloat16):\n'
    "            loss = loss_fn(model(inputs), targets)\n        scaler.scale(loss).backward()\n"
    "        scaler.step(optimizer)\n        scaler.update()\n        optimizer.zero_grad(set_to_none=True)\n",
)


def amp_training_module(rng: random.Random) -> str:
    return ordinary_module(rng) + "\n\n" + rng.choice(AMP_LOOPS)


def generate_repository(root: Path, file_count: int, seed: int = 0, amp_every: int = 50) -> None:
    """A deterministic repository of small modules; reused when it already matches."""
    marker = root / ".generated.json"
    recipe = {"generator": GENERATOR_VERSION, "files": file_count, "seed": seed, "amp_every": amp_every}
    try:
        if json.loads(marker.read_text()) == recipe:
            return
    except (OSError, ValueError):
        pass
    if root.exists():
        shutil.rmtree(root)
    rng = random.Random(seed)
    modules_per_package = 200
    for index in range(file_count):
        package = root / f"package_{index // modules_per_package:03d}"
        package.mkdir(parents=True, exist_ok=True)
        name = "__init__.py" if index % modules_per_package == 0 else f"module_{index:05d}.py"
        if index % amp_every == amp_every // 2:
            text = amp_training_module(rng)  # 2% by default
        elif index % 20 == 7:
            text = plain_training_module(rng)  # 5%
        else:
            text = ordinary_module(rng)
        (package / name).write_text(text)
    marker.write_text(json.dumps(recipe))


# -- tools --------------------------------------------------------------------------------------


def venv_executable(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


@dataclass
class AmpLint:
    command: Optional[List[str]]  # None: not available
    python: str  # the interpreter amp-lint runs on (used to find torch, and for the baseline)
    problem: str = ""  # why it is unavailable
    explicit: bool = False  # the user named it: unavailability is then an error
    version: str = "unknown"
    bytecode: str = ""  # what was done about amp-lint's compiled bytecode before timing


# pip compiles a wheel's modules to bytecode when it installs them; an editable install (or
# PYTHONDONTWRITEBYTECODE, which this project's machines set) leaves amp-lint to be compiled again on
# every run, about 0.1 s of each start. Time amp-lint as a user's installation runs it.
COMPILE_SCRIPT = (
    "import compileall, os, sys\n"
    "import amp_lint\n"
    "folder = os.path.dirname(amp_lint.__file__)\n"
    "sys.exit(0 if compileall.compile_dir(folder, quiet=1) else 1)\n"
)


def resolve_amp_lint(command: Optional[str], python: Optional[str]) -> AmpLint:
    """--amp-lint, else the amp-lint next to this python, else on PATH, else `python -m amp_lint`."""
    repo_python = venv_executable(REPO_ROOT / ".venv", "python")
    fallback_python = str(repo_python) if repo_python.exists() else sys.executable
    if command:
        argv = shlex.split(command)
    else:
        beside = Path(sys.executable).parent / "amp-lint"
        in_repo_venv = venv_executable(REPO_ROOT / ".venv", "amp-lint")
        found = next((str(p) for p in (beside, in_repo_venv) if p.exists()), None) or shutil.which("amp-lint")
        argv = [found] if found else [fallback_python, "-m", "amp_lint"]
    tool = AmpLint(argv, python or _interpreter_of(argv, fallback_python), explicit=bool(command))
    # --version, not --help: it is the cheapest sign of a working command, and the least likely to break.
    probe = run_quietly(argv + ["--version"])
    if probe.returncode != 0:
        last_line = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        tool.command, tool.problem = None, f"`{shlex.join(argv)} --version` failed: {last_line}"
    else:
        tool.version = version_in(probe.stdout)
        compiled = run_quietly([tool.python, "-c", COMPILE_SCRIPT])
        tool.bytecode = (
            "amp-lint's modules compiled to bytecode first, as `pip install` does"
            if compiled.returncode == 0
            else "amp-lint's modules could not be compiled to bytecode: each run compiles them"
        )
    return tool


def version_in(text: str) -> str:
    """`amp-lint 0.1.0`, `fixit, version 2.2.1`, `0.7.0` -> the version number."""
    found = re.search(r"\d+(?:\.\d+)+\S*", text)
    return found.group(0) if found else (text.strip().splitlines() or ["unknown"])[0]


def _interpreter_of(argv: Sequence[str], fallback: str) -> str:
    """The python a command runs on: itself, or the one beside its console script."""
    program = Path(argv[0])
    if program.name.startswith("python"):
        return str(program)
    beside = program.parent / "python"
    return str(beside) if program.parent != Path() and beside.exists() else fallback


@dataclass
class Peers:
    executables: Dict[str, Optional[Path]] = field(default_factory=dict)
    problems: Dict[str, str] = field(default_factory=dict)
    versions: Dict[str, str] = field(default_factory=dict)


def ensure_peers(venv: Path, log: Callable[[str], None]) -> Peers:
    """Install ruff, TorchFix and Fixit into their own venv on first use; a failure marks one peer."""
    peers = Peers()
    python = venv_executable(venv, "python")
    if not python.exists():
        log(f"creating the peers' venv {venv} ...")
        created = run_quietly([sys.executable, "-m", "venv", str(venv)], timeout_s=300)
        if created.returncode != 0:
            for name in PEER_REQUIREMENTS:
                peers.executables[name] = None
                peers.problems[name] = "could not create the peers' venv: " + created.stderr.strip()[-200:]
            return peers
    for name, requirement in PEER_REQUIREMENTS.items():
        executable = venv_executable(venv, name)
        if not executable.exists():
            log(f"installing {requirement} into {venv} ...")
            installed = run_quietly(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
                timeout_s=900,
            )
            if installed.returncode != 0 or not executable.exists():
                peers.executables[name] = None
                lines = (installed.stderr or installed.stdout).strip().splitlines()
                peers.problems[name] = f"`pip install {requirement}` failed: " + (lines[-1] if lines else "")
                continue
        peers.executables[name] = executable
        peers.versions[name] = version_in(run_quietly([str(executable), "--version"]).stdout)
    libcst = run_quietly([str(python), "-c", "import importlib.metadata as m; print(m.version('libcst'))"])
    if libcst.returncode == 0:
        peers.versions["libcst (peers' venv)"] = libcst.stdout.strip()
    return peers


# -- rows ---------------------------------------------------------------------------------------


@dataclass
class Row:
    row_id: str
    label: str
    files: Optional[int] = None
    seconds: Optional[float] = None
    peak_mb: Optional[float] = None
    cpu_seconds: Optional[float] = None  # of the same run as `seconds` (median or best), see Measurement
    status: str = "ok"  # ok | error | unavailable | skipped
    note: str = ""
    extrapolated: bool = False
    # Measured alternating with the cold check (`CorpusBenchmark.amp_lint_cold`): the median over the
    # pairs of the cold check's time divided by this row's.
    paired_ratio: Optional[float] = None

    @property
    def measured(self) -> bool:
        return self.status == "ok" and self.seconds is not None


@dataclass
class Options:
    jobs: int
    repeat_fast: int
    repeat_peers: int
    precommit_runs: int
    peer_sample: int
    seed: int
    timeout_s: float
    work_dir: Path
    rows: Sequence[str]


def _recorded(row: Row, runs: Sequence[Measurement], best_of: bool) -> Measurement:
    """The row's seconds and CPU (the median of the runs, or the best) and its peak; the last run."""
    seconds = [run.seconds for run in runs]
    cpus = [run.cpu_seconds for run in runs]
    row.seconds = min(seconds) if best_of else statistics.median(seconds)
    row.cpu_seconds = min(cpus) if best_of else statistics.median(cpus)
    row.peak_mb = max(run.peak_mb for run in runs)
    if len(runs) > 1:
        row.note = _join(row.note, f"{'best' if best_of else 'median'} of {len(runs)}")
    return runs[-1]


class CorpusBenchmark:
    """Every row for one corpus."""

    def __init__(self, corpus: Corpus, amp_lint: AmpLint, peers: Optional[Peers], options: Options, log) -> None:
        self.corpus = corpus
        self.amp_lint = amp_lint
        self.peers = peers
        self.options = options
        self.log = log
        self.scratch = options.work_dir / "runs" / corpus.name
        self.logs = self.scratch / "logs"
        self.rows: List[Row] = []
        self.prefiltered_bytes: Optional[int] = None
        self._peer_copy: Optional[Path] = None
        self._temporary_folders: List[Path] = []

    # Running and judging ------------------------------------------------------------------------

    def measure(
        self,
        row: Row,
        command: Sequence[str],
        runs: int,
        ok_codes=(0, 1),
        prepare: Optional[Callable[[], None]] = None,
        best_of: bool = False,
    ) -> Optional[Measurement]:
        """Run `command` `runs` times (after `prepare`, untimed, each time) into `row`: the median, or the best.

        Tools run in the scratch folder, never in the corpus: `python -m` puts the working folder first
        on sys.path, and torch's package has modules named `signal` and `random`.
        """
        runs_of_row: List[Measurement] = []
        for attempt in range(runs):
            if prepare:
                prepare()
            last = self._run_once(row, command, attempt, ok_codes)
            if last is None:
                return None
            runs_of_row.append(last)
        return _recorded(row, runs_of_row, best_of)

    def measure_alternating(
        self, row: Row, command: Sequence[str], other: Row, other_command: Sequence[str], runs: int, other_ok_codes=(0,)
    ) -> Tuple[Optional[Measurement], Optional[Measurement]]:
        """`measure` of two commands whose runs alternate (one, the other, one, ...), so that a machine
        that gets faster or slower during the benchmark does so for both; `other.paired_ratio` is the
        median over the pairs of the first's time over the other's. A failure of either stops both."""
        first_runs: List[Measurement] = []
        other_runs: List[Measurement] = []
        for attempt in range(runs):
            first = self._run_once(row, command, attempt, (0, 1))
            second = self._run_once(other, other_command, attempt, other_ok_codes) if first is not None else None
            if first is None or second is None:
                return None, None
            first_runs.append(first)
            other_runs.append(second)
        other.paired_ratio = statistics.median(a.seconds / b.seconds for a, b in zip(first_runs, other_runs))
        return _recorded(row, first_runs, False), _recorded(other, other_runs, False)

    def _run_once(self, row: Row, command: Sequence[str], attempt: int, ok_codes) -> Optional[Measurement]:
        """One timed run into the scratch folder; None, with the row marked as an error, when it failed."""
        last = run_measured(
            command,
            cwd=self.scratch,
            timeout_s=self.options.timeout_s,
            log_dir=self.logs,
            label=f"{row.row_id}-{attempt}",
        )
        if last.timed_out:
            row.status, row.note = "error", f"timed out after {self.options.timeout_s:.0f} s"
            return None
        if last.returncode not in ok_codes:
            row.status = "error"
            row.note = f"exit code {last.returncode}: {last.stderr_tail()}"
            return None
        return last

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        shown = f"{row.seconds:.3f} s" if row.seconds is not None else row.status
        self.log(f"  {self.corpus.name}: {row.label}: {shown}{'  (' + row.note + ')' if row.note else ''}")
        return row

    def amp_lint_row(self, row_id: str, label: str) -> Optional[Row]:
        """A fresh row for amp-lint, or an unavailable/error one already added."""
        row = Row(row_id, label, files=len(self.corpus.files))
        if self.amp_lint.command is None:
            row.status = "error" if self.amp_lint.explicit else "unavailable"
            row.note, row.files = self.amp_lint.problem, None
            self.add(row)
            return None
        return row

    # The rows -------------------------------------------------------------------------------

    def run(self) -> List[Row]:
        self.scratch.mkdir(parents=True, exist_ok=True)
        file_list = self.scratch / "files.txt"
        file_list.write_text("\n".join(str(self.corpus.root / path) for path in self.corpus.files) + "\n")
        steps = {
            "read": lambda: self.read_all_files(file_list),
            "prefilter": self.amp_lint_prefilter,
            "cold": self.amp_lint_cold,
            "warm": self.amp_lint_warm,
            "precommit": self.amp_lint_precommit,
            "fix": self.amp_lint_fix,
            "ruff": lambda: self.ruff("ruff"),
            "ruff-concise": lambda: self.ruff("ruff-concise"),
            "ruff-silent": lambda: self.ruff("ruff-silent"),
            "torchfix": lambda: self.sampled_peer("torchfix", "TorchFix"),
            "fixit": lambda: self.sampled_peer("fixit", "Fixit"),
        }
        try:
            for row_id in ROW_IDS:
                if row_id in self.options.rows and (self.peers or row_id not in PEER_ROWS):
                    steps[row_id]()
        finally:
            self.remove_temporary_folders()
        return self.rows

    def read_all_files(self, file_list: Path) -> None:
        script = (
            "import sys\ntotal = 0\n"
            "for name in open(sys.argv[1]).read().split('\\n'):\n"
            "    if name:\n        with open(name, 'rb') as f:\n            total += len(f.read())\n"
            "print(total)\n"
        )
        row = Row("read", "read every file (python)", files=len(self.corpus.files))
        self.measure(row, [self.amp_lint.python, "-c", script, str(file_list)], self.options.repeat_fast, ok_codes=(0,))
        self.add(row)

    def amp_lint_prefilter(self) -> None:
        row = self.amp_lint_row("prefilter", "amp-lint --prefilter-only")
        if row is None:
            return
        command = self.amp_lint.command + ["--prefilter-only", *AMP_LINT_WALK_FLAGS, str(self.corpus.root)]
        last = self.measure(row, command, self.options.repeat_fast)
        if last is None and "no such option" in row.note.lower():
            row.status, row.note = "skipped", "this amp-lint has no --prefilter-only flag"
        elif last is not None:
            passed = [Path(line.strip()) for line in last.stdout_text().splitlines() if line.strip()]
            row.files = len(passed)
            self.prefiltered_bytes = sum(path.stat().st_size for path in passed if path.is_file())
            row.note = _join(row.note, f"files passing the prefilter: {_megabytes(self.prefiltered_bytes)}")
            if not passed and self.corpus.amp_files:
                row.note = _join(row.note, self.skipped_warning())
        self.add(row)

    def skipped_warning(self) -> str:
        return (
            f"WARNING: nothing found although {len(self.corpus.amp_files)} files use autocast/GradScaler; "
            "is amp-lint skipping the corpus (excludes, .gitignore)?"
        )

    def check_command(self, *, cache_dir: Optional[Path], extra: Sequence[str] = (), root: Optional[Path] = None):
        command = list(self.amp_lint.command) + [
            "--exit-zero",
            "--output-format",
            "json",
            "--jobs",
            str(self.options.jobs),
        ]
        if cache_dir is None:
            command += ["--no-cache", "--cache-dir", str(self.scratch / "unused-cache")]
        else:
            command += ["--cache-dir", str(cache_dir)]
        return command + [*AMP_LINT_WALK_FLAGS, *extra, str(root or self.corpus.root)]

    def amp_lint_cold(self) -> None:
        row = self.amp_lint_row("cold", "amp-lint cold (--no-cache)")
        if row is None:
            return
        ruff = self.ruff_row("ruff-silent") if "ruff-silent" in self.options.rows and self.peers else None
        if ruff is not None and ruff[1] is not None:
            # Issue 31's ratio: the two alternate, run for run, so that the machine's drift does not enter it.
            last, ruff_last = self.measure_alternating(
                row, self.check_command(cache_dir=None), ruff[0], ruff[1], self.options.repeat_fast
            )
            if ruff_last is not None:
                ruff[0].note = _join(ruff[0].note, "each run right after one of the cold check's")
            elif ruff[0].status == "ok":
                ruff[0].status, ruff[0].note = "skipped", "the cold check it alternates with failed"
            self.finish_ruff_row(ruff[0])
        else:
            last = self.measure(row, self.check_command(cache_dir=None), self.options.repeat_fast)
        if last is not None:
            findings = count_findings(last.stdout_path)
            if findings is None:
                row.note = _join(row.note, "output is not a JSON list of findings")
            else:
                row.note = _join(row.note, f"{findings:,} findings")
                if findings == 0 and self.corpus.amp_files:
                    row.note = _join(row.note, self.skipped_warning())
        self.add(row)

    def amp_lint_warm(self) -> None:
        row = self.amp_lint_row("warm", "amp-lint warm (cache filled, nothing changed)")
        if row is None:
            return
        cache_dir = self.scratch / "cache"
        if cache_dir.exists():
            shutil.rmtree(cache_dir)
        command = self.check_command(cache_dir=cache_dir)
        fill = Row("warm-fill", "fill the cache")
        if self.measure(fill, command, 1) is None:
            row.status, row.note = fill.status, "filling the cache: " + fill.note
        else:
            self.measure(row, command, self.options.repeat_fast)
            # amp-lint keys its cache by its own code too: an edit during the benchmark empties the cache.
            versions = [entry.name for entry in cache_dir.iterdir() if entry.is_dir()] if cache_dir.is_dir() else []
            if len(versions) > 1:
                row.note = _join(
                    row.note,
                    f"WARNING: the cache's version changed between runs ({', '.join(sorted(versions))}): "
                    "amp-lint's code was edited meanwhile, so this was not a warm run",
                )
        self.add(row)

    def amp_lint_precommit(self) -> None:
        files = self.corpus.precommit_files(self.options.seed)
        row = self.amp_lint_row("precommit", f"amp-lint on {len(files)} files (pre-commit)")
        if row is None:
            return
        row.files = len(files)
        command = [*self.amp_lint.command, "--no-cache", "--exit-zero", *AMP_LINT_WALK_FLAGS]
        command += [str(self.corpus.root / path) for path in files]
        self.measure(row, command, self.options.precommit_runs, best_of=True)
        row.note = _join(row.note, f"{_megabytes(self.corpus.bytes_of(files))}, interpreter start-up included")
        self.add(row)

    def amp_lint_fix(self) -> None:
        row = self.amp_lint_row("fix", "amp-lint --fix --unsafe-fixes (on a copy)")
        if row is None:
            return
        copy = self.scratch / "fix-copy"
        command = self.check_command(cache_dir=None, extra=["--fix", "--unsafe-fixes"], root=copy)
        last = self.measure(row, command, self.options.repeat_fast, prepare=lambda: self.corpus.copy_to(copy))
        if last is not None:
            changed = self.corpus.count_changed(copy)
            row.note = _join(row.note, f"{changed} file{'' if changed == 1 else 's'} changed; copying not timed")
        self.add(row)

    def ruff(self, row_id: str) -> None:
        if any(row.row_id == row_id for row in self.rows):
            return  # measured beside the cold check (`amp_lint_cold`)
        row, command = self.ruff_row(row_id)
        if command is not None:
            # Ruff is fast: its row is the median of as many runs as amp-lint's, like for like.
            self.measure(row, command, self.options.repeat_fast, ok_codes=(0,))
        self.finish_ruff_row(row)

    def ruff_row(self, row_id: str) -> Tuple[Row, Optional[List[str]]]:
        """The row and the command of one of Ruff's rows; no command when Ruff is unavailable."""
        flags, label = RUFF_OUTPUTS[row_id]
        row = Row(row_id, label)
        executable = self.peers.executables.get("ruff")
        if executable is None:
            row.status, row.note = "unavailable", self.peers.problems.get("ruff", "")
            return row, None
        root = str(self.corpus.root)
        shown = run_quietly([str(executable), "check", "--show-files", "--no-cache", root], cwd=self.scratch)
        row.files = len([line for line in shown.stdout.splitlines() if line.strip()]) or None
        return row, [str(executable), "check", "--select", "ALL", "--no-cache", "--exit-zero", *flags, root]

    def finish_ruff_row(self, row: Row) -> None:
        if row.measured and row.files and row.files != len(self.corpus.files):
            row.note = _join(row.note, "ruff also checks .pyi stubs")
        self.add(row)

    def sampled_peer(self, name: str, label: str) -> None:
        row = Row(name, label)
        executable = self.peers.executables.get(name)
        if executable is None:
            row.status, row.note = "unavailable", self.peers.problems.get(name, "")
            self.add(row)
            return
        sample = self.corpus.peer_sample(self.options.peer_sample, self.options.seed)
        whole = len(sample) == len(self.corpus.files)
        options = ["lint"] if name == "fixit" else ["--jobs", str(self.options.jobs)]
        last = self.measure(row, [str(executable), *options, str(self.peer_copy(sample))], self.options.repeat_peers)
        row.files = len(self.corpus.files)
        if last is not None:
            checked = CHECKED_COUNT_PATTERNS[name].search(
                last.stdout_text() + last.stderr_path.read_text(errors="replace")
            )
            if checked and int(checked.group(1)) == 0:
                row.status, row.note = "error", f"{label} checked no files"
            elif checked and int(checked.group(1)) != len(sample):
                why = " (it skips files that do not mention torch)" if name == "torchfix" else ""
                row.note = _join(row.note, f"{label} says it checked {checked.group(1)} of {len(sample)} files{why}")
        if row.measured and not whole:
            # Start-up is paid once, whatever the size: only the rest scales with the bytes.
            empty_file = self.scratch / "empty_module.py"
            empty_file.write_text("")
            startup = Row(f"{name}-startup", "start-up")
            self.measure(startup, [str(executable), *options, str(empty_file)], 1)
            startup_s = min(startup.seconds, row.seconds) if startup.measured else 0.0
            sample_bytes = self.corpus.bytes_of(sample)
            row.seconds = startup_s + (row.seconds - startup_s) * self.corpus.total_bytes / sample_bytes
            row.extrapolated = True
            row.note = _join(
                row.note,
                f"extrapolated per byte from {len(sample)} files ({_megabytes(sample_bytes)}: every "
                f"autocast/GradScaler file + {self.options.peer_sample} by seed {self.options.seed}), "
                f"{startup_s:.2f} s start-up counted once; peak MB on the sample",
            )
        self.add(row)

    def peer_copy(self, files: Sequence[Path]) -> Path:
        """TorchFix's and Fixit's files, copied outside any git work tree.

        Fixit skips whatever a .gitignore lists, even files named on its command line, and both
        corpora sit in ignored folders (bench/.work/, .venv/); out there it checks every file.
        """
        if self._peer_copy is None:
            workspace = Path(tempfile.mkdtemp(prefix="amp-lint-bench-"))
            self._temporary_folders.append(workspace)
            self._peer_copy = workspace / self.corpus.name
            self.corpus.copy_to(self._peer_copy, files)
        return self._peer_copy

    def remove_temporary_folders(self) -> None:
        for folder in self._temporary_folders:
            shutil.rmtree(folder, ignore_errors=True)


def count_findings(stdout_path: Path) -> Optional[int]:
    """How many findings amp-lint's JSON output holds (a list of them), or None if it is not that."""
    try:
        report = json.loads(stdout_path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return len(report) if isinstance(report, list) else None


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _megabytes(byte_count: int) -> str:
    return f"{byte_count / 1e6:.1f} MB" if byte_count >= 100_000 else f"{byte_count / 1e3:.0f} kB"


# -- the report ---------------------------------------------------------------------------------


def ratio_text(row: Row, reference: Optional[Row]) -> str:
    """Time against amp-lint cold: `0.80x amp-lint` for a faster row, `95x slower` for a slower one."""
    if row.row_id == REFERENCE_ROW and row.measured:
        return "1.0x (reference)"
    if not row.measured or reference is None or not reference.measured or reference.seconds <= 0:
        return "n/a"
    ratio = row.seconds / reference.seconds
    if ratio < 1:
        return f"{ratio:{'.2g' if ratio < 0.1 else '.2f'}}x amp-lint"
    return f"{ratio:.{0 if ratio >= 10 else 1}f}x slower"


def seconds_text(row: Row) -> str:
    if not row.measured:
        return row.status
    value = f"{row.seconds:.2f}" if row.seconds < 100 else f"{row.seconds:.0f}"
    return ("~" if row.extrapolated else "") + value


TABLE_HEADER = ("row", "files", "seconds", "CPU s", "vs amp-lint cold", "peak MB", "notes")


def table_cells(rows: Sequence[Row]) -> List[List[str]]:
    reference = next((row for row in rows if row.row_id == REFERENCE_ROW), None)
    return [
        [
            row.label,
            f"{row.files:,}" if row.files is not None else "",
            seconds_text(row),
            f"{row.cpu_seconds:.2f}" if row.cpu_seconds is not None and row.measured and not row.extrapolated else "",
            ratio_text(row, reference),
            f"{row.peak_mb:.0f}" if row.peak_mb is not None and row.measured else "",
            row.note,
        ]
        for row in rows
    ]


def text_table(rows: Sequence[Row]) -> str:
    cells = [list(TABLE_HEADER)] + table_cells(rows)
    widths = [max(len(line[column]) for line in cells) for column in range(len(TABLE_HEADER) - 1)]
    lines = []
    for index, line in enumerate(cells):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  -----")
    return "\n".join(lines)


def markdown_table(header: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    def line(values):
        return "| " + " | ".join(str(value).replace("|", "\\|") for value in values) + " |"

    return "\n".join([line(header), line(["---"] * len(header))] + [line(values) for values in cells])


# The targets, stated for a cold check of torch's installed package on 2 cores.
TARGETS = {
    "ruff": "cold check no slower than `ruff check --select ALL --no-cache` (the command as the issue names it)",
    "ruff-concise": "stricter, info: cold check vs the same Ruff check with `--output-format concise`",
    "ruff-silent": "issue 31: cold check at most 0.6x `ruff check --select ALL --no-cache --silent` in the same run",
    "torchfix": "at least 50x faster than TorchFix",
    "fixit": "at least 50x faster than Fixit",
    "warm": "warm run (nothing changed) at most 0.3 s (issue 31)",
    "precommit": "pre-commit run (5 files) at most 0.15 s, start-up included (issue 31)",
    "memory": "peak memory under 400 MB (every amp-lint check and fix run)",
    "fix": "`--fix --unsafe-fixes` no more than 2x the cold check",
    "linear": "cold check's cost per MB that can hold a finding (info: compare across corpora)",
}


def judge_targets(rows: Sequence[Row], corpus: Corpus, prefiltered_bytes: Optional[int]) -> Dict[str, str]:
    """TARGETS key -> `PASS (detail)` / `FAIL (detail)` / info, for the rows that were measured."""
    measured = {row.row_id: row for row in rows if row.measured}

    def seconds(row_id: str) -> Optional[float]:
        return measured[row_id].seconds if row_id in measured else None

    def verdict(ok: bool, detail: str) -> str:
        return f"{'PASS' if ok else 'FAIL'} ({detail})"

    verdicts: Dict[str, str] = {}
    cold = seconds("cold")
    if cold and seconds("ruff"):
        verdicts["ruff"] = verdict(cold <= seconds("ruff"), f"{cold:.2f} s vs {seconds('ruff'):.2f} s")
    if cold and seconds("ruff-concise"):
        verdicts["ruff-concise"] = f"{cold:.2f} s vs {seconds('ruff-concise'):.2f} s ({cold / seconds('ruff-concise'):.2f}x Ruff's time)"
    if cold and seconds("ruff-silent"):
        paired = measured["ruff-silent"].paired_ratio
        ratio = paired if paired is not None else cold / seconds("ruff-silent")
        how = ", the median of the alternating runs' ratios" if paired is not None else ""
        verdicts["ruff-silent"] = verdict(
            ratio <= 0.6, f"{cold:.2f} s vs {seconds('ruff-silent'):.2f} s, {ratio:.3f}x Ruff's time{how}"
        )
    for peer in ("torchfix", "fixit"):
        if cold and seconds(peer):
            speedup = seconds(peer) / cold
            verdicts[peer] = verdict(speedup >= 50, f"{speedup:.0f}x")
    if seconds("warm") is not None:
        verdicts["warm"] = verdict(seconds("warm") <= 0.3, f"{seconds('warm'):.2f} s")
    if seconds("precommit") is not None:
        verdicts["precommit"] = verdict(seconds("precommit") <= 0.15, f"{seconds('precommit'):.2f} s")
    amp_lint_runs = [measured[row_id] for row_id in ("cold", "warm", "precommit", "fix") if row_id in measured]
    if amp_lint_runs:
        largest = max(amp_lint_runs, key=lambda row: row.peak_mb)
        verdicts["memory"] = verdict(largest.peak_mb < 400, f"{largest.peak_mb:.0f} MB, {largest.row_id}")
    if cold and seconds("fix"):
        verdicts["fix"] = verdict(seconds("fix") <= 2 * cold, f"{seconds('fix') / cold:.2f}x the check")
    candidate_bytes = prefiltered_bytes or corpus.candidate_bytes
    if cold and candidate_bytes:
        source = (
            "passing amp-lint's prefilter" if prefiltered_bytes else "in files matching backward|autocast|GradScaler"
        )
        verdicts["linear"] = f"{cold / (candidate_bytes / 1e6):.2f} s/MB ({_megabytes(candidate_bytes)} {source})"
    return verdicts


def targets_table(verdicts: Dict[str, Dict[str, str]]) -> List[List[str]]:
    """One line per target: its description, then its verdict on each corpus."""
    return [
        [description] + [by_corpus.get(key, "n/a") for by_corpus in verdicts.values()]
        for key, description in TARGETS.items()
    ]


def machine_description() -> Dict[str, str]:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu_model = platform.processor() or "unknown"
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB memory"
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "machine": f"{os.cpu_count()} CPUs ({cpu_model}), {usable} usable by this run{memory}",
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def write_markdown(
    path: Path,
    *,
    command_line: str,
    corpora: Dict[str, Corpus],
    results: Dict[str, List[Row]],
    verdicts: Dict[str, Dict[str, str]],
    versions: Dict[str, str],
    notes: List[str],
) -> None:
    machine = machine_description()
    lines = [
        "# amp-lint benchmark",
        "",
        f"Run {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} with `{command_line}`.",
        "",
        f"- Machine: {machine['machine']}; {machine['system']}; Python {machine['python']}",
        "- Tools: " + ", ".join(f"{name} {version}" for name, version in versions.items()),
        "",
    ]
    for name, rows in results.items():
        corpus = corpora[name]
        lines += [
            f"## {corpus.description or name}: {len(corpus.files):,} files, {_megabytes(corpus.total_bytes)}",
            "",
            markdown_table(TABLE_HEADER, table_cells(rows)),
            "",
        ]
    lines += ["## Targets", "", markdown_table(["target", *verdicts], targets_table(verdicts)), ""]
    lines += ["## How this was measured", ""] + [f"- {note}" for note in notes] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


# -- main ---------------------------------------------------------------------------------------


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", choices=("torch", "generated", "both"), default="both")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes for every tool (default: all cores); fewer than the cores also pins every tool "
        "to that many CPUs",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        help="runs per row, the median reported (default: 3 for amp-lint and baseline rows, 1 for peers)",
    )
    parser.add_argument(
        "--amp-lint",
        dest="amp_lint",
        help="the amp-lint command (default: the amp-lint next to this python or in the repo's .venv, else on PATH, "
        "else `python -m amp_lint`)",
    )
    parser.add_argument("--python", help="the python whose torch is the corpus (default: amp-lint's)")
    parser.add_argument("--no-peers", action="store_true", help="skip ruff, TorchFix and Fixit (and their install)")
    parser.add_argument(
        "--peer-sample",
        type=int,
        default=40,
        help="TorchFix/Fixit: this many files by a fixed seed, plus every autocast/GradScaler file, extrapolated "
        "per byte (0: the whole corpus)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", default=",".join(ROW_IDS), help="comma-separated rows to run: " + ",".join(ROW_IDS))
    parser.add_argument("--timeout", type=float, default=3600, help="seconds before one run is killed (default: 3600)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="scratch space (default: bench/.work)")
    parser.add_argument(
        "--output",
        type=Path,
        help="Markdown results (default: bench/results/speed.md; with --self-test, inside the work dir)",
    )
    parser.add_argument("--generated-files", type=int, default=GENERATED_FILES, help=argparse.SUPPRESS)
    parser.add_argument(
        "--scaling-sizes",
        default=None,
        help="training functions in the scaling section's generated files (default: 200,2000; '' to skip; "
        "skipped by --self-test unless given)",
    )
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="the whole pipeline on a 50-file generated corpus, no peers, one run each",
    )
    parser.add_argument(
        "--dense",
        nargs="?",
        const="1000,3000,6000",
        metavar="LINES",
        help="only the dense training files (bench/dense_gen.py) of these sizes, each check beside libcst's parse "
        "of the same file, alternating (bench/dense_bench.py); --repeat runs each (default 3)",
    )
    arguments = parser.parse_args(argv)
    unknown = set(arguments.rows.split(",")) - set(ROW_IDS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}; choose from {', '.join(ROW_IDS)}")
    if arguments.self_test:
        arguments.corpus, arguments.no_peers = "generated", True
        arguments.generated_files = min(arguments.generated_files, 50)
        arguments.work_dir = arguments.work_dir / "self-test"
        arguments.timeout = min(arguments.timeout, 120)
    return arguments


# -- scaling: one file of many training functions ------------------------------------------------

# The check time of a file of 2,000 training functions over that of 200 (issue 21: at most 12x; a
# cost quadratic in the file's size gives about 100x).
SCALING_SIZES = (200, 2_000)
SCALING_LIMIT = 12.0


def training_functions_file(count: int) -> str:
    """One module of `count` small training functions, each with findings (AMP001, AMP021) and fixes."""
    parts = ["import torch\n\nscaler = torch.amp.GradScaler('cuda')\n\n"]
    for index in range(count):
        parts.append(
            f"def train_{index}(model, optimizer, loader):\n"
            "    for x, y in loader:\n"
            "        with torch.autocast('cuda'):\n"
            f"            loss = model(x).sum() * {index}\n"
            "            scaler.scale(loss).backward()\n"
            "        scaler.step(optimizer)\n"
            "        optimizer.zero_grad()\n\n\n"
        )
    return "".join(parts)


@dataclass
class ScalingRow:
    functions: int
    lines: int
    seconds: float
    peak_mb: float
    returncode: int
    input_mb: float = 0.0  # the file's size


def memory_per_input_mb(rows: Sequence[ScalingRow]) -> float:
    """MB of peak memory per MB of input, start-up excluded: the growth from the smallest file to the largest."""
    grown = rows[-1].input_mb - rows[0].input_mb
    return (rows[-1].peak_mb - rows[0].peak_mb) / grown if grown > 0 else float("nan")


def measure_scaling(
    command: Sequence[str], work_dir: Path, sizes: Sequence[int] = SCALING_SIZES, timeout_s: float = 600
) -> List[ScalingRow]:
    """Time `command check` (no cache, one file) on generated files of `sizes` training functions."""
    folder = work_dir / "scaling"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for count in sizes:
        path = folder / f"train_{count}.py"
        text = training_functions_file(count)
        path.write_text(text)
        measured = run_measured(
            [*command, "check", "--no-cache", "--output-format", "concise", path.name],
            cwd=folder,
            timeout_s=timeout_s,
            log_dir=folder / "logs",
            label=f"scaling-{count}",
        )
        rows.append(
            ScalingRow(
                count,
                text.count("\n"),
                measured.seconds,
                measured.peak_mb,
                -9 if measured.timed_out else measured.returncode,
                len(text.encode("utf-8")) / 1e6,
            )
        )
    return rows


def scaling_growth(rows: Sequence[ScalingRow]) -> float:
    """How many times longer the largest file took than the smallest."""
    return rows[-1].seconds / max(rows[0].seconds, 1e-9)


def scaling_lines(rows: Sequence[ScalingRow], limit: float = SCALING_LIMIT) -> List[str]:
    """The scaling section as printed (and written into the results)."""
    lines = ["Scaling: one generated file of N training functions (amp-lint check --no-cache)", ""]
    lines.append("| functions | lines | input MB | seconds | peak MB | exit |")
    lines.append("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        lines.append(
            f"| {row.functions:,} | {row.lines:,} | {row.input_mb:.2f} | {row.seconds:.2f} | {row.peak_mb:.0f} | {row.returncode} |"
        )
    growth = scaling_growth(rows)
    ok = growth <= limit and all(row.returncode == 1 for row in rows)  # 1: the findings were found
    lines.append("")
    lines.append(
        f"{rows[-1].functions:,} functions took {growth:.1f}x the time of {rows[0].functions:,} "
        f"({rows[-1].functions / rows[0].functions:.0f}x the code; target: at most {limit:g}x): {'met' if ok else 'MISSED'}"
    )
    if len(rows) > 1:
        lines.append(
            f"Memory: {memory_per_input_mb(rows):.0f} MB per MB of input (peak growth from the smallest file to the "
            "largest; a file whose estimate exceeds amp_lint.parse.guard.MEMORY_LIMIT is refused before it is parsed)"
        )
    return lines


def pin_to_cpus(jobs: int) -> Optional[List[int]]:
    """Fewer jobs than CPUs: pin this process (and so every tool it starts) to `jobs` CPUs.

    Ruff and Fixit take every CPU they see, so limiting their worker count alone would not make
    the comparison fair; an affinity mask is inherited by every child.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    available = sorted(os.sched_getaffinity(0))
    if jobs >= len(available):
        return None
    chosen = available[:jobs]
    os.sched_setaffinity(0, chosen)
    return chosen


def load_corpora(arguments: argparse.Namespace, python: str, work_dir: Path, log) -> Dict[str, Corpus]:
    corpora: Dict[str, Corpus] = {}
    if arguments.corpus in ("torch", "both"):
        torch_root = find_torch_package(python)
        if torch_root is None:
            log(f"no torch package found for {python}; skipping the torch corpus (try --python)")
        else:
            version = run_quietly([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"])
            description = f"torch {version.stdout.strip()} installed package ({torch_root})"
            corpora["torch"] = Corpus.scan("torch", torch_root, description)
    if arguments.corpus in ("generated", "both"):
        generated_root = work_dir / "generated"
        log(f"generating {arguments.generated_files:,} files under {generated_root} (reused when present) ...")
        amp_every = 10 if arguments.self_test else 50  # a tiny corpus still gets a few AMP loops
        generate_repository(generated_root, arguments.generated_files, seed=arguments.seed, amp_every=amp_every)
        corpora["generated"] = Corpus.scan("generated", generated_root, "generated repository")
    return corpora


def measurement_notes(options: Options, pinned: Optional[List[int]]) -> List[str]:
    """How to read the tables; printed under them and written into results.md."""
    return [
        "Every row is one process started by the benchmark; seconds are wall clock from start to exit, "
        "interpreter start-up included; amp-lint and baseline rows are medians of repeated runs unless noted.",
        MEMORY_METHOD + ".",
        f"Workers: --jobs {options.jobs}"
        + (f"; every tool pinned to CPUs {pinned}" if pinned else "; no CPU pinning")
        + ".",
        "`vs amp-lint cold` is the row's time divided by amp-lint's cold check: `0.80x amp-lint` took 0.8 of "
        "amp-lint's time, `95x slower` took 95 times as long.",
        "TorchFix and Fixit marked `~` ran on a sample (every file containing autocast or GradScaler plus "
        f"{options.peer_sample} files chosen with seed {options.seed}); their time past start-up (timed on an "
        "empty file) is scaled by the corpus's bytes over the sample's.",
        f"amp-lint runs with {' '.join(AMP_LINT_WALK_FLAGS)}, so that it checks every file of the corpus "
        "whatever a parent folder's .gitignore says (bench/.work/ and .venv/ are ignored); the corpora have no "
        ".gitignore of their own.",
        "TorchFix and Fixit check a copy of their files in a temporary folder outside any git work tree: "
        "Fixit skips every file a parent .gitignore lists, even when named on its command line.",
        "The warm row fills a fresh cache with one untimed run first; the --fix row times only the fix run on a "
        "fresh copy of the corpus.",
    ]


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = parse_arguments(argv)
    if arguments.dense:
        sys.path.insert(0, str(BENCH_DIR))
        import dense_bench

        sizes = [str(int(size)) for size in arguments.dense.split(",") if size.strip()]
        return dense_bench.main(["--lines", *sizes, "--repeat", str(arguments.repeat or 3)])

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    machine_cpu_before, own_cpu_before, started = busy_cpu_seconds(), own_cpu_seconds(), time.monotonic()
    work_dir = arguments.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    pinned = pin_to_cpus(arguments.jobs)
    amp_lint = resolve_amp_lint(arguments.amp_lint, arguments.python)
    if amp_lint.command is None:
        log(
            f"amp-lint is {'broken' if amp_lint.explicit else 'unavailable'}: {amp_lint.problem}; "
            "its rows are marked so"
        )

    corpora = load_corpora(arguments, amp_lint.python, work_dir, log)
    if not corpora:
        log("no corpus to benchmark")
        return 2

    peers = None if arguments.no_peers else ensure_peers(PEERS_VENV, log)
    options = Options(
        jobs=arguments.jobs,
        repeat_fast=arguments.repeat or (1 if arguments.self_test else 3),
        repeat_peers=arguments.repeat or 1,
        precommit_runs=2 if arguments.self_test else max(5, arguments.repeat or 0),
        peer_sample=arguments.peer_sample,
        seed=arguments.seed,
        timeout_s=arguments.timeout,
        work_dir=work_dir,
        rows=arguments.rows.split(","),
    )

    results: Dict[str, List[Row]] = {}
    prefiltered: Dict[str, Optional[int]] = {}
    for name, corpus in corpora.items():
        log(
            f"{name}: {len(corpus.files):,} files, {_megabytes(corpus.total_bytes)}, "
            f"{len(corpus.amp_files)} with autocast/GradScaler"
        )
        benchmark = CorpusBenchmark(corpus, amp_lint, peers, options, log)
        results[name] = benchmark.run()
        prefiltered[name] = benchmark.prefiltered_bytes

    versions = {"amp-lint": amp_lint.version if amp_lint.command else "unavailable"}
    libcst = run_quietly([amp_lint.python, "-c", "import importlib.metadata as m; print(m.version('libcst'))"])
    if libcst.returncode == 0:
        versions["libcst"] = libcst.stdout.strip()
    if peers:
        versions.update(peers.versions)
    notes = measurement_notes(options, pinned)
    if amp_lint.bytecode:
        notes.append(amp_lint.bytecode + ".")
    if machine_cpu_before is not None:
        others = (busy_cpu_seconds() - machine_cpu_before) - (own_cpu_seconds() - own_cpu_before)
        share = others / ((time.monotonic() - started) * (os.cpu_count() or 1))
        if share > 0.1:
            notes.insert(
                0,
                f"WARNING: other processes kept {share:.0%} of the machine's CPU time busy during this "
                "run, so these timings are inflated: rerun on a quiet machine before quoting them.",
            )

    print()
    for name, rows in results.items():
        corpus = corpora[name]
        print(f"{corpus.description or name}: {len(corpus.files):,} files, {_megabytes(corpus.total_bytes)}")
        print(text_table(rows))
        print()
    verdicts = {name: judge_targets(rows, corpora[name], prefiltered[name]) for name, rows in results.items()}
    print("Targets (stated for torch's package):")
    for line in targets_table(verdicts):
        print(f"  {line[0]}: " + "; ".join(f"{name}: {verdict}" for name, verdict in zip(verdicts, line[1:])))
    print()
    for note in notes:
        print(f"* {note}")

    output = arguments.output or (work_dir / "results.md" if arguments.self_test else DEFAULT_RESULTS)
    write_markdown(
        output,
        command_line="python bench/run.py "
        + " ".join(shlex.quote(arg) for arg in (argv if argv is not None else sys.argv[1:])),
        corpora=corpora,
        results=results,
        verdicts=verdicts,
        versions=versions,
        notes=notes,
    )
    sizes = arguments.scaling_sizes if arguments.scaling_sizes is not None else ("" if arguments.self_test else "200,2000")
    if sizes and amp_lint.command is not None:
        log("scaling: generated files of " + sizes.replace(",", ", ") + " training functions ...")
        scaling = scaling_lines(measure_scaling(amp_lint.command, work_dir, [int(size) for size in sizes.split(",")], arguments.timeout))
        print()
        for line in scaling:
            print(line)
        with open(output, "a", encoding="utf-8") as results_file:
            results_file.write("\n## " + scaling[0] + "\n\n" + "\n".join(scaling[2:]) + "\n")
    print(f"\nwrote {output}")

    errors = [
        f"{name}: {row.label}: {row.note}" for name, rows in results.items() for row in rows if row.status == "error"
    ]
    if arguments.self_test:
        if errors:
            print("self-test FAILED:\n  " + "\n  ".join(errors))
            return 1
        print("self-test passed" + ("" if amp_lint.command else " (amp-lint unavailable: its rows were not run)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
