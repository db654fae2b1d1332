"""Issue 44, item 17: the language server publishes the first document's diagnostics before pygls is loaded
(`amp_lint.server.early`), the same diagnostics the full server publishes, and the session then goes on as
before: nothing answered twice, nothing lost, no stale publish after a newer one."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

TRAINING = """\
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
"""

# pygls cannot be imported until the file named in $GATE exists: the server is held at the point where it asks.
HELD_PYGLS = """
import os, sys, time
class Gate:
    def find_spec(self, name, path=None, target=None):
        if name == 'pygls' and not os.path.exists(os.environ['GATE_ASKED']):
            open(os.environ['GATE_ASKED'], 'w').close()
        if name == 'pygls':
            deadline = time.time() + 60
            while not os.path.exists(os.environ['GATE']) and time.time() < deadline:
                time.sleep(0.02)
        return None
sys.meta_path.insert(0, Gate())
sys.argv = ['amp-lint', 'server']
from amp_lint.__main__ import run
run()
"""


class Client:
    def __init__(self, folder: Path, held: bool = True) -> None:
        self.gate = folder / "gate"
        self.asked = folder / "asked"
        env = {**ENV, "GATE": str(self.gate), "GATE_ASKED": str(self.asked)}
        command = [sys.executable, "-c", HELD_PYGLS] if held else [sys.executable, "-m", "amp_lint", "server"]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=folder)
        self.buffer = b""
        self.seen = []

    def send(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def read(self, timeout: float):
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                header = self.buffer[:end].decode("ascii").split("\r\n")
                length = int(next(h for h in header if h.lower().startswith("content-length")).split(":")[1])
                if len(self.buffer) >= end + 4 + length:
                    message = json.loads(self.buffer[end + 4 : end + 4 + length])
                    self.buffer = self.buffer[end + 4 + length :]
                    self.seen.append(message)
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk

    def wait_for(self, test, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.read(deadline - time.monotonic())
            if message is not None and test(message):
                return message
        return None

    def request(self, msg_id: int, method: str, params) -> dict:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        answer = self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m)
        assert answer is not None, f"no answer to {method}"
        return answer

    def publishes(self, uri: str):
        return [m["params"] for m in self.seen if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri]

    def close(self) -> None:
        self.gate.touch()
        if self.process.poll() is None:
            try:
                self.send({"jsonrpc": "2.0", "id": 999, "method": "shutdown"})
                self.wait_for(lambda m: m.get("id") == 999, 30)
                self.send({"jsonrpc": "2.0", "method": "exit"})
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def _start(client: Client, folder: Path, options=None) -> None:
    params = {"processId": None, "rootUri": folder.as_uri(), "capabilities": {}}
    if options is not None:
        params["initializationOptions"] = options
    answer = client.request(1, "initialize", params)
    assert "capabilities" in answer["result"]
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})


def _open(client: Client, uri: str, text: str, version: int = 1) -> None:
    client.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}}})


def _is_publish(uri: str):
    return lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri


def test_the_first_diagnostics_come_before_pygls_is_loaded_and_equal_the_full_servers(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAINING, encoding="utf-8")
    uri = path.as_uri()
    client = Client(tmp_path)
    try:
        _start(client, tmp_path)
        _open(client, uri, TRAINING)
        first = client.wait_for(_is_publish(uri), 40)
        # pygls is held until the gate opens: diagnostics before it are the early ones.
        assert first is not None, "no diagnostics before pygls was loaded"
        assert not client.gate.exists()
        codes = sorted(d["code"] for d in first["params"]["diagnostics"])
        assert codes and all(code.startswith("AMP") for code in codes) and first["params"]["version"] == 1
        client.gate.touch()
        # The session goes on in pygls: a hover on a finding, its code actions.
        diagnostic = first["params"]["diagnostics"][0]
        hover = client.request(2, "textDocument/hover", {"textDocument": {"uri": uri}, "position": diagnostic["range"]["start"]})
        assert diagnostic["code"] in hover["result"]["contents"]["value"]
        actions = client.request(3, "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": diagnostic["range"], "context": {"diagnostics": [diagnostic]}})
        assert actions["result"], "no code action for the early diagnostic"
        assert len(client.publishes(uri)) == 1  # kept as the server's result: not published again
        # The full server's diagnostics of the same text: closed, then opened again (checked by pygls's server).
        client.send({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
        client.wait_for(lambda m: _is_publish(uri)(m) and not m["params"]["diagnostics"])
        _open(client, uri, TRAINING)
        again = client.wait_for(lambda m: _is_publish(uri)(m) and m["params"]["diagnostics"])
        assert again is not None
        assert again["params"] == first["params"]
        # An edit: checked, published once for its version.
        fixed = TRAINING.replace("torch.cuda.amp.GradScaler()", "torch.amp.GradScaler('cuda')")
        client.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]}})
        edited = client.wait_for(lambda m: _is_publish(uri)(m) and m["params"].get("version") == 2)
        assert edited is not None
        assert len(edited["params"]["diagnostics"]) == len(first["params"]["diagnostics"]) - 1
    finally:
        client.close()
    assert sum(m.get("id") == 1 for m in client.seen) == 1  # `initialize` answered once


def test_requests_and_changes_that_come_before_pygls_are_all_answered_and_nothing_stale_is_published(tmp_path):
    """A change right behind the `didOpen` (read while the first check ran): the first result is not published
    (stale at once), and the change's is; a request sent before pygls is up is answered."""
    path = tmp_path / "train.py"
    path.write_text(TRAINING, encoding="utf-8")
    uri = path.as_uri()
    client = Client(tmp_path)
    try:
        _start(client, tmp_path)
        _open(client, uri, TRAINING)
        fixed = TRAINING.replace("torch.cuda.amp.GradScaler()", "torch.amp.GradScaler('cuda')")
        client.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]}})
        client.send({"jsonrpc": "2.0", "id": 7, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}})
        deadline = time.monotonic() + 40
        while not client.asked.exists() and time.monotonic() < deadline:  # the early phase is over
            time.sleep(0.05)
        assert client.asked.exists()
        client.gate.touch()
        answered = client.wait_for(lambda m: m.get("id") == 7)
        assert answered is not None and "error" not in answered
        latest = client.wait_for(lambda m: _is_publish(uri)(m) and m["params"].get("version") == 2)
        assert latest is not None
        client.read(1.0)  # anything that might still come
        versions = [p.get("version") for p in client.publishes(uri)]
        assert versions[-1] == 2 and 1 not in versions[versions.index(2):], versions
    finally:
        client.close()


