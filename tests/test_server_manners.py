"""`amp-lint server`'s manners and its faults (issues 29 and 31): excluded files, closed documents, hover, pull
diagnostics, stale versions, the size cap, malformed headers, the lifecycle, a dead parent, a fast start.

The editor-level tests use the real LSP client of `tests/test_server.py` (pytest-lsp); the wire-level ones talk
JSON-RPC bytes to `python -m amp_lint server` directly, since no well-behaved client sends broken headers.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import time


from tests.test_server import (
    DEPRECATED_SCALER,
    ENV,
    SERVER,
    codes,
    diagnostics,
    e2e,
    no_diagnostics,
    open_file,
    pytest_lsp,
    session,
    wait_for,
)

if pytest_lsp is not None:
    from lsprotocol import types

    from tests.test_server import change, shared  # noqa: F401  (the module's shared server fixture)


# --- the wire ----------------------------------------------------------------------------------------


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(msg_id, method, params=None) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def notification(method, params=None) -> dict:
    return {"jsonrpc": "2.0", "method": method, "params": params}


INITIALIZE = request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {}})
HOVER = {"textDocument": {"uri": "file:///nowhere.py"}, "position": {"line": 0, "character": 0}}


class Wire:
    """A server under a raw JSON-RPC connection: bytes in, answers (by id) out."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        self.answers = {}
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def answer(self, msg_id, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while msg_id not in self.answers:
            header, found, rest = self.buffer.partition(b"\r\n\r\n")
            if found:
                length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
                if len(rest) >= length:
                    message = json.loads(rest[:length])
                    self.buffer = rest[length:]
                    if "id" in message and "method" not in message:
                        self.answers[message["id"]] = message
                    continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"no answer to {msg_id}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the server closed its output before answering {msg_id}")
            self.buffer += chunk
        return self.answers[msg_id]

    def close(self) -> int:
        """Shut down and exit as a client does; the exit status."""
        self.send(frame(request("bye", "shutdown")))
        assert self.answer("bye")["result"] is None
        self.send(frame(notification("exit")))
        self.process.stdin.close()
        status = self.process.wait(timeout=60)
        self.stderr = self.process.stderr.read().decode("utf-8", "replace")
        return status

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_malformed_content_length_headers_are_skipped_and_the_server_keeps_answering():
    body = lambda msg_id: json.dumps(request(msg_id, "textDocument/hover", HOVER)).encode()  # noqa: E731
    wire = Wire()
    try:
        wire.send(frame(INITIALIZE) + frame(notification("initialized", {})))
        assert "capabilities" in wire.answer(1)["result"]
        broken = [
            b"Content-Length: abc\r\n\r\n" + body(2),  # not a number
            b"Content-Length: -5\r\n\r\n" + body(3),  # negative
            b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body(4),  # missing
            b"Content-Length: 10\r\n\r\n" + body(5),  # too small
        ]
        for number, data in enumerate(broken, start=6):
            wire.send(data + frame(request(number * 10, "textDocument/hover", HOVER)))
            assert wire.answer(number * 10) == {"jsonrpc": "2.0", "id": number * 10, "result": None}
        wire.send(b"Content-Length: 100000\r\n\r\n" + body(11))  # too large: the next header shows up inside it
        wire.send(frame(request(12, "textDocument/hover", HOVER)))
        assert wire.answer(11)["result"] is None and wire.answer(12)["result"] is None
        assert not {2, 3, 4, 5} & set(wire.answers)  # lost, and nothing else with them
        assert wire.close() == 0
    finally:
        wire.kill()


