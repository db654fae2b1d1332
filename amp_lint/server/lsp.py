"""The language server (pygls 2): diagnostics as you type, quick fixes, `# noqa`, fix-all, reloaded settings.

Each open document (or notebook) is checked in-process by the engine, in one worker thread so that the
server keeps answering while a big file is analysed; edits are debounced on both edges (an edit after a pause
of at least `debounce` seconds is checked at once, while the check thread is free; edits that follow each other
faster wait until typing pauses for `debounce` seconds) and a result that arrives after a newer edit is dropped. The last result
per document is kept: code actions are built from it (from the engine's fix edits), not recomputed.

A check that fails (a bug of ours) is logged to the client (`window/logMessage`) and the server goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from amp_lint import __version__
from amp_lint.diagnostics import Diagnostic, FixSummary
from amp_lint.server import hover as rule_help
from amp_lint.server.actions import FIX_ALL, CodeActions
from amp_lint.server.document_check import MAX_DOCUMENT_CHARS, SOURCE, DocumentCheck, check_document, config_uri, error_json, is_python  # noqa: F401
from amp_lint.server.documents import Cell, DocumentView, NotebookView, TextView
from amp_lint.server.first_look import first_look
from amp_lint.server.memory import release_memory, settle_step, warm_up
from amp_lint.server.protocol import AmpLintProtocol, watch_parent
from amp_lint.server.settings import WATCHED_NAMES, ServerSettings, debounce_option, parse_options

DEFAULT_DEBOUNCE = 0.05  # seconds without edits before a document is checked again
_WATCHER_ID = "amp-lint-config-watcher"


@dataclass
class Checked:
    """The last check of one document: the view it ran on, its findings (in program coordinates) and
    the LSP diagnostics published for each uri."""

    view: DocumentView
    findings: List[Diagnostic]
    published: Dict[str, List[Tuple[types.Diagnostic, Optional[Diagnostic]]]] = field(default_factory=dict)
    # The findings' fixes with their text edits, and the fix-all edit: computed on the first code-action
    # request that needs them (an editor asks for code actions at every cursor move).
    fixes: Optional[Dict[tuple, FixSummary]] = None
    fix_all: Optional[Tuple[Optional[types.WorkspaceEdit]]] = None


class AmpLintServer(CodeActions, LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "amp-lint",
            __version__,
            protocol_cls=AmpLintProtocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[
                    types.NotebookDocumentFilterWithCells(
                        cells=[types.NotebookCellLanguage(language="python")], notebook="jupyter-notebook"
                    )
                ],
                save=True,
            ),
        )
        self.settings = ServerSettings()
        self.debounce = DEFAULT_DEBOUNCE
        self.results: Dict[str, Checked] = {}
        self.republish: set = set()  # keys whose next check is published even if unchanged (a save)
        self.pending: Dict[str, asyncio.Task] = {}
        self.last_change: Dict[str, float] = {}  # document key -> when its last change came (loop time)
        self.checking = 0  # checks running in the check thread
        # One thread runs the checks, one after the other (the engine's checkers are shared).
        self.checks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amp-lint-server-check")
        self.shown_errors: set = set()
        self.option_problems: List[str] = []  # refused initialization options, shown once initialized
        self.unit_checkers: Dict[object, object] = {}  # CheckConfig -> engine.units.UnitChecker
        self.to_settle: Dict[str, object] = {}  # document key -> the UnitChecker with a verification pending
        self.settling: Dict[str, asyncio.Task] = {}
        self.engine_loaded = False  # the engine, rules and LibCST: imported by the warm-up or a first check
        self.early: Dict[str, object] = {}  # uri -> `server.early.EarlyResult`, checked before pygls was loaded

    # --- logging ------------------------------------------------------------------------------------

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def show(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))
        self.log(message, kind)

    # --- documents ----------------------------------------------------------------------------------

    def view_of(self, key: str) -> Optional[DocumentView]:
        """The current view of an open document or notebook (None when it is closed or not Python)."""
        notebook = self.workspace.get_notebook_document(notebook_uri=key)
        if notebook is not None:
            cells = []
            for cell in notebook.cells:
                document = self.workspace.text_documents.get(unquote(cell.document))
                text = document.source if document is not None else ""
                language = document.language_id if document is not None else None
                is_code = cell.kind == types.NotebookCellKind.Code and language in (None, "python")
                cells.append(Cell(cell.document, text, is_code, document.version if document is not None else None))
            return NotebookView(key, self.path_of(key), cells, notebook.version)
        document = self.workspace.text_documents.get(unquote(key))
        if document is None or not is_python(document.uri, document.language_id):
            return None
        return TextView(key, self.path_of(key), document.source, document.version)

    def path_of(self, uri: str) -> str:
        """The file path of a document: its own, or for an unsaved one a name in the first workspace folder."""
        if urlparse(uri).scheme == "file":
            path = to_fs_path(uri)
            if path:
                return path
        folders = list(self.workspace.folders.values())
        base = to_fs_path(folders[0].uri) if folders else (self.workspace.root_path or os.getcwd())
        name = os.path.basename(unquote(urlparse(uri).path)) or "untitled.py"
        return os.path.join(base or os.getcwd(), name)

    def key_of(self, uri: str) -> str:
        """The key results are kept under: the notebook's uri for a cell, else the document's."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return notebook.uri if notebook is not None else uri

    # --- checking -----------------------------------------------------------------------------------

    def schedule(self, key: str, delay: float) -> None:
        """Check `key` after `delay` seconds without another edit; the newest request wins."""
        previous = self.pending.pop(key, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.ensure_future(self._check_later(key, delay))
        self.pending[key] = task
        task.add_done_callback(lambda done: self.pending.pop(key, None) if self.pending.get(key) is done else None)

    def changed(self, key: str) -> None:
        """A change of `key`: checked at once after a pause of `debounce` (the first edit of a burst, the
        usual edit after reading), else once the burst pauses for `debounce` seconds."""
        now = asyncio.get_running_loop().time()
        previous = self.last_change.get(key)
        self.last_change[key] = now
        paused = previous is None or now - previous >= self.debounce
        self.schedule(key, 0 if paused and not self.checking else self.debounce)

    async def _check_later(self, key: str, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        await self.check_now(key)

    async def check_now(self, key: str) -> Optional[Checked]:
        view = self.view_of(key)
        if view is None:
            return None
        early = self.early.pop(key, None)
        if early is not None and isinstance(view, TextView) and early.matches(view):
            return self._adopt(key, view, early)
        if not self.engine_loaded and key not in self.results and isinstance(view, TextView):
            await self._first_look(key, view)
        self.checking += 1
        try:
            checked, messages = await self.in_check_thread(self._check, view)
        except Exception as error:  # never fatal: log it, keep the last diagnostics
            self.log(f"amp-lint: checking {view.path} failed: {type(error).__name__}: {error}\n{traceback.format_exc()}", types.MessageType.Error)
            return None
        finally:
            self.checking -= 1
        self.engine_loaded = True
        current = self.view_of(key)
        if current is None or current.version != view.version:
            return None  # edited (or closed) meanwhile: a newer check is on its way
        try:
            self.publish(key, checked, messages)
        except Exception as error:
            self.log(f"amp-lint: publishing the diagnostics of {view.path} failed: {type(error).__name__}: {error}", types.MessageType.Error)
        if key in self.to_settle and key not in self.settling:
            self.settling[key] = asyncio.ensure_future(self._settle(key))
        return checked

    async def _settle(self, key: str) -> None:
        """While no edit waits, verify the document's groups one at a time in the check thread (see
        `engine.units.UnitChecker.check`): after it, an edit inside one function checks that function."""
        try:
            await asyncio.sleep(0)  # after the check that asked for it is done
            while not any(not task.done() for task in self.pending.values()):  # an edit waits: it goes first
                checker = self.to_settle.get(key)
                if checker is None or not await self.in_check_thread(settle_step, checker, key):
                    self.to_settle.pop(key, None)
                    return
        except Exception as error:  # a bug of ours: the document stays checked whole
            self.to_settle.pop(key, None)
            self.log(f"amp-lint: verifying the groups of {key} failed: {type(error).__name__}: {error}", types.MessageType.Error)
        finally:
            self.settling.pop(key, None)

    async def _first_look(self, key: str, view: TextView) -> None:
        """Before the engine is loaded: publish at once what needs none (`first_look`); the full check follows."""
        try:
            errors = await asyncio.get_running_loop().run_in_executor(None, first_look, view, self.settings.for_path)
        except Exception as error:  # the full check will tell
            self.log(f"amp-lint: a first look at {view.path} failed: {type(error).__name__}: {error}")
            return
        current = self.view_of(key)
        if errors is not None and current is not None and current.version == view.version and key not in self.results:
            units = self.workspace.position_codec.client_num_units
            diagnostics = [(self.protocol._converter.structure(error_json(view, e, units)[1], types.Diagnostic), None) for e in errors]
            self.publish(key, Checked(view, [], {view.key: diagnostics}))

    def _check(self, view: DocumentView) -> Tuple[Checked, list]:
        """In the check thread: run the engine over the view's program, unit by unit (`engine.units`)."""
        result = check_document(view, self.settings.for_path(view.path), self.unit_checker, self.workspace.position_codec.client_num_units)
        return self._checked(view, result), result.messages

    def _checked(self, view: DocumentView, result: DocumentCheck) -> Checked:
        """A check's result kept for code actions and hover, its diagnostics as lsprotocol's objects."""
        if result.checker is not None and view.key in result.checker.pending:
            self.to_settle[view.key] = result.checker
        if result.ran:
            release_memory()  # the checker ran: hand its freed tree back to the system
        structure = self.protocol._converter.structure
        published = {uri: [(structure(d, types.Diagnostic), f) for d, f in pairs] for uri, pairs in result.published.items()}
        return Checked(view, result.findings, published)

    def unit_checker(self, config):
        found = self.unit_checkers.get(config)
        if found is None:
            from amp_lint.engine.units import UnitChecker

            if len(self.unit_checkers) > 8:  # settings changed many times: start afresh
                self.unit_checkers.clear()
            found = self.unit_checkers[config] = UnitChecker(config, eager=False)
        return found

    def warm_up(self) -> None:
        """In the check thread, after `initialize` is answered: import the engine, the rules and LibCST."""
        warm_up()
        self.engine_loaded = True

    async def warm_up_after_the_first_checks(self) -> None:
        await asyncio.sleep(0.2)  # the documents opened right after `initialized` are checked first
        await self.in_check_thread(self.warm_up)

    def _adopt(self, key: str, view: TextView, early) -> Checked:
        """The check `early` made of this very text before pygls was loaded: kept as this server's result, and
        published unless it was already (`server.early`)."""
        early.check.ran = False  # (its memory is handed back after the check that follows)
        checked = self._checked(view, early.check)
        self.publish(key, checked, early.check.messages, send=not early.published)
        if early.check.checker is None and not self.settings.for_path(view.path).excluded:
            self.schedule(key, 0)  # checked whole: now unit by unit (the same diagnostics, not published again)
        return checked

    def publish(self, key: str, checked: Checked, messages: Sequence[str] = (), send: bool = True) -> None:
        previous = self.results.get(key)
        self.results[key] = checked
        for message in messages:
            kind = types.MessageType.Error
            if isinstance(message, tuple):  # (text, kind): a notice, not an error
                message, kind = message[0], types.MessageType(message[1])
            if message not in self.shown_errors:
                self.shown_errors.add(message)
                if "internal error" in message:  # our bug: logged, not shown in the user's face
                    self.log(f"amp-lint: {message}", types.MessageType.Error)
                else:  # a broken configuration file, a document too large: the user must see it
                    self.show(f"amp-lint: {message}", kind)
        if not send or (key not in self.republish and self._published_already(previous, checked)):
            return
        self.republish.discard(key)
        stale = set(previous.published) - set(checked.published) if previous is not None else set()
        for uri in stale:  # a cell that was removed
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        version = checked.view.version if isinstance(checked.view, TextView) else None
        for uri, pairs in checked.published.items():
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(
                    uri=uri,
                    diagnostics=[diagnostic for diagnostic, _ in pairs],
                    version=version if isinstance(version, int) else None,
                )
            )

    @staticmethod
    def _published_already(previous: Optional[Checked], checked: Checked) -> bool:
        """The same version with the same diagnostics as the last publish (a document checked again, unit by unit)."""
        if previous is None or previous.view.version != checked.view.version or set(previous.published) != set(checked.published):
            return False
        return all([d for d, _ in previous.published[uri]] == [d for d, _ in pairs] for uri, pairs in checked.published.items())

    def forget(self, key: str, uris: Sequence[str] = ()) -> None:
        for checker in self.unit_checkers.values():
            checker.forget(key)
        task = self.pending.pop(key, None)
        if task is not None:
            task.cancel()
        self.to_settle.pop(key, None)
        self.last_change.pop(key, None)
        checked = self.results.pop(key, None)
        for uri in set(uris) | (set(checked.published) if checked is not None else set()):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def recheck_all(self) -> None:
        keys = set(self.results)
        keys |= {uri for uri in self.workspace.notebook_documents}
        keys |= {uri for uri, doc in self.workspace.text_documents.items() if self.key_of(uri) == uri}
        for key in keys:
            self.schedule(key, 0)

    async def current(self, key: str) -> Optional[Checked]:
        """The result for the document as it is now (checked again if an edit is pending)."""
        checked = self.results.get(key)
        view = self.view_of(key)
        if view is None:
            return None
        if checked is None or checked.view.version != view.version or key in self.pending:
            task = self.pending.pop(key, None)
            if task is not None:
                task.cancel()
            return await self.check_now(key)
        return checked

    async def in_check_thread(self, function, *args):
        """Run engine work in the check thread (never in the event loop, never beside another check)."""
        return await asyncio.get_running_loop().run_in_executor(self.checks, function, *args)


# --- wiring -----------------------------------------------------------------------------------------


def create_server() -> AmpLintServer:
    server = AmpLintServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: AmpLintServer, params: types.InitializeParams) -> None:
        options = params.initialization_options
        overrides, problems = parse_options(options)
        debounce = debounce_option(options)
        if debounce is not None:
            ls.debounce = debounce
        ls.settings.set_overrides(overrides)
        ls.option_problems = problems
        if isinstance(params.process_id, int) and params.process_id > 0 and params.process_id != os.getpid():
            ls.parent_watch = asyncio.ensure_future(watch_parent(params.process_id))

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AmpLintServer, params: types.InitializedParams) -> None:
        # `initialize` was answered before any rule or LibCST was imported: load them now, off the loop.
        ls.warming = asyncio.ensure_future(ls.warm_up_after_the_first_checks())
        for problem in ls.option_problems:
            ls.show(f"amp-lint: {problem}")
        workspace = ls.client_capabilities.workspace
        watched = workspace.did_change_watched_files if workspace is not None else None
        if watched is not None and watched.dynamic_registration:
            watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in WATCHED_NAMES]
            try:
                await ls.client_register_capability_async(
                    types.RegistrationParams(
                        registrations=[
                            types.Registration(
                                id=_WATCHER_ID,
                                method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
                            )
                        ]
                    )
                )
            except Exception as error:  # the client refused: settings are then read at start only
                ls.log(f"amp-lint: could not watch the configuration files: {error}", types.MessageType.Warning)
        else:
            ls.log("amp-lint: the client cannot watch files; configuration changes apply after a restart", types.MessageType.Info)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: AmpLintServer, params: None) -> None:
        for task in list(ls.pending.values()):
            task.cancel()
        ls.pending.clear()
        ls.checks.shutdown(wait=False, cancel_futures=True)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AmpLintServer, params: types.DidOpenTextDocumentParams) -> None:
        if config_uri(params.text_document.uri, WATCHED_NAMES):
            return
        ls.schedule(params.text_document.uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AmpLintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.changed(ls.key_of(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: AmpLintServer, params: types.DidSaveTextDocumentParams) -> None:
        if config_uri(params.text_document.uri, WATCHED_NAMES):  # a configuration file edited in the editor itself
            ls.settings.reload()
            ls.shown_errors.clear()
            ls.recheck_all()
            return
        key = ls.key_of(params.text_document.uri)
        ls.republish.add(key)  # a save is answered with a publish, even of the same diagnostics
        ls.schedule(key, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AmpLintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri, [params.text_document.uri])

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: AmpLintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: AmpLintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.changed(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: AmpLintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: AmpLintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.forget(params.notebook_document.uri, [cell.uri for cell in params.cell_text_documents])

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files(ls: AmpLintServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(config_uri(change.uri, WATCHED_NAMES) for change in params.changes):
            ls.settings.reload()
            ls.shown_errors.clear()
            ls.log("amp-lint: configuration changed; checking the open documents again", types.MessageType.Info)
            ls.recheck_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def folders_changed(ls: AmpLintServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        ls.settings.reload()  # an unsaved document's settings follow the first folder
        ls.recheck_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def configuration_changed(ls: AmpLintServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if not isinstance(settings, dict):
            return
        ours = settings.get("amp-lint", settings.get("ampLint"))
        if not isinstance(ours, dict):
            return
        overrides, problems = parse_options(ours)
        for problem in problems:
            ls.show(f"amp-lint: {problem}")
        ls.settings.set_overrides(overrides)
        ls.recheck_all()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
    )
    async def code_action(ls: AmpLintServer, params: types.CodeActionParams) -> Optional[List[types.CodeAction]]:
        uri = params.text_document.uri
        key = ls.key_of(uri)
        try:
            checked = await ls.current(key)
            if checked is None:
                return None
            return await ls.code_actions(checked, uri, params) or None
        except Exception as error:  # a bug in building an action must not take the server down
            ls.log(f"amp-lint: code actions failed: {type(error).__name__}: {error}\n{traceback.format_exc()}", types.MessageType.Error)
            return None

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: AmpLintServer, params: types.HoverParams) -> Optional[types.Hover]:
        uri = params.text_document.uri
        try:
            checked = ls.results.get(ls.key_of(uri))
            published = checked.published.get(uri, []) if checked is not None else []
            document = ls.workspace.text_documents.get(unquote(uri))
            line = ""
            if document is not None and params.position.line < len(document.lines):
                line = document.lines[params.position.line]
            units = ls.workspace.position_codec.client_num_units
            codes = rule_help.codes_at(line, params.position, [d for d, _ in published], units)
            if not codes:
                return None
            pages = await ls.in_check_thread(lambda: [rule_help.rule_markdown(code) for code in codes])
            text = "\n\n---\n\n".join(page for page in pages if page)
            if not text:
                return None
            return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))
        except Exception as error:
            ls.log(f"amp-lint: hover failed: {type(error).__name__}: {error}", types.MessageType.Error)
            return None

    @server.feature(
        types.TEXT_DOCUMENT_DIAGNOSTIC,
        types.DiagnosticOptions(identifier=SOURCE, inter_file_dependencies=False, workspace_diagnostics=False),
    )
    async def pull_diagnostics(ls: AmpLintServer, params: types.DocumentDiagnosticParams):
        uri = params.text_document.uri
        items: List[types.Diagnostic] = []
        try:
            checked = await ls.current(ls.key_of(uri))
            if checked is not None:
                items = [diagnostic for diagnostic, _ in checked.published.get(uri, [])]
        except Exception as error:
            ls.log(f"amp-lint: diagnostics of {uri} failed: {type(error).__name__}: {error}", types.MessageType.Error)
        return types.RelatedFullDocumentDiagnosticReport(items=items)

    return server


def serve_stdio(replay: bytes = b"", answered_id=None, early=None) -> int:
    """Serve over stdio; `replay`: the bytes `fast_start` read already, `answered_id`: the `initialize` it
    answered, `early`: what it checked and published meanwhile (`server.early.Early`)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="amp-lint server: %(message)s")
    server = create_server()
    if early is not None:
        server.early.update(early.results)
        server.engine_loaded = True
    # Standard output is the protocol's: anything printed by mistake would corrupt it, so it goes to stderr.
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    from amp_lint.server.protocol import serve

    server.protocol.answered_id = answered_id
    serve(server, stdin, stdout, replay)  # pygls's loop, with a reader that survives malformed headers
    # LSP: exit after shutdown is a success; exit without it (or a client that went away) is not.
    return 0 if getattr(server.protocol, "_shutdown", False) else 1
