"""The wire and the protocol's rules, where pygls is too trusting: framing, lifecycle, stale and unknown documents.

- Framing (`read_messages`): a header block whose `Content-Length` is missing, not a number, negative or
  too large is skipped and the reader finds the next `Content-Length:` in the stream; a body that does not
  decode (a length too small) is logged and dropped; a length too large is noticed when the next header
  shows up inside the body. One bad message never silences the server (pygls waits forever instead). A request
  whose params do not validate (`hover` with `{}`) is answered with InvalidParams (-32602), as JSON-RPC asks:
  a client that waits for the answer must not hang.
- Lifecycle (`AmpLintProtocol.handle_message`): a request before `initialize` gets ServerNotInitialized
  (-32002), a request after `shutdown` gets InvalidRequest (-32600), both without a traceback; other
  notifications before `initialize` are dropped.
- Documents: a `didChange` for a document that is not open (closed, or never opened: editors race on close
  and rename) or with a version older than the one held is ignored and logged; a `didClose` of an unknown
  document is ignored.
- The parent process named in `initialize` (`processId`) is watched: when it is gone the server exits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from typing import Optional

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

logger = logging.getLogger("amp_lint.server")

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a header naming more is malformed
_CONTENT_LENGTH = re.compile(rb"Content-Length[ \t]*:[ \t]*([^\r\n]*)", re.IGNORECASE)
_HEADER_END = re.compile(rb"\r?\n\r?\n")
SERVER_NOT_INITIALIZED = -32002
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


class AmpLintProtocol(LanguageServerProtocol):
    initialized_by_client = False
    answered_id = None  # the `initialize` request `fast_start` answered already: pygls's answer is dropped

    def _send_response(self, msg_id, result=None, error=None):
        if self.answered_id is not None and msg_id == self.answered_id:
            self.answered_id = None
            if error is not None:
                logger.warning("initialize, answered before pygls started, failed in pygls: %s", error)
            return None
        return super()._send_response(msg_id, result, error)

    def handle_message(self, message):
        method = getattr(message, "method", None)
        is_request = method is not None and getattr(message, "id", None) is not None
        if method == types.EXIT:
            return super().handle_message(message)
        if not self.initialized_by_client and method is not None and method != types.INITIALIZE:
            if is_request:
                self._refuse(message.id, SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized yet")
            else:
                logger.info("%s before initialize: ignored", method)
            return None
        if self._shutdown and method is not None:
            if is_request:
                self._refuse(message.id, INVALID_REQUEST, f"{method}: the server is shutting down")
            return None
        if method == types.INITIALIZE:
            self.initialized_by_client = True
        return super().handle_message(message)

    def _refuse(self, msg_id, code: int, text: str) -> None:
        self._send_response(msg_id, None, types.ResponseError(code=code, message=text))

    def _log(self, text: str) -> None:
        try:
            self._server.window_log_message(types.LogMessageParams(type=types.MessageType.Log, message=text))
        except Exception:
            logger.info("%s", text)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        document = self.workspace.text_documents.get(_unquote(uri))
        if document is None:
            self._log(f"amp-lint: change of a document that is not open ignored: {uri}")
            return
        held = document.version
        new = params.text_document.version
        if isinstance(held, int) and isinstance(new, int) and new <= held:
            self._log(f"amp-lint: change to version {new} of {uri} ignored (version {held} is held)")
            return
        yield from super().lsp_text_document__did_change(params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        if self.workspace.text_documents.get(_unquote(uri)) is None:
            self._log(f"amp-lint: close of a document that is not open ignored: {uri}")
            return
        yield from super().lsp_text_document__did_close(params)


    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: types.DidChangeNotebookDocumentParams):
        uri = params.notebook_document.uri
        if self.workspace.get_notebook_document(notebook_uri=uri) is None:
            self._log(f"amp-lint: change of a notebook that is not open ignored: {uri}")
            return
        yield from super().lsp_notebook_document__did_change(params)


def _unquote(uri: str) -> str:
    from urllib.parse import unquote

    return unquote(uri)


async def read_messages(read, protocol, stop, replay: bytes = b"") -> None:
    """Feed `protocol` the messages of the byte stream that `read()` (awaitable, b"" at the end) yields,
    after `replay` (what `fast_start` read before pygls was loaded)."""
    buffer = bytearray(replay)
    length: Optional[int] = None  # of the body being read, once its header block is complete
    while not stop.is_set():
        if length is None:
            end = _HEADER_END.search(buffer)
            if end is None:
                if len(buffer) > 65536:  # no header end in sight: keep only from the last header start
                    start = buffer.rfind(b"Content-Length")
                    del buffer[: start if start > 0 else len(buffer) - 16]
                chunk = await read()
                if not chunk:
                    return
                buffer += chunk
                continue
            header = bytes(buffer[: end.start()])
            del buffer[: end.end()]
            matches = list(_CONTENT_LENGTH.finditer(header))
            value = matches[-1].group(1).strip() if matches else b""
            if not value.isdigit() or not 0 < int(value) <= MAX_MESSAGE_BYTES:
                logger.warning("malformed header skipped: %r", header[-200:])
                continue
            length = int(value)
            continue
        if len(buffer) < length:
            # A length too large: the next message's header arrives inside the "body", right after a whole
            # JSON object (a body that merely holds the words, in a document's text, is not cut short).
            early = _next_header_after_object(buffer)
            if early > 0:
                body = bytes(buffer[:early])
                del buffer[:early]
                length = None
                _dispatch(body, protocol)
                continue
            chunk = await read()
            if not chunk:
                return
            buffer += chunk
            continue
        body = bytes(buffer[:length])
        del buffer[:length]
        length = None
        _dispatch(body, protocol)


def _next_header_after_object(buffer: bytearray) -> int:
    """Where a header starts right after a complete JSON object at the start of `buffer`; -1 if nowhere."""
    start = buffer.find(b"}Content-Length")
    while start >= 0:
        try:
            json.loads(bytes(buffer[: start + 1]))
            return start + 1
        except ValueError:
            start = buffer.find(b"}Content-Length", start + 1)
    return -1


def _dispatch(body: bytes, protocol) -> None:
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except Exception as error:
        request = _request_of(body)
        if request is not None:  # JSON-RPC: a request is answered, whatever its params hold
            msg_id, method = request
            text = f"{method}: invalid params ({type(error).__name__})"
            logger.warning("%s", text)
            protocol._refuse(msg_id, INVALID_PARAMS, text)
            return
        logger.warning("undecodable message skipped (%s): %r", type(error).__name__, body[:200])
        return
    try:
        protocol.handle_message(message)
    except Exception:
        logger.exception("unable to handle a message")


def _request_of(body: bytes):
    """(id, method) of a body that is a JSON-RPC request, though one whose params do not validate; else None."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    msg_id = message.get("id")
    if isinstance(msg_id, bool) or not isinstance(msg_id, (int, str)):
        return None  # a notification (no id) gets no answer
    return msg_id, message["method"]


def serve(server, stdin, stdout, replay: bytes = b"") -> None:
    """Run `server` (a pygls LanguageServer) over binary stdin/stdout with the forgiving reader; `replay`:
    the bytes read from stdin before (`fast_start`)."""
    from threading import Event

    from pygls.io_ import StdoutWriter

    server._stop_event = stop = Event()
    server.protocol.set_writer(StdoutWriter(stdout))
    fd = stdin.fileno()

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def read():
            return loop.run_in_executor(server.thread_pool, os.read, fd, 1 << 16)

        await read_messages(read, server.protocol, stop, replay)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        logger.error("the client went away")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


async def watch_parent(pid: int, interval: float = 1.0) -> None:
    """Exit when the client's process is gone (LSP: `processId`, "the server should exit")."""
    while True:
        await asyncio.sleep(interval)
        if not _alive(pid):
            logger.warning("the client process %s is gone: exiting", pid)
            sys.stderr.flush()
            os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True