def test_a_document_that_holds_header_words_arrives_whole_even_in_pieces(tmp_path):
    text = DEPRECATED_SCALER + 'HEADER = "}Content-Length: 5\\r\\n\\r\\n{}"\n'
    uri = (tmp_path / "http.py").as_uri()
    opened = frame(notification("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}))
    wire = Wire()
    try:
        wire.send(frame(INITIALIZE) + frame(notification("initialized", {})))
        wire.answer(1)
        cut = opened.index(b"Content-Length", 30) + len(b"Content-Length: 5")
        wire.send(opened[:cut])
        time.sleep(0.5)  # the reader sees the first piece alone
        wire.send(opened[cut:])
        wire.send(frame(request(2, "textDocument/diagnostic", {"textDocument": {"uri": uri}})))
        assert [item["code"] for item in wire.answer(2)["result"]["items"]] == ["AMP072"]
        assert wire.close() == 0
    finally:
        wire.kill()


def test_requests_before_initialize_and_after_shutdown_get_the_protocols_errors():
    wire = Wire()
    try:
        wire.send(frame(request(0, "textDocument/hover", HOVER)))
        refused = wire.answer(0)["error"]
        assert refused["code"] == -32002 and not refused.get("data")  # ServerNotInitialized, no traceback
        wire.send(frame(INITIALIZE))
        assert "capabilities" in wire.answer(1)["result"]
        wire.send(frame(request(2, "shutdown")))
        assert wire.answer(2)["result"] is None
        wire.send(frame(request(3, "textDocument/hover", HOVER)))
        assert wire.answer(3)["error"]["code"] == -32600  # InvalidRequest
        wire.send(frame(notification("exit")))
        assert wire.process.wait(timeout=60) == 0
        assert "Traceback" not in wire.process.stderr.read().decode("utf-8", "replace")
    finally:
        wire.kill()


def test_the_server_exits_when_its_parent_process_is_gone():
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    server = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        initialize = request(1, "initialize", {"processId": parent.pid, "rootUri": None, "capabilities": {}})
        server.stdin.write(frame(initialize))
        server.stdin.flush()
        server.stdout.readline()  # the answer has begun: initialize is done
        parent.kill()
        parent.wait()
        assert server.wait(timeout=30) == 1  # exit without shutdown
    finally:
        for process in (parent, server):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_initialize_is_answered_without_the_rules_or_libcst():
    code = (
        "import sys\n"
        "from amp_lint.server.lsp import create_server\n"
        "from amp_lint.server.settings import parse_options\n"
        "server = create_server()\n"
        "server.settings.set_overrides(parse_options({'select': ['AMP072']})[0])\n"
        "loaded = [m for m in sys.modules if m == 'libcst' or m.startswith('amp_lint.rules.amp')]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    wire = Wire()
    try:
        wire.send(frame(INITIALIZE))
        assert "capabilities" in wire.answer(1)["result"]
        assert wire.close() == 0
    finally:
        wire.kill()


# --- the editor --------------------------------------------------------------------------------------


@e2e
async def test_excluded_files_get_no_diagnostics(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.amp-lint]\nextend-exclude = ["generated"]\n', encoding="utf-8")
    (tmp_path / "generated").mkdir()
    async with session([tmp_path]) as client:
        excluded = open_file(client, tmp_path / "generated" / "train.py", DEPRECATED_SCALER)
        checked = open_file(client, tmp_path / "train.py", DEPRECATED_SCALER)
        assert codes(await diagnostics(client, checked)) == ["AMP072"]
        await no_diagnostics(client, excluded)
        report = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=excluded))
        )
        assert not report.items


@e2e
async def test_changes_and_closes_of_unknown_or_closed_documents_are_ignored(shared):  # noqa: F811
    client, folder = shared
    uri = open_file(client, folder / "closing.py", DEPRECATED_SCALER)
    await diagnostics(client, uri)
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    change(client, uri, 2, text="import torch\n")  # the editor's race: a change after the close
    change(client, (folder / "never_opened.py").as_uri(), 1, text="x = 1\n")
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    await wait_for(lambda: sum("not open ignored" in m.message for m in client.log_messages) >= 3)
    assert not [m for m in client.messages if m.type == types.MessageType.Error]
    fine = open_file(client, folder / "after_close.py", DEPRECATED_SCALER)
    assert codes(await diagnostics(client, fine)) == ["AMP072"]


