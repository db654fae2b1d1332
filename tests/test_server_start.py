"""`amp-lint server` answers `initialize` before pygls is imported (`amp_lint.server.fast_start`), with the
answer pygls itself builds, and then serves as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # noqa: E402
from pygls.capabilities import ServerCapabilitiesBuilder  # noqa: E402

from amp_lint.server.fast_start import initialize_answer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

CLIENTS = {
    "bare": {},
    "utf-8 first": {"general": {"positionEncodings": ["utf-8", "utf-16"]}},
    "unknown encodings": {"general": {"positionEncodings": ["utf-7"]}},
    "utf-32": {"general": {"positionEncodings": ["utf-32"]}},
    "notebooks": {"notebookDocument": {"synchronization": {"dynamicRegistration": True}}},
    "vscode-like": {
        "general": {"positionEncodings": ["utf-16"]},
        "textDocument": {
            "synchronization": {"willSave": True, "willSaveWaitUntil": True, "didSave": True},
            "rename": {"prepareSupport": True},
            "diagnostic": {"dynamicRegistration": True, "relatedDocumentSupport": False},
        },
        "workspace": {
            "workspaceFolders": True,
            "fileOperations": {"didCreate": True, "willRename": True, "didDelete": True},
            "didChangeWatchedFiles": {"dynamicRegistration": True},
        },
        "notebookDocument": {"synchronization": {"dynamicRegistration": True, "executionSummarySupport": True}},
    },
}


def _pygls_answer(client: dict) -> dict:
    """What pygls's `lsp_initialize` returns for these client capabilities (its own builder, our features)."""
    from amp_lint.server.lsp import create_server

    server = create_server()
    protocol = server.protocol
    capabilities = protocol._converter.structure(client, types.ClientCapabilities)
    built = ServerCapabilitiesBuilder(
        capabilities,
        set({**protocol.fm.features, **protocol.fm.builtin_features}.keys()),
        protocol.fm.feature_options,
        list(protocol.fm.commands.keys()),
        server._text_document_sync_kind,
        server._notebook_document_sync,
        ServerCapabilitiesBuilder.choose_position_encoding(capabilities),
    ).build()
    return protocol._converter.unstructure(types.InitializeResult(capabilities=built, server_info=protocol.server_info))


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_early_answer_is_the_one_pygls_builds(name):
    assert initialize_answer({"capabilities": CLIENTS[name], "processId": None}) == _pygls_answer(CLIENTS[name])


def test_undecidable_params_are_left_to_pygls():
    assert initialize_answer(None) is None
    assert initialize_answer({"capabilities": {"general": {"positionEncodings": "utf-8"}}}) is None


