#!/usr/bin/env python3
"""Latency and memory of `amp-lint server`, driven over stdio by a real LSP client (pygls's).

    python bench/lsp_latency.py                 # 30 edits of a 1,000-line training script, 50 files opened
    python bench/lsp_latency.py --edits 100 --files 50
    python bench/lsp_latency.py --self-test     # a few edits and files, for the test suite

Measured:
- the time from sending `textDocument/didChange` to receiving the `publishDiagnostics` of that version, on
  a generated 1,000-line training script (one line edited per change; the median and the 90th percentile
  over the edits), once with the server's default debounce and once with no debounce (the check alone);
- the server's resident memory (VmRSS) after it has opened and checked 50 such files.

Needs the lsp extra (`pip install 'amp-lint[lsp]'`). Run from the repository root (or with amp-lint installed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

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


def training_script(lines: int = 1000, seed: int = 0) -> str:
    """A training script of about `lines` lines (exactly, padded with constants), findings included."""
    parts = [HEADER, FINDINGS]
    n = seed * 1000
    while sum(part.count("\n") for part in parts) + TRAINING_FUNCTION.count("\n") < lines - 2:
        parts.append(TRAINING_FUNCTION.format(n=n))
        n += 1
    text = "".join(parts)
    index = 0
    while text.count("\n") < lines - 1:
        text += f"LEARNING_RATE_{index} = {index}e-4\n"
        index += 1
    return text + "EDITED = 0\n"


class Session:
    """A pygls client connected to `python -m amp_lint server`."""

    def __init__(self, folder: Path, debounce_ms=None) -> None:
        from lsprotocol import types
        from pygls.lsp.client import LanguageClient

        self.types = types
        self.folder = folder
        self.debounce_ms = debounce_ms
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
            waiter = self.waiters.pop((params.uri, params.version), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(now)

    async def start(self) -> None:
        types = self.types
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        await self.client.start_io(sys.executable, "-m", "amp_lint", "server", env=env)
        options = {} if self.debounce_ms is None else {"debounce": self.debounce_ms}
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                root_uri=self.folder.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=self.folder.as_uri(), name="bench")],
                initialization_options=options,
            )
        )
        self.client.initialized(types.InitializedParams())

    def expect(self, uri: str, version: int) -> "asyncio.Future":
        future = asyncio.get_running_loop().create_future()
        if version in self.published.get(uri, {}):
            future.set_result(self.published[uri][version])
        else:
            self.waiters[(uri, version)] = future
        return future

    async def open(self, path: Path, text: str) -> None:
        types = self.types
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        done = self.expect(uri, 1)
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        )
        await asyncio.wait_for(done, 120)

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
        received = await asyncio.wait_for(done, 120)
        return received - sent

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


async def latency(folder: Path, edits: int, debounce_ms) -> list:
    session = Session(folder, debounce_ms)
    await session.start()
    try:
        text = training_script(1000)
        path = folder / f"train_latency_{debounce_ms}.py"
        await session.open(path, text)
        last = text.rstrip("\n").split("\n")[-1]  # `EDITED = 0`, the line every edit rewrites
        line = text.count("\n") - 1
        times = []
        cpu_before = session.cpu_seconds()
        for version in range(2, edits + 2):
            new_line = f"EDITED = {version}"
            times.append(await session.edit(path.as_uri(), version, line, new_line, len(last)))
            last = new_line
            await asyncio.sleep(0.05)  # an editor's user pauses between edits
        return times, (session.cpu_seconds() - cpu_before) / edits
    finally:
        await session.stop()


async def memory(folder: Path, files: int) -> tuple:
    session = Session(folder)
    await session.start()
    try:
        start_rss = session.rss_mib()
        for index in range(files):
            await session.open(folder / f"train_{index:03d}.py", training_script(1000, seed=index))
        return start_rss, session.rss_mib()
    finally:
        await session.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edits", type=int, default=30)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--self-test", action="store_true", help="3 edits, 3 files: that it all runs")
    args = parser.parse_args(argv)
    if args.self_test:
        args.edits, args.files = 3, 3
    try:
        import pygls  # noqa: F401
    except ImportError:
        print("bench/lsp_latency.py needs the lsp extra: pip install 'amp-lint[lsp]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="amp-lint-lsp-bench-") as name:
        folder = Path(name)
        if hasattr(os, "getloadavg"):
            print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"1,000-line training script, {args.edits} edits (one line each), didChange -> publishDiagnostics:")
        for debounce_ms, label in ((None, "default debounce (150 ms)"), (0, "no debounce (the check alone)")):
            times, cpu = asyncio.run(latency(folder, args.edits, debounce_ms))
            ms = sorted(t * 1000 for t in times)
            p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
            print(
                f"  {label:32s} median {statistics.median(ms):7.1f} ms   p90 {p90:7.1f} ms   max {ms[-1]:7.1f} ms"
                f"   server CPU per edit {cpu * 1000:6.1f} ms"
            )
        start_rss, rss = asyncio.run(memory(folder, args.files))
        print(f"server RSS: {start_rss:.0f} MiB after start, {rss:.0f} MiB after opening {args.files} files of 1,000 lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