@e2e
async def test_a_change_with_an_older_version_is_ignored(shared):  # noqa: F811
    client, folder = shared
    uri = open_file(client, folder / "versions.py", DEPRECATED_SCALER, version=5)
    assert codes(await diagnostics(client, uri)) == ["AMP072"]
    change(client, uri, 3, text="import torch\n")  # older than 5
    await wait_for(lambda: any("version 3" in m.message for m in client.log_messages))
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert codes(report.items) == ["AMP072"]


@e2e
async def test_pull_diagnostics_and_hover_on_a_diagnostic_and_on_a_noqa_code(shared):  # noqa: F811
    client, folder = shared
    text = DEPRECATED_SCALER + "other = torch.cuda.amp.GradScaler()  # noqa: AMP072\n"
    uri = open_file(client, folder / "hover.py", text)
    assert client.initialize_result.capabilities.diagnostic_provider is not None
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert codes(report.items) == ["AMP072"]
    [found] = report.items
    shown = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri=uri), found.range.start))
    assert shown.contents.kind == types.MarkupKind.Markdown and "AMP072" in shown.contents.value
    assert "## What it does" in shown.contents.value or "What it does" in shown.contents.value
    line = text.splitlines()[2]
    on_code = types.Position(2, line.index("AMP072") + 2)
    shown = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri=uri), on_code))
    assert "AMP072" in shown.contents.value
    nothing = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(uri=uri), types.Position(0, 1)))
    assert nothing is None


@e2e
async def test_a_document_over_the_size_cap_is_not_checked_and_says_so(shared):  # noqa: F811
    from amp_lint.server.lsp import MAX_DOCUMENT_CHARS

    client, folder = shared
    text = DEPRECATED_SCALER + "x = 1\n" * (MAX_DOCUMENT_CHARS // 6 + 10)
    uri = open_file(client, folder / "huge.py", text)
    [found] = await diagnostics(client, uri)
    assert found.code is None and "not checked" in found.message and f"{MAX_DOCUMENT_CHARS:,}" in found.message
    await wait_for(lambda: any("not checked" in m.message and m.type == types.MessageType.Warning for m in client.messages))


def test_the_rule_pages_ship_in_the_package_and_match_the_generated_docs():
    from pathlib import Path

    from amp_lint import rules as registry
    from amp_lint.server.hover import PAGES, rule_href

    root = Path(__file__).resolve().parent.parent
    for code in registry.all_codes():
        shipped = PAGES / f"{code}.md"
        assert shipped.read_text(encoding="utf-8") == (root / "docs" / "rules" / f"{code}.md").read_text(encoding="utf-8")
        assert rule_href(code) == shipped.as_uri()
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    assert '"server/rule_pages/*.md"' in pyproject


def _shown_error_start(error, text: str) -> tuple:
    """Where the server shows a file error: a syntax error at Python's own place (issue 44), inside the document."""
    from amp_lint.server.first_look import python_syntax_error

    python = python_syntax_error(text) if "syntax error" in error.message else None
    start = python[1] if python else error.location
    return (None, start.row - 1, start.column - 1)


@e2e
async def test_published_diagnostics_after_random_incremental_edits_are_a_full_checks(shared):  # noqa: F811
    """Each version's published set equals `check_text` of that version's text (incremental didChange)."""
    import random
    from pathlib import Path

    from amp_lint import rules as registry
    from amp_lint.engine.runner import CheckConfig, check_text

    from tests.test_units import TRAINING, _edit, _edit_inside, _training_files

    config = CheckConfig(frozenset(registry.default_codes()), False, False, False, False)
    client, folder = shared
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "check" / "bad_amp001_backward_in_autocast.py"
    seed = 31
    rng = random.Random(seed)
    documents = [("edited_training.py", TRAINING, _edit), ("edited_fixture.py", fixture.read_text(encoding="utf-8"), _edit)]
    # A real training file, edited inside its functions (issue 31: the group-by-group path, verified first).
    documents += [(f"edited_{name}", text, _edit_inside) for name, text in _training_files()[:1]]
    # Training code as the methods of one class: an edit inside a method checks that method's group.
    documents += [(f"edited_{name}", text, _edit_inside) for name, text in _training_files() if name == "bench_class_600.py"]
    for name, text, edit_of in documents:
        uri = open_file(client, folder / name, text)
        lines = text.split("\n")
        for version in range(2, 7):
            old = lines[:]
            edit_of(lines, rng)
            # The change as an editor sends it: the old lines from the first that differs, replaced.
            first = next((i for i, (a, b) in enumerate(zip(old, lines)) if a != b), min(len(old), len(lines)) - 1)
            new_text = "\n".join(lines)
            end = types.Position(len(old) - 1, len(old[-1]))
            edit = (types.Range(types.Position(first, 0), end), "\n".join(lines[first:]))
            change(client, uri, version, edit=edit)
            await wait_for(lambda: any(entry[:2] == (uri, version) for entry in client.published), 120)
            report = await client.text_document_diagnostic_async(
                types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )
            outcome = check_text(new_text, str(folder / name), config)
            expected = sorted(
                [(d.code, d.location.row - 1, d.location.column - 1, d.end_location.row - 1, d.end_location.column - 1) for d in outcome.diagnostics]
                + [_shown_error_start(e, new_text) for e in outcome.errors if e.location is not None],
                key=repr,
            )
            shown = sorted(
                [
                    (d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
                    if d.code
                    else (None, d.range.start.line, d.range.start.character)
                    for d in report.items
                ],
                key=repr,
            )
            assert shown == expected, (seed, name, version)
            assert codes(client.diagnostics[uri]) == codes(report.items)  # pushed and pulled agree


@e2e
async def test_a_change_of_a_notebook_that_is_not_open_is_ignored(shared):  # noqa: F811
    client, folder = shared
    cell = f"vscode-notebook-cell:{folder / 'gone.ipynb'}#cell0"
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=(folder / "gone.ipynb").as_uri()),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=cell, version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text="x = 1")],
                        )
                    ]
                )
            ),
        )
    )
    await wait_for(lambda: any("notebook that is not open" in m.message for m in client.log_messages))
    assert not [m for m in client.messages if m.type == types.MessageType.Error]


