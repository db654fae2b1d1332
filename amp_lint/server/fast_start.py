"""`initialize` answered before pygls, lsprotocol, the rules or LibCST are imported (issue 31: "start fast").

Importing lsprotocol alone takes a few hundred milliseconds; an editor waits for the `initialize` answer before
it sends anything else. So the first message is read here, with the standard library only; when it is an
`initialize` request whose answer this module can decide, the answer is written at once: the server's
capabilities (`CAPABILITIES`, which `tests/test_server_start.py` compares with what pygls builds for the same
client capabilities) with the position encoding pygls would choose, and the notebook sync when the client
declares notebook support (pygls's rule). Then pygls is imported and the same bytes are fed to it, so that it
sets up its workspace and runs our `initialize` handler exactly as before; only its second answer to that
request is dropped (`AmpLintProtocol.answered_id`). Before pygls, the first opened document is checked and its
diagnostics are published (`early`), and what was read meanwhile is fed to pygls too.

Anything else first (a malformed header, another method, a batch): nothing is answered here, and pygls gets
the bytes as they came. This module imports nothing outside the standard library and `amp_lint/__init__`.
"""

from __future__ import annotations

import json
import os
import re
import sys

# (No `typing`, no `importlib.util`: each is milliseconds before the answer. Annotations are never evaluated.)

_CONTENT_LENGTH = re.compile(rb"Content-Length[ \t]*:[ \t]*([0-9]+)[ \t]*\r?\n", re.IGNORECASE)
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_ENCODINGS = ("utf-8", "utf-16", "utf-32")  # pygls's `_SUPPORTED_ENCODINGS`

# What pygls answers (`InitializeResult`, unstructured) for a client without notebook support; the
# position encoding and the server's version are filled in. Checked against pygls by the tests.
CAPABILITIES = {
    "textDocumentSync": {"openClose": True, "change": 2, "save": True},
    "hoverProvider": True,
    "codeActionProvider": {"codeActionKinds": ["quickfix", "source.fixAll.amp-lint"], "resolveProvider": False},
    "executeCommandProvider": {"commands": []},
    "diagnosticProvider": {"interFileDependencies": False, "workspaceDiagnostics": False, "identifier": "amp-lint"},
    "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}, "fileOperations": {}},
}
NOTEBOOK_SYNC = {"notebookSelector": [{"cells": [{"language": "python"}], "notebook": "jupyter-notebook"}], "save": True}


def initialize_answer(params: object) -> "dict | None":
    """The `InitializeResult` for these params, as pygls would build it; None when undecided here."""
    from amp_lint import __version__

    if not isinstance(params, dict):
        return None
    capabilities = params.get("capabilities")
    if not isinstance(capabilities, dict) or not isinstance(capabilities.get("textDocument") or {}, dict):
        return None
    encoding = "utf-16"
    general = capabilities.get("general")
    if general is not None:
        if not isinstance(general, dict):
            return None
        offered = general.get("positionEncodings")
        if offered is not None:
            if not isinstance(offered, list):
                return None
            encoding = next((e for e in offered if e in _ENCODINGS), "utf-16")
    result = {"positionEncoding": encoding, **CAPABILITIES}
    synchronization = (capabilities.get("textDocument") or {}).get("synchronization")
    if synchronization is not None:
        if not isinstance(synchronization, dict):
            return None
        # pygls: `client's flag and the feature registered`; we register neither: False when the client
        # says anything, absent when it is silent.
        sync = dict(result["textDocumentSync"])
        for field in ("willSave", "willSaveWaitUntil"):
            if synchronization.get(field) is not None:
                sync[field] = False
        result["textDocumentSync"] = sync
    if capabilities.get("notebookDocument") is not None:
        result["notebookDocumentSync"] = NOTEBOOK_SYNC
    return {"capabilities": result, "serverInfo": {"name": "amp-lint", "version": __version__}}


def read_first(fd: int) -> "tuple[bytes, dict | None]":
    """The bytes read up to the end of the first message (and any beyond it), and that message when it
    is a well-formed JSON object; (bytes, None) when the stream ends or the first message is not."""
    buffer = b""
    while True:
        end = _HEADER_END.search(buffer)
        if end is not None:
            match = _CONTENT_LENGTH.search(buffer[: end.end()] + b"\n")
            if match is None:
                return buffer, None
            length = int(match.group(1))
            if length > 64 * 1024 * 1024:
                return buffer, None
            while len(buffer) < end.end() + length:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return buffer, None
                buffer += chunk
            try:
                message = json.loads(buffer[end.end() : end.end() + length])
            except ValueError:
                return buffer, None
            return buffer, message if isinstance(message, dict) else None
        if len(buffer) > 65536:
            return buffer, None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return buffer, None
        buffer += chunk


def _installed(name: str) -> bool:
    """Whether `name` can be imported, without importing it: on `sys.path` (`PathFinder`, loaded at start),
    else by any finder (`importlib.util`, for an unusual installation)."""
    from importlib.machinery import PathFinder

    try:
        if PathFinder.find_spec(name) is not None:
            return True
        import importlib.util

        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def main() -> int:
    """`amp-lint server`: answer `initialize` first, then run the pygls server over the same stream."""
    if not _installed("pygls") or not _installed("lsprotocol"):
        from amp_lint.server import MISSING_EXTRA

        print(MISSING_EXTRA, file=sys.stderr)
        return 2
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    consumed, message = read_first(stdin.fileno())
    answered_id = None
    if message is not None and message.get("method") == "initialize" and isinstance(message.get("id"), (int, str)):
        result = initialize_answer(message.get("params"))
        if result is not None:
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}, separators=(",", ":")).encode()
            stdout.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            stdout.flush()
            answered_id = message["id"]
    early = None
    if answered_id is not None and os.name == "posix":  # the first document's diagnostics, before pygls too (`early`)
        from amp_lint.server.early import first_document, next_message

        _, end = next_message(consumed, 0)
        consumed, early = first_document(stdin.fileno(), stdout, consumed, end, message, result["capabilities"]["positionEncoding"])
    from amp_lint.server.lsp import serve_stdio

    return serve_stdio(replay=consumed, answered_id=answered_id, early=early)
