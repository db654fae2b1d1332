#!/usr/bin/env python3
"""How soon `amp-lint server` shows a document's first diagnostics, from the editor's side (issue 44, item 17;
issue 43: first diagnostics after `didOpen` <= 1.5 s on real trainers).

    python bench/lsp_first_result.py                      # the 18-line script and the five real trainers, 5 runs each
    python bench/lsp_first_result.py --runs 9 --busy      # the same with one core kept busy by a spinning process
    python bench/lsp_first_result.py --code ../main       # another checkout's server (before/after side by side)
    python bench/lsp_latency.py --first-result            # the same, from the latency benchmark

Each run spawns a fresh server and talks JSON-RPC over its stdio with the standard library alone (no client
library to load or to wait for), as an editor does: `initialize`, and at its answer `initialized` and the
`didOpen` of the document at once. Measured: spawn -> `initialize` answered, spawn -> the first
`publishDiagnostics` of the document, and `didOpen` -> that publish (the figure issue 43 names), median and
fastest over `--runs`, and the server's CPU time when that publish arrives (what a loaded machine changes least); the first publish's diagnostics are checked to be the final ones (the server's last
publish of version 1 once it is idle), so that a fast answer is never a partial one.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

# The 18-line file of issue 44, item 17 (deprecated AMP spellings: a few findings).
SMALL = """\
import torch


def train(model, loader, opt):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        with torch.cuda.amp.autocast():
            loss = model(x).sum()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()


if __name__ == "__main__":
    pass
"""


def server_command(code: Optional[Path]) -> List[str]:
    """The server of this checkout, or of another one (`--code`: a checkout or an export of one)."""
    root = (code or REPO_ROOT).resolve()
    start = f"import sys, runpy; sys.path.insert(0, {str(root)!r}); sys.argv = ['amp-lint', 'server']; runpy.run_module('amp_lint', run_name='__main__')"
    return [sys.executable, "-c", start]


def server_env() -> Dict[str, str]:
    """The servers' environment: bytecode cached as an installed package has it. (Where writing it is turned off,
    `PYTHONDONTWRITEBYTECODE`, every start compiled amp-lint's 150 modules again: a second of CPU no user pays.
    It is then kept under `PYCACHE`, outside the checkouts.)"""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


PYCACHE = Path.home() / ".cache" / "amp-lint-bench" / "pycache"


class Wire:
    """A server process and its JSON-RPC stream."""

    def __init__(self, command: List[str], folder: Path) -> None:
        env = server_env()
        self.spawned = time.perf_counter()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=folder, env=env)
        self.buffer = b""

    def send(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def read(self, timeout: float = 120.0) -> Optional[dict]:
        """The next message, or None when none comes within `timeout` seconds."""
        deadline = time.perf_counter() + timeout
        fd = self.process.stdout.fileno()
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                header = self.buffer[:end].decode("ascii").split("\r\n")
                length = int(next(h for h in header if h.lower().startswith("content-length")).split(":")[1])
                if len(self.buffer) >= end + 4 + length:
                    body = self.buffer[end + 4 : end + 4 + length]
                    self.buffer = self.buffer[end + 4 + length :]
                    return json.loads(body)
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk

    def cpu_seconds(self) -> float:
        """The server's user + system CPU time so far (what the machine's other load changes least)."""
        with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        try:
            self.send({"jsonrpc": "2.0", "id": 99, "method": "shutdown"})
            while True:
                message = self.read(30)
                if message is None or message.get("id") == 99:
                    break
            self.send({"jsonrpc": "2.0", "method": "exit"})
            self.process.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def first_result(command: List[str], folder: Path, text: str, name: str = "opened.py") -> Dict[str, object]:
    """One fresh server: seconds from spawn to `initialize` answered and to the first diagnostics; the first
    and the last publish of the document (version 1)."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    wire = Wire(command, folder)
    try:
        wire.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "rootUri": folder.as_uri(), "capabilities": {}}})
        while (wire.read() or {"id": 1}).get("id") != 1:
            pass
        initialized = time.perf_counter()
        wire.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        opened = time.perf_counter()  # (before the send: a big document fills the pipe until the server reads)
        wire.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
        publishes = []
        while True:
            message = wire.read(3.0 if publishes else 120.0)  # after the first: until the server is quiet
            if message is None:
                break
            if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri:
                publishes.append((time.perf_counter(), message["params"]["diagnostics"]))
                if len(publishes) == 1:
                    cpu = wire.cpu_seconds()
        if not publishes:
            raise RuntimeError(f"no diagnostics for {name}")
        first_time, first = publishes[0]
        return {
            "initialize": initialized - wire.spawned,
            "first": first_time - wire.spawned,
            "after_open": first_time - opened,
            "cpu": cpu,
            "diagnostics": len(first),
            "final": first == publishes[-1][1],
            "publishes": len(publishes),
        }
    finally:
        wire.stop()


