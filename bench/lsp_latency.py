#!/usr/bin/env python3
"""Latency, memory and start-up of `amp-lint server`, side by side with `ruff server`, driven over stdio by a
real LSP client (pygls's), in one run.

    python bench/lsp_latency.py                  # 300- and 3,000-line training scripts, 20 edits each, 200-edit memory
    python bench/lsp_latency.py --shapes class   # only the training code as the methods of one class
    python bench/lsp_latency.py --edits 50 --memory-edits 200
    python bench/lsp_latency.py --self-test      # a few edits, for the test suite
    python bench/lsp_latency.py --trainers       # the training step of five real trainers, and a dense file
    python bench/lsp_latency.py --first-result   # spawn -> first diagnostics: the 18-line script, the five trainers

Measured, per server:
- `initialize`: from spawning the server to its answer (a fresh process each time, the interpreter's start
  included: what an editor waits), with the floor beside it: `python -c pass` and `python -I -S -c pass` of the
  server's own interpreter;
- opening a 3,000-line file: `didOpen` to its first `publishDiagnostics`;
- edit -> diagnostics: from an incremental `didChange` (one line) to the `publishDiagnostics` of that version,
  debounce included, median and 90th percentile, on a 300-line and a 3,000-line training script, its training
  code as top-level functions or as the methods of one class; edits of two kinds: a module-level constant
  (outside the training code) and a line inside a training function or method;
- resident memory (VmRSS) after `--memory-edits` edits of the 3,000-line file;
- after opening the 3,000-line file, the time until the server is idle (amp-lint verifies the file's groups,
  `amp_lint.engine.units`, before an edit inside a function checks that function alone);
- the server's CPU time per edit (what a loaded machine changes least), and `python -c pass` for reference.

Needs the lsp extra (`pip install 'amp-lint[lsp]'`) and `ruff` on PATH (the test extra has it; skipped if not).
On a loaded machine compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_cases import REAL_FILES, REAL_SRC, called_method_line, interpreter_floor, python_of, wheel_venv  # noqa: E402

HEADER = textwrap.dedent(
    """\
    import argparse
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.linear = nn.Linear(width, width)

        def forward(self, x):
            return x + F.gelu(self.linear(self.norm(x)))

    """
)

TRAINING_FUNCTION = textwrap.dedent(
    """\

    def train_{n}(model, loader, optimizer, scheduler, epochs={n}):
        \"\"\"Train variant {n}: mixed precision with a gradient scaler and clipping.\"\"\"
        scaler = torch.amp.GradScaler("cuda")
        model.train()
        for epoch in range(epochs):
            total = 0.0
            for step, (inputs, targets) in enumerate(loader):
                inputs, targets = inputs.cuda(), targets.cuda()
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.float16):
                    outputs = model(inputs)
                    loss = F.cross_entropy(outputs, targets)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                total += loss.item()
            print(f"epoch {{epoch}}: loss {{total / max(len(loader), 1):.4f}}")
        return model


    def evaluate_{n}(model, loader):
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            for inputs, targets in loader:
                outputs = model(inputs.cuda())
                correct += (outputs.argmax(-1) == targets.cuda()).sum().item()
        return correct / max(len(loader.dataset), 1)

    """
)

# Two findings, so that every check has something to publish: a deprecated scaler, an unscaled backward.
FINDINGS = textwrap.dedent(
    """\

    def legacy_step(model, batch, optimizer):
        scaler = torch.cuda.amp.GradScaler()
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss)
        loss.backward()
        scaler.step(optimizer)
        scaler.update()

    """
)


# The same training code as the methods of one class (issue 31: "a 3,000-line file whose training code is
# methods of one big class"): the state (model, optimizer, scaler) is set in `__init__` and read by every method.
TRAINER_HEADER = textwrap.dedent(
    """\

    class Trainer:
        \"\"\"Mixed-precision training and evaluation, one method per variant.\"\"\"

        def __init__(self, model, loader, optimizer, scheduler):
            self.model = model
            self.loader = loader
            self.optimizer = optimizer
            self.scheduler = scheduler
            self.scaler = torch.amp.GradScaler("cuda")

        def legacy_step(self, batch):
            scaler = torch.cuda.amp.GradScaler()
            with torch.autocast("cuda"):
                loss = self.model(batch).mean()
            scaler.scale(loss)
            loss.backward()
            scaler.step(self.optimizer)
            scaler.update()
    """
)

TRAINING_METHOD = textwrap.indent(
    textwrap.dedent(
        """\

        def train_{n}(self, epochs={n}):
            \"\"\"Train variant {n}: mixed precision with a gradient scaler and clipping.\"\"\"
            self.model.train()
            for epoch in range(epochs):
                total = 0.0
                for step, (inputs, targets) in enumerate(self.loader):
                    inputs, targets = inputs.cuda(), targets.cuda()
                    self.optimizer.zero_grad(set_to_none=True)
                    with torch.autocast("cuda", dtype=torch.float16):
                        outputs = self.model(inputs)
                        loss = F.cross_entropy(outputs, targets)
                    self.scaler.scale(loss).backward()
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    self.scheduler.step()
                    total += loss.item()
                print(f"epoch {{epoch}}: loss {{total / max(len(self.loader), 1):.4f}}")
            return self.model

        def evaluate_{n}(self, loader):
            self.model.eval()
            correct = 0
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                for inputs, targets in loader:
                    outputs = self.model(inputs.cuda())
                    correct += (outputs.argmax(-1) == targets.cuda()).sum().item()
            return correct / max(len(loader.dataset), 1)
        """
    ),
    "    ",
)

SHAPES = ("functions", "class")


def training_script(lines: int = 1000, seed: int = 0, shape: str = "functions") -> str:
    """A training script of about `lines` lines (exactly, padded with constants), findings included: its
    training code as top-level functions, or (`shape="class"`) as the methods of one class."""
    parts = [HEADER, FINDINGS] if shape == "functions" else [HEADER, TRAINER_HEADER]
    unit = TRAINING_FUNCTION if shape == "functions" else TRAINING_METHOD
    n = seed * 1000
    while sum(part.count("\n") for part in parts) + unit.count("\n") < lines - 2:
        parts.append(unit.format(n=n))
        n += 1
    if shape == "class":
        parts.append("\n\n")
    text = "".join(parts)
    index = 0
    while text.count("\n") < lines - 1:
        text += f"LEARNING_RATE_{index} = {index}e-4\n"
        index += 1
    return text + "EDITED = 0\n"


class Session:
    """A pygls client connected to `python -m amp_lint server`."""

    def __init__(self, folder: Path, debounce_ms=None, command=None) -> None:
        from lsprotocol import types
        from pygls.lsp.client import LanguageClient

        self.types = types
        self.folder = folder
        self.debounce_ms = debounce_ms
        self.command = command or [sys.executable, "-m", "amp_lint", "server"]
        self.initialize_seconds = float("nan")
        self.client = LanguageClient("amp-lint-bench", "1")
        self.published = {}  # uri -> {version: monotonic time}
        self.waiters = {}
        self.logs = []

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def log(params):
            self.logs.append(params.message)

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def publish(params):
            now = time.perf_counter()
            self.published.setdefault(params.uri, {})[params.version] = now
            # A server that does not echo the version: the first publish after the change is its answer.
            for key in [k for k in self.waiters if k[0] == params.uri and (params.version is None or k[1] == params.version)]:
                waiter = self.waiters.pop(key)
                if not waiter.done():
                    waiter.set_result(now)

    async def start(self) -> None:
        types = self.types
        from lsp_first_result import server_env

        env = server_env()  # bytecode cached, as an installed package has it
        if self.command[:3] == [sys.executable, "-m", "amp_lint"]:  # this checkout's code (not an installed one)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        spawned = time.perf_counter()  # what an editor waits: the process start and the interpreter's, too
        await self.client.start_io(*self.command, env=env)
        # Answers are kept as plain JSON: lsprotocol cannot structure every server's capabilities (Ruff's
        # notebook selector), and the bench reads none of them.
        self.client.protocol.get_result_type = lambda method: None
        options = {} if self.debounce_ms is None else {"debounce": self.debounce_ms}
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                root_uri=self.folder.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=self.folder.as_uri(), name="bench")],
                initialization_options=options,
            )
        )
        self.initialize_seconds = time.perf_counter() - spawned
        self.initialize_cpu = self.cpu_seconds()  # since the process started (it was just spawned)
        self.client.initialized(types.InitializedParams())

    def expect(self, uri: str, version: int) -> "asyncio.Future":
        future = asyncio.get_running_loop().create_future()
        if version in self.published.get(uri, {}) and version is not None:
            future.set_result(self.published[uri][version])
        else:
            self.waiters[(uri, version)] = future
        return future

    async def open(self, path: Path, text: str) -> float:
        """Open a document; the seconds until its first diagnostics."""
        types = self.types
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        done = self.expect(uri, 1)
        sent = time.perf_counter()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        )
        return await asyncio.wait_for(done, 600) - sent

    async def edit(self, uri: str, version: int, line: int, new_line: str, old_length: int) -> float:
        """Replace line `line` (0-based); the seconds until its diagnostics arrive."""
        types = self.types
        done = self.expect(uri, version)
        change = types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, 0), types.Position(line, old_length)), text=new_line
        )
        sent = time.perf_counter()
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(uri=uri, version=version), [change])
        )
        received = await asyncio.wait_for(done, 600)
        return received - sent

    async def idle(self, quiet: float = 0.5, limit: float = 120.0) -> float:
        """Seconds until the server's CPU time stops growing for `quiet` seconds (its work after the first
        diagnostics, such as verifying a document's groups, done)."""
        started = time.perf_counter()
        last = self.cpu_seconds()
        while time.perf_counter() - started < limit:
            await asyncio.sleep(quiet)
            now = self.cpu_seconds()
            if now - last < 0.02:
                return time.perf_counter() - started - quiet
            last = now
        return time.perf_counter() - started

    def cpu_seconds(self) -> float:
        """The server's user + system CPU time so far (a measure the machine's other load hardly changes)."""
        with open(f"/proc/{self.client._server.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        pid = self.client._server.pid
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await asyncio.wait_for(self.client._server.wait(), 30)
        await self.client.stop()


SERVERS = {
    "amp-lint": [sys.executable, "-m", "amp_lint", "server"],
    "ruff": ["ruff", "server"],
}


async def initialize_times(command, folder: Path, runs: int) -> list:
    """`initialize` from spawn to answer, `runs` fresh processes (seconds, and the server's CPU seconds)."""
    found = []
    for _ in range(runs):
        session = Session(folder, None, command)
        await session.start()
        found.append((session.initialize_seconds, session.initialize_cpu))
        await session.stop()
    return found


def _inside_line(text: str) -> int:
    """A line inside a training function (its `total += loss.item()`), 0-based."""
    lines = text.split("\n")
    middle = len(lines) // 2
    return next(i for i in range(middle, len(lines)) if lines[i].strip() == "total += loss.item()")


async def real_edits_of(folder: Path, command, path: Path, edits: int, pause: float):
    """A real file: open it, let the server settle, type `_edited = 0` inside the method the class calls most
    (`called_method_line`), then change its number `edits` times: the times (s) from each change to its
    diagnostics, the server's CPU seconds per edit, the method's name."""
    text = path.read_text(encoding="utf-8")
    line, indent, name = called_method_line(text)
    session = Session(folder, None, command)
    await session.start()
    try:
        copy = folder / f"{path.stem}_{command[0].rsplit('/', 1)[-1]}.py"
        await session.open(copy, text)
        await session.idle()
        uri = copy.as_uri()
        typed = f"{indent}_edited = 0"
        await session.edit(uri, 2, line, typed + "\n", 0)  # a line typed: the method's summary changes once
        await session.idle()
        last = typed
        times = []
        cpu_before = session.cpu_seconds()
        for version in range(3, edits + 3):
            new_line = f"{indent}_edited = {version}"
            times.append(await session.edit(uri, version, line, new_line, len(last)))
            last = new_line
            await asyncio.sleep(pause)
        return times, (session.cpu_seconds() - cpu_before) / edits, name
    finally:
        await session.stop()


async def edits_of(folder: Path, command, lines: int, edits: int, pause: float, where: str, debounce_ms=None, shape: str = "functions"):
    """Times (s) from each change to its diagnostics, the server's CPU seconds per edit, RSS (MiB) after,
    `initialize` and open times (s)."""
    session = Session(folder, debounce_ms, command)
    await session.start()
    try:
        text = training_script(lines, shape=shape)
        path = folder / f"train_{lines}_{shape}_{where}_{command[0].rsplit('/', 1)[-1]}.py"
        opened = await session.open(path, text)
        settled = await session.idle()  # the reader looks at the file before typing: the server may settle
        rows = text.split("\n")
        line = len(rows) - 2 if where == "outside" else _inside_line(text)
        last = rows[line]
        indent = last[: len(last) - len(last.lstrip())]
        times = []
        cpu_before = session.cpu_seconds()
        for version in range(2, edits + 2):
            new_line = f"EDITED = {version}" if where == "outside" else f"{indent}total += loss.item() * {version}"
            times.append(await session.edit(path.as_uri(), version, line, new_line, len(last)))
            last = new_line
            await asyncio.sleep(pause)  # an editor's user pauses between edits
        return times, (session.cpu_seconds() - cpu_before) / edits, session.rss_mib(), (session.initialize_seconds, session.initialize_cpu), (opened, settled)
    finally:
        await session.stop()


def _summary(times) -> str:
    ms = sorted(t * 1000 for t in times)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):8.1f} ms  p90 {p90:8.1f} ms"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--memory-edits", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between edits")
    parser.add_argument("--self-test", action="store_true", help="3 edits each: that it all runs")
    parser.add_argument("--lines", nargs="+", type=int, default=[300, 3000], help="sizes of the training scripts")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES), help="training code as functions, or as one class's methods")
    parser.add_argument(
        "--server-python",
        help="run amp-lint server with this interpreter (a venv where amp-lint is installed, e.g. from its wheel), not this checkout",
    )
    parser.add_argument(
        "--wheel-venv",
        metavar="DIR",
        help="build this checkout's wheel, install it with pygls in a fresh venv in DIR, and run the server from it",
    )
    parser.add_argument(
        "--real",
        nargs="*",
        default=[],
        metavar="FILE",
        help=f"real class-based trainers (default, with no FILE: {', '.join(REAL_FILES)} under {REAL_SRC}); edits inside the method the class calls most",
    )
    parser.add_argument("--no-synthetic", action="store_true", help="skip the generated 300- and 3,000-line scripts")
    parser.add_argument(
        "--trainers",
        action="store_true",
        help="only the edits of the training step (`scaler.step` and the scaled backward lines) of five real "
        "trainers and the dense 3,000-line file (bench/lsp_trainers.py), --edits of each kind",
    )
    parser.add_argument("--initialize-only", type=int, metavar="N", help="only `initialize`, N fresh processes per server")
    parser.add_argument(
        "--first-result",
        action="store_true",
        help="only spawn -> first diagnostics (bench/lsp_first_result.py) of the 18-line script and the five trainers "
        "(--trainers runs it too), --edits runs each (at most 5), --busy: with one core kept busy",
    )
    parser.add_argument("--busy", action="store_true", help="with --first-result: one core kept busy meanwhile")
    args = parser.parse_args(argv)
    if args.wheel_venv:
        SERVERS["amp-lint"] = [str(wheel_venv(Path(args.wheel_venv).resolve())), "server"]
    elif args.server_python:
        SERVERS["amp-lint"] = [args.server_python, "-m", "amp_lint", "server"]
    print(f"amp-lint server: {' '.join(SERVERS['amp-lint'])}")
    if args.self_test:
        args.edits, args.memory_edits, args.real = 3, 3, None
    try:
        import pygls  # noqa: F401
    except ImportError:
        print("bench/lsp_latency.py needs the lsp extra: pip install 'amp-lint[lsp]'", file=sys.stderr)
        return 2
    servers = {name: command for name, command in SERVERS.items() if shutil.which(command[0])}
    if "ruff" not in servers:
        print("ruff is not on PATH: amp-lint server alone")
    if hasattr(os, "getloadavg"):
        print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results = {}
    python = python_of(SERVERS["amp-lint"])
    if args.initialize_only:
        return _initialize_only(servers, python, args.initialize_only)
    if args.first_result or args.trainers:
        import lsp_first_result

        print("spawn -> first diagnostics (a fresh server each run; bench/lsp_first_result.py):")
        lsp_first_result.run(min(args.edits, 5), busy=args.busy)
        if not args.trainers:
            return 0
    if args.trainers:
        import lsp_trainers

        return lsp_trainers.main(["--edits", str(min(args.edits, 5))])
    with tempfile.TemporaryDirectory(prefix="amp-lint-lsp-bench-") as name:
        folder = Path(name)
        for lines in args.lines if not args.no_synthetic else ():
            for shape in args.shapes:
                for where in ("outside", "inside"):
                    print(f"{lines:,}-line training script ({shape}), {args.edits} edits {where} the training code, didChange -> publishDiagnostics:")
                    for server, command in servers.items():
                        times, cpu, _, initialize, opened = asyncio.run(edits_of(folder, command, lines, args.edits, args.pause, where, shape=shape))
                        results[(server, lines, shape, where)] = statistics.median(times)
                        results[(server, "cpu", lines, shape, where)] = cpu
                        for index, key in enumerate(("initialize", "initialize CPU")):
                            results[(server, key)] = min(results.get((server, key), initialize[index]), initialize[index])
                        if lines == 3000:
                            results[(server, "open", shape)], results[(server, "settled", shape)] = opened
                        print(f"  {server:9s} {_summary(times)}   server CPU per edit {cpu * 1000:7.1f} ms")
        if args.real is not None:
            real = [Path(p) for p in args.real] or [REAL_SRC / name for name in REAL_FILES]
            for path in real:
                if not path.is_file():
                    print(f"{path}: not found (run /work/shared/realworld.sh), skipped")
                    continue
                label = "/".join(path.parts[-2:])
                print(f"{label} ({path.read_text(encoding='utf-8').count(chr(10)):,} lines), {args.edits} edits inside its most-called method:")
                for server, command in servers.items():
                    times, cpu, name = asyncio.run(real_edits_of(folder, command, path, args.edits, args.pause))
                    results[(server, "real", label)] = statistics.median(times)
                    results[(server, "real cpu", label)] = cpu
                    print(f"  {server:9s} `{name}`: {_summary(times)}   server CPU per edit {cpu * 1000:7.1f} ms")
        print(f"memory after {args.memory_edits} edits of the 3,000-line script (outside the training code):")
        for server, command in servers.items() if args.memory_edits else ():
            _, _, rss, _, _ = asyncio.run(edits_of(folder, command, 3000, args.memory_edits, 0.0, "outside"))
            results[(server, "rss")] = rss
            print(f"  {server:9s} {rss:7.1f} MiB")
    # The floor under amp-lint's `initialize`: the interpreter's own start (a loaded machine inflates both).
    for label, seconds in interpreter_floor(python).items():
        results[("amp-lint", label)] = seconds
    print("summary (amp-lint / ruff):")
    rows = [("initialize", "initialize answered", "ms"), ("initialize CPU", "server CPU until initialize answered", "ms")]
    for shape in args.shapes:
        rows += [
            (("open", shape), f"open a 3,000-line file ({shape})", "ms"),
            (("settled", shape), "then busy until idle (group verification)", "ms"),
        ]
        for lines in args.lines:
            for where in ("outside", "inside"):
                rows.append(((lines, shape, where), f"edit -> diagnostics, {lines:,} lines, {shape}, {where}", "ms"))
        for lines in args.lines:
            rows.append((("cpu", lines, shape, "inside"), f"server CPU per edit, {lines:,} lines, {shape}, inside", "ms"))
    for key in sorted({k[2] for k in results if k[1] == "real"}):
        rows.append((("real", key), f"edit -> diagnostics, {key}", "ms"))
        rows.append((("real cpu", key), f"server CPU per edit, {key}", "ms"))
    rows += [
        ("rss", "memory after the edits", "MiB"),
        ("python", "python -c pass (the server's interpreter, wall)", "ms"),
        ("python bare", "python -I -S -c pass (no site, wall)", "ms"),
    ]
    for key, label, unit in rows:
        parts = key if isinstance(key, tuple) else (key,)
        ours = results.get(("amp-lint", *parts))
        theirs = results.get(("ruff", *parts))
        scale = 1 if unit == "MiB" else 1000
        if ours is None:
            continue
        shown = f"  {label:52s} {ours * scale:9.1f} {unit}"
        if theirs is not None:
            ratio = f"{ours / theirs:7.1f}x" if theirs else "      -"
            shown += f"   ruff {theirs * scale:8.1f} {unit}   ratio {ratio}"
        print(shown)
    _print_load()
    return 0


def _print_load() -> None:
    if os.path.exists("/proc/loadavg"):
        with open("/proc/loadavg", encoding="ascii") as load:
            print(f"load average (1, 5, 15 min) after the run: {' '.join(load.read().split()[:3])}")


def _initialize_only(servers, python: str, runs: int) -> int:
    with tempfile.TemporaryDirectory(prefix="amp-lint-lsp-bench-") as name:
        for server, command in servers.items():
            found = asyncio.run(initialize_times(command, Path(name), runs))
            walls = sorted(wall * 1000 for wall, _ in found)
            cpu = min(cpu for _, cpu in found) * 1000
            print(
                f"  {server:9s} initialize answered, from spawn: fastest {walls[0]:6.1f} ms  median "
                f"{statistics.median(walls):6.1f} ms   server CPU until then {cpu:5.1f} ms"
            )
    for label, seconds in interpreter_floor(python).items():
        flags = "-c pass" if label == "python" else "-I -S -c pass"
        print(f"  {python} {flags}: fastest {seconds * 1000:6.1f} ms")
    _print_load()
    return 0


if __name__ == "__main__":
    sys.exit(main())