def test_initialization_options_are_honoured_before_pygls(tmp_path):
    """The early check uses the editor's options (`ignore`) as pygls's server does."""
    path = tmp_path / "train.py"
    path.write_text(TRAINING, encoding="utf-8")
    uri = path.as_uri()
    everything = Client(tmp_path)
    try:
        _start(everything, tmp_path)
        _open(everything, uri, TRAINING)
        full = everything.wait_for(_is_publish(uri), 40)
    finally:
        everything.close()
    codes = {d["code"] for d in full["params"]["diagnostics"]}
    ignored = sorted(codes)[0]
    (tmp_path / "gate").unlink()
    client = Client(tmp_path)
    try:
        _start(client, tmp_path, {"ignore": [ignored]})
        _open(client, uri, TRAINING)
        first = client.wait_for(_is_publish(uri), 40)
        assert first is not None and not client.gate.exists()
        assert {d["code"] for d in first["params"]["diagnostics"]} == codes - {ignored}
    finally:
        client.close()


def test_a_request_before_the_document_leaves_everything_to_pygls(tmp_path):
    """Anything but `initialized` before the `didOpen` (here a request): nothing checked before pygls, the
    request answered by it, the document checked by it."""
    path = tmp_path / "train.py"
    path.write_text(TRAINING, encoding="utf-8")
    uri = path.as_uri()
    client = Client(tmp_path)
    try:
        _start(client, tmp_path)
        client.send({"jsonrpc": "2.0", "id": 5, "method": "workspace/executeCommand", "params": {"command": "nothing"}})
        _open(client, uri, TRAINING)
        assert client.wait_for(_is_publish(uri), 3) is None  # held with pygls
        client.gate.touch()
        assert client.wait_for(lambda m: m.get("id") == 5) is not None
        assert client.wait_for(_is_publish(uri)) is not None
    finally:
        client.close()


def test_after_each_edit_of_the_training_step_the_server_publishes_the_cold_checks_diagnostics(tmp_path):
    """Issue 43: edits of a trainer's training step (a comment on the step line, its argument, the scaled backward,
    a `# noqa` typed and removed), each waited for: what the server publishes for that version is what a cold
    check of the edited text gives, placed as the server places it."""
    from test_lsp_edit_signature import TRAINER

    from amp_lint.engine.runner import check_text
    from amp_lint.server.document_check import diagnostic_json, error_json, units_of
    from amp_lint.server.documents import TextView
    from amp_lint.server.settings import ServerSettings

    path = tmp_path / "trainer.py"
    path.write_text(TRAINER, encoding="utf-8")
    uri = path.as_uri()
    step = "self.scaler.step(self.optimizer)"
    backward = "self.scaler.scale(loss).backward()"
    clip = "torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_norm)"
    edits = [
        (step, step + "  # edit 2"),
        (step + "  # edit 2", step + "  # edit 3"),
        (step + "  # edit 3", "self.scaler.step(self.optimizer_4)"),
        (backward, backward + "  # scaled"),
        (clip, clip + "  # noqa: AMP030"),
        (clip + "  # noqa: AMP030", clip),
        ("self.scaler.step(self.optimizer_4)", step),
    ]
    client = Client(tmp_path, held=False)
    try:
        _start(client, tmp_path)
        _open(client, uri, TRAINER)
        assert client.wait_for(_is_publish(uri), 60) is not None
        text = TRAINER
        config = ServerSettings().for_path(str(path)).config
        for version, (old, new) in enumerate(edits, start=2):
            assert old in text, old
            row = next(i for i, line in enumerate(text.split("\n")) if old in line)
            line = text.split("\n")[row]
            text = text.replace(old, new)
            change = {"range": {"start": {"line": row, "character": 0}, "end": {"line": row, "character": len(line)}}, "text": line.replace(old, new)}
            client.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}})
            published = client.wait_for(lambda m: _is_publish(uri)(m) and m["params"].get("version") == version, 60)
            assert published is not None, version
            cold = check_text(text, str(path), config)
            view = TextView(uri, str(path), text, version)
            expected = [diagnostic_json(view, d, units_of("utf-16"))[1] for d in cold.diagnostics]
            expected += [error_json(view, e, units_of("utf-16"))[1] for e in cold.errors if e.location is not None]
            assert published["params"]["diagnostics"] == expected, (version, new)
    finally:
        client.close()