def _message(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read(stream) -> dict:
    header = b""
    while not header.endswith(b"\r\n\r\n"):
        header += stream.read(1)
    length = int(header.split(b":")[1].split(b"\r\n")[0])
    return json.loads(stream.read(length))


def test_initialize_is_answered_once_before_pygls_loads_and_the_server_then_works(tmp_path):
    """A real server process: one answer to `initialize` (pygls's second is dropped), before lsprotocol is
    imported, and then a document is checked and a shutdown answered."""
    # Loading lsprotocol takes 8 seconds longer here: an answer sooner came before it.
    slow_lsprotocol = (
        "import sys, time\n"
        "class Slow:\n"
        "    calls = 0\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'lsprotocol':\n"
        "            Slow.calls += 1\n"
        "            if Slow.calls > 1:\n"  # the first: `fast_start` asking whether it is installed
        "                time.sleep(8)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Slow())\n"
        "sys.argv = ['amp-lint', 'server']\n"
        "from amp_lint.__main__ import run\n"
        "run()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", slow_lsprotocol],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=tmp_path,
    )
    try:
        sent = time.perf_counter()
        process.stdin.write(_message({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}}))
        process.stdin.flush()
        answer = _read(process.stdout)
        elapsed = time.perf_counter() - sent
        assert answer["id"] == 1 and answer["result"]["capabilities"]["textDocumentSync"]["change"] == 2
        uri = (tmp_path / "t.py").as_uri()
        text = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
        for payload in (
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}},
        ):
            process.stdin.write(_message(payload))
        process.stdin.flush()
        seen = []
        while not any(m.get("method") == "textDocument/publishDiagnostics" for m in seen):
            seen.append(_read(process.stdout))
        process.stdin.write(_message({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
        process.stdin.flush()
        while seen[-1].get("id") != 2:
            seen.append(_read(process.stdout))
        assert not any(m.get("id") == 1 for m in seen)  # pygls's own answer to initialize was dropped
        published = [m for m in seen if m.get("method") == "textDocument/publishDiagnostics"]
        assert published[0]["params"]["diagnostics"][0]["code"].startswith("AMP")
        process.stdin.write(_message({"jsonrpc": "2.0", "method": "exit"}))
        process.stdin.flush()
        assert process.wait(60) == 0
        imports = process.stderr.read().decode()
        assert "lsprotocol.types" in imports  # loaded, after the answer
        assert elapsed < 7  # before lsprotocol was loaded (the figure itself: bench/lsp_latency.py)
    finally:
        if process.poll() is None:
            process.kill()


def test_before_it_answers_the_server_imports_only_the_standard_librarys_json_and_its_own_entry():
    """Issue 31, `initialize` <= 150 ms: what the process imports before the answer is written (recorded when
    it asks for `amp_lint.server.early` or `amp_lint.server.lsp`, the next thing after the answer): the interpreter's start, `json`
    (with `re`), and amp-lint's entry modules; not `typing`, `pathlib`, `importlib.util`, click, LibCST or
    pygls (each milliseconds to hundreds of them)."""
    record = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name in ('amp_lint.server.early', 'amp_lint.server.lsp'):\n"
        "            sys.stderr.write('LOADED ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
        "            sys.stderr.flush()\n"
        "            import os; os._exit(0)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Stop())\n"
        "sys.argv = ['amp-lint', 'server']\n"
        "from amp_lint.__main__ import run\n"
        "run()\n"
    )
    bare = subprocess.run(
        [sys.executable, "-c", "import sys; print(' '.join(sorted(sys.modules)))"], capture_output=True, text=True, env=ENV
    ).stdout.split()
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}}
    done = subprocess.run(
        [sys.executable, "-c", record], input=_message(message), capture_output=True, env=ENV, cwd=ROOT, timeout=60
    )
    assert b"capabilities" in done.stdout  # answered before the record
    loaded = done.stderr.decode().split("LOADED ", 1)[1].split()
    new = set(loaded) - set(bare) - {"__main__"}
    ours = {name for name in new if name.split(".")[0] == "amp_lint"}
    assert ours == {"amp_lint", "amp_lint.__main__", "amp_lint.server", "amp_lint.server.fast_start"}
    stdlib = {name for name in new - ours if name.split(".")[0] in sys.stdlib_module_names or name.startswith("_")}
    assert new - ours - stdlib == set()
    heavy = {"typing", "pathlib", "importlib.util", "asyncio", "logging", "dataclasses", "inspect", "ast", "tokenize"}
    assert not (new & heavy), sorted(new & heavy)
    assert {"json"} <= new


def test_the_benchmark_times_initialize_from_spawn_beside_the_interpreter_floor(tmp_path):
    """`bench/lsp_latency.py --initialize-only`: the figure an editor waits (spawn to answer) and the
    interpreter's start with and without `site`, from this checkout or another interpreter (`--server-python`,
    e.g. a venv the wheel is installed in)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "lsp_latency.py"), "--initialize-only", "1", "--server-python", sys.executable],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "amp-lint  initialize answered, from spawn: fastest" in done.stdout
    assert f"{sys.executable} -c pass: fastest" in done.stdout
    assert f"{sys.executable} -I -S -c pass: fastest" in done.stdout


def test_the_server_holds_no_module_its_default_rules_never_run():
    """Issue 31, the server's memory: after the warm-up and a check, neither the conversion planner (AMP100,
    off by default), the command line, click nor `verify` is loaded."""
    code = (
        "import sys\n"
        "import amp_lint.server.lsp\n"
        "from amp_lint.server.memory import warm_up, WARM_UP\n"
        "warm_up()\n"
        "from amp_lint import rules\n"
        "from amp_lint.engine.runner import CheckConfig, check_text\n"
        "check_text(WARM_UP, 't.py', CheckConfig(frozenset(rules.default_codes()), False, False, False, False))\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "libcst" in loaded and "amp_lint.rules.amp100_fp32_training_loop" in loaded
    unused = {m for m in loaded if m.split(".")[:2] in (["amp_lint", "conversion"], ["amp_lint", "cli"], ["amp_lint", "verify"])}
    assert not unused and "click" not in loaded, sorted(unused)