@e2e
async def test_an_edit_after_a_pause_is_checked_at_once_and_one_right_after_waits_for_the_debounce(tmp_path):
    """Issue 31: edit -> diagnostics with a debounce of at most 50 ms. The debounce holds back edits that come
    faster than it (a burst: checked once it pauses); the first edit after a pause is checked at once. A
    debounce of 3 s makes the two cases apart on a loaded machine."""
    from amp_lint.server.lsp import DEFAULT_DEBOUNCE

    assert DEFAULT_DEBOUNCE <= 0.05
    async with session([tmp_path], options={"debounce": 3000}) as client:
        # The warm-up after `initialized` runs in the check thread; a document opened once a first one is
        # checked is checked after it: then nothing but the edit waits in that thread.
        await diagnostics(client, open_file(client, tmp_path / "first.py", DEPRECATED_SCALER))
        uri = open_file(client, tmp_path / "paused.py", "import torch\n")
        await no_diagnostics(client, uri)
        await asyncio.sleep(0.2)
        sent = time.monotonic()
        change(client, uri, 2, text=DEPRECATED_SCALER)
        await wait_for(lambda: any(entry[:2] == (uri, 2) for entry in client.published), 60)
        assert time.monotonic() - sent < 2.5  # not held back by the 3 s debounce
        sent = time.monotonic()
        change(client, uri, 3, text=DEPRECATED_SCALER + "x = 1\n")  # right after the last one: waits
        await wait_for(lambda: any(entry[:2] == (uri, 3) for entry in client.published), 60)
        assert time.monotonic() - sent >= 2.9
        assert codes(client.diagnostics[uri]) == ["AMP072"]