def cases(paths: Optional[List[Path]] = None) -> List[tuple]:
    """(label, text): the 18-line script, then the real trainers that are there."""
    import lsp_trainers

    found = [("18-line script", SMALL)]
    for path in paths if paths is not None else lsp_trainers.trainer_paths():
        if path.is_file():
            found.append(("/".join(path.parts[-2:]), path.read_text(encoding="utf-8")))
        else:
            print(f"{path}: not found (python -c 'import inject_corpus; inject_corpus.ensure()' in bench/), skipped")
    return found


class BusyCore:
    """A process that keeps one core busy while it lives (`--busy`: the editor's machine compiling)."""

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *_):
        self.process.kill()
        self.process.wait()


def run(runs: int = 5, servers: Optional[Dict[str, List[str]]] = None, paths: Optional[List[Path]] = None, busy: bool = False) -> Dict[tuple, List[dict]]:
    """Every case, every server, `runs` times (the servers alternating); prints as it goes."""
    servers = servers or {"this checkout": server_command(None)}
    results: Dict[tuple, List[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="amp-lint-first-result-") as name, (BusyCore() if busy else _Nothing()):
        folder = Path(name)
        for command in servers.values():  # unmeasured: the bytecode written, the file cache warm
            first_result(command, folder, SMALL)
        for label, text in cases(paths):
            for _ in range(runs):
                for server, command in servers.items():
                    results.setdefault((label, server), []).append(first_result(command, folder, text))
            for server in servers:
                print(_line(label, server, results[(label, server)]), flush=True)
    return results


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *_):
        return None


def _line(label: str, server: str, found: List[dict]) -> str:
    ms = {key: sorted(r[key] * 1000 for r in found) for key in ("initialize", "first", "after_open", "cpu")}
    partial = sum(not r["final"] for r in found)
    return (
        f"{label:42s} {server:14s} initialize {statistics.median(ms['initialize']):6.0f} ms   spawn -> first diagnostics "
        f"median {statistics.median(ms['first']):6.0f} ms (fastest {ms['first'][0]:6.0f})   didOpen -> first "
        f"median {statistics.median(ms['after_open']):6.0f} ms   server CPU by then {statistics.median(ms['cpu']):5.0f} ms   "
        f"{found[0]['diagnostics']} diagnostics"
        + (f"   {partial} runs' first publish was not the final one" if partial else "")
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", action="store_true", help="keep one core busy with a spinning process meanwhile")
    parser.add_argument("--code", type=Path, action="append", default=[], help="also run this checkout's server (side by side)")
    parser.add_argument("files", nargs="*", type=Path, help="trainers to open (default: lsp_trainers.TRAINERS)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(BENCH_DIR))
    servers = {"this checkout": server_command(None)}
    for code in args.code:
        servers[code.name or str(code)] = server_command(code)
    if hasattr(os, "getloadavg"):
        print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores" + (", one core kept busy" if args.busy else ""))
    run(args.runs, servers, args.files or None, args.busy)
    if hasattr(os, "getloadavg"):
        print(f"load average after the run: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
