"""The first document's diagnostics, published before pygls is loaded (issue 44, item 17: "publish a first result
as soon as the document is read").

An editor sends `initialize`, and at its answer `initialized` and the `didOpen` of the documents it shows. Loading
pygls and lsprotocol takes a second or more on a busy machine, and the first check needs the engine and LibCST
(as long again): in sequence, the first diagnostics came after both. So `fast_start`, once it has answered
`initialize`, hands the stream to `first_document`, which reads on with the standard library: past `initialized`,
up to the first `textDocument/didOpen`. That document is checked here, with the engine alone, by the same
functions (`document_check`) and the same settings (the configuration files, and the `initializationOptions`
read by `settings.parse_options`) as the server's, and its diagnostics are written as a raw
`textDocument/publishDiagnostics`. Then pygls is loaded and every byte read so far is fed to it (`replay`): it
sees the session from `initialize` on, and keeps this check as its own result (`lsp.AmpLintServer._adopt`: not
published again; the document is then checked unit by unit in the check thread, for the edits to come).

Nothing is checked here, and pygls gets the bytes as they came, when anything else comes first (a request, which
pygls must answer; `didChangeConfiguration`, which could change the settings; a notebook), when the document is
not a Python file on disk (an unsaved document's settings follow the workspace folders, pygls's), when nothing
comes for `WAIT` seconds (the editor opens nothing yet: pygls loads meanwhile), or when the stream is not
well-formed. The publish is left out when a change or a close of the document has arrived meanwhile (it would be
stale at once). Nothing here imports pygls or lsprotocol.
"""

from __future__ import annotations

import json
import os
import select
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from amp_lint.server.fast_start import _CONTENT_LENGTH, _HEADER_END

WAIT = 0.3  # seconds without a message after which the rest is pygls's
_INCOMPLETE = object()


@dataclass
class EarlyResult:
    """The check of one document made here: its version and text, what it found, whether it was published."""

    version: object
    program: str
    check: object  # document_check.DocumentCheck
    published: bool

    def matches(self, view) -> bool:
        return view.version == self.version and view.program == self.program


@dataclass
class Early:
    """What the pygls server takes over: the results (by uri)."""

    results: Dict[str, EarlyResult] = field(default_factory=dict)


def next_message(buffer: bytes, start: int):
    """(the message that starts at `start`, where it ends); `_INCOMPLETE` when more bytes are needed, None when
    it is not a well-formed JSON-RPC object."""
    end = _HEADER_END.search(buffer, start)
    if end is None:
        return (None if len(buffer) - start > 65536 else _INCOMPLETE), start
    match = _CONTENT_LENGTH.search(buffer[start : end.end()] + b"\n")
    if match is None:
        return None, start
    length = int(match.group(1))
    if length > 64 * 1024 * 1024:
        return None, start
    if len(buffer) < end.end() + length:
        return _INCOMPLETE, start
    try:
        message = json.loads(buffer[end.end() : end.end() + length])
    except ValueError:
        return None, start
    return (message if isinstance(message, dict) else None), end.end() + length


def _readable(fd: int, timeout: float) -> bool:
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    except (OSError, ValueError):  # not a selectable stream: wait for it, as pygls would
        return timeout > 0


def first_document(fd: int, out, buffer: bytes, start: int, initialize: dict, encoding: str) -> Tuple[bytes, Optional[Early]]:
    """Read on from `start` (the end of `initialize`, answered) and check the first opened document, if it comes
    first; (every byte read, what pygls takes over, None when nothing was checked). `out`: the binary stdout."""
    while True:
        message, end = next_message(buffer, start)
        if message is _INCOMPLETE:
            if not _readable(fd, WAIT):
                return buffer, None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return buffer, None
            buffer += chunk
            continue
        if message is None or "id" in message:
            return buffer, None
        start = end
        method = message.get("method")
        if method == "initialized":
            continue
        if method != "textDocument/didOpen":
            return buffer, None
        try:
            checked = _check_opened(message.get("params"), initialize, encoding)
        except Exception as error:  # a bug of ours: pygls's server checks the document as usual
            import logging

            logging.getLogger("amp_lint.server").warning("the first check before pygls failed: %s: %s", type(error).__name__, error)
            return buffer, None
        if checked is None:
            return buffer, None
        early, (uri, result) = checked
        # What came meanwhile: a change or a close of this document makes this result stale.
        while _readable(fd, 0):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            buffer += chunk
        version = early.results[uri].version
        if not _touched_later(buffer, start, uri):
            early.results[uri].published = True
            for target, pairs in result.published.items():
                body = {"uri": target, "diagnostics": [diagnostic for diagnostic, _ in pairs], "version": version}
                data = json.dumps({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": body}, separators=(",", ":")).encode()
                out.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            out.flush()
        return buffer, early


def _document_path(uri: str) -> Optional[str]:
    """The file path of a `file:` uri as pygls reads it (`to_fs_path`), None for any other (left to pygls)."""
    from urllib.parse import unquote, urlparse

    if os.name != "posix":
        return None
    parts = urlparse(uri)
    if parts.scheme != "file" or parts.netloc:
        return None
    return unquote(parts.path) or None


def _check_opened(params, initialize: dict, encoding: str):
    """(what pygls takes over, (uri, the check)) for a `didOpen` this module can check; None for one it leaves."""
    document = params.get("textDocument") if isinstance(params, dict) else None
    if not isinstance(document, dict):
        return None
    uri, text, version, language = (document.get(k) for k in ("uri", "text", "version", "languageId"))
    if not isinstance(uri, str) or not isinstance(text, str) or not isinstance(version, int) or isinstance(version, bool):
        return None
    path = _document_path(uri)
    if path is None:
        return None
    from amp_lint.server.documents import TextView
    from amp_lint.server.first_look import first_look
    from amp_lint.server.settings import WATCHED_NAMES, ServerSettings, parse_options

    init_params = initialize.get("params") if isinstance(initialize.get("params"), dict) else {}
    overrides, _ = parse_options(init_params.get("initializationOptions"))  # (the problems: pygls shows them)
    settings = ServerSettings(overrides)
    if first_look(TextView(uri, path, text, version), settings.for_path) is not None:
        return None  # a syntax error, or nothing to find: the server's first look says so without LibCST

    from amp_lint.server.document_check import check_document, config_uri, is_python, units_of

    if not is_python(uri, language if isinstance(language, str) else None) or config_uri(uri, WATCHED_NAMES):
        return None
    early = Early()
    # Whole, not unit by unit: splitting a trainer into units costs a third of its check, and the server does
    # it once it has taken over (`lsp.AmpLintServer._adopt`), before the first edit.
    result = check_document(TextView(uri, path, text, version), settings.for_path(path), None, units_of(encoding))
    early.results[uri] = EarlyResult(version, text, result, False)
    return early, (uri, result)


def _touched_later(buffer: bytes, start: int, uri: str) -> bool:
    """Whether a message after `start` (complete or not yet) changes or closes the document `uri`."""
    while True:
        message, end = next_message(buffer, start)
        if message is _INCOMPLETE:
            return uri.encode() in buffer[start:]  # not whole yet: judged by its bytes
        if message is None:
            return True
        params = message.get("params")
        document = params.get("textDocument") if isinstance(params, dict) else None
        if isinstance(document, dict) and document.get("uri") == uri and message.get("method") != "textDocument/didOpen":
            if message.get("method") in ("textDocument/didChange", "textDocument/didClose"):
                return True
        start = end
