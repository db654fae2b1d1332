"""`amp-lint server` end to end: a real LSP client (pytest-lsp) talks to the server over stdio.

Each test starts the server as a user's editor would (`python -m amp_lint server`), in a temporary folder
with its own configuration files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
# amp-lint is on no package index: the hint names pygls itself, which installs wherever amp-lint came from.
MISSING_EXTRA = (
    "amp-lint server needs pygls (the lsp extra): pip install 'pygls>=2.1,<3' in amp-lint's environment "
    "(a tool install: uv tool install --with 'pygls>=2.1,<3' <amp-lint checkout>, or pipx inject amp-lint pygls)"
)

# A module-level import blocker: the interpreter sees no pygls, as in an install without the extra.
BLOCK_PYGLS = """
import sys
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pygls", "lsprotocol"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Blocker())
"""


def test_server_without_the_extra_says_how_to_install_it():
    code = BLOCK_PYGLS + "from amp_lint.cli import main\nsys.argv = ['amp-lint', 'server']\nmain()\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == MISSING_EXTRA
    assert done.stdout == ""


def test_the_core_never_imports_pygls():
    code = (
        "import sys, amp_lint.cli, amp_lint.server\n"
        "from amp_lint.cli import main\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol')], sorted(sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([sys.executable, "-m", "amp_lint", "--help"], capture_output=True, text=True, env=ENV, timeout=60)
    assert "server" in listed.stdout


def test_the_readme_editor_configurations_run_the_server_with_options_it_knows():
    """The README's VS Code, Neovim and Helix set-ups start `amp-lint server` and pass options the server reads."""
    import re

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from amp_lint.server.settings import parse_options

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## In the editor") :]
    section = section[: section.index("\n## ", 1)]
    vscode = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    assert [vscode["glspc.server.command"], *vscode["glspc.server.commandArguments"]] == ["amp-lint", "server"]
    helix = tomllib.loads(re.search(r"```toml\n(.*?)```", section, re.S).group(1))
    server = helix["language-server"]["amp-lint"]
    assert [server["command"], *server["args"]] == ["amp-lint", "server"]
    assert "amp-lint" in helix["language"][0]["language-servers"]
    neovim = re.findall(r"cmd = (\{[^}]*\})", section)
    assert len(neovim) == 3 and set(neovim) == {'{ "amp-lint", "server" }'}
    for options in (vscode["glspc.server.initializationOptions"], server["config"]):
        assert parse_options(options) == ({"unsafe_fixes": False}, [])
    assert '"source.fixAll.amp-lint"' in section


# --- the end-to-end tests need the extra and pytest-lsp (the `test` extra installs both) ------------

try:
    import pytest_asyncio
    import pytest_lsp
    import pytest_lsp.client
    from lsprotocol import types
    from pygls import protocol as pygls_protocol
    from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
except ImportError:  # pragma: no cover - an install without the test extra
    pytest_lsp = None


def e2e(test):
    """An end-to-end test: async, on the module's event loop (one shared server), skipped without pytest-lsp."""
    if pytest_lsp is None:
        return pytest.mark.skip(reason="needs pytest-lsp (pip install 'amp-lint[test]')")(test)
    return pytest.mark.asyncio(loop_scope="module")(test)


SERVER = [sys.executable, "-m", "amp_lint", "server"]

DEPRECATED_SCALER = "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=use_amp)\n"
UNSCALED_BACKWARD = textwrap.dedent(
    """\
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss)
        loss.backward()
        scaler.step(optimizer)
        scaler.update()
    """
)
HELPER_STEP = textwrap.dedent(
    """\
    import torch
    scaler = torch.amp.GradScaler("cuda")
    def apply(opt):
        opt.step()
    for x in data:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        apply(opt)
        scaler.update()
    """
)
CUSTOM_FWD = textwrap.dedent(
    """\
    import torch
    class F(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd
        def forward(ctx, x):
            return x

        @staticmethod
        @torch.amp.custom_bwd
        def backward(ctx, g):
            return g

    def run(x):
        with torch.autocast("cuda"):
            return F.apply(x)
    """
)


def _client_factory(registrations):
    """pytest-lsp's test client, which also records every publishDiagnostics and accepts registrations."""

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams):
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append((params.uri, params.version, codes(params.diagnostics)))

    def register(client: LanguageClient, params: types.RegistrationParams):
        registrations.extend(params.registrations)

    def make() -> LanguageClient:
        client = LanguageClient(converter_factory=pygls_protocol.default_converter)
        client.published = []  # (uri, version, codes), in order
        features = dict(pytest_lsp.client.DEFAULT_CLIENT_FEATURES)
        features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish
        features[types.CLIENT_REGISTER_CAPABILITY] = register
        pytest_lsp.client.register_lsp_features(client, features)
        return client

    return make


def vscode_capabilities():
    """VS Code's capabilities (1.65, as pytest-lsp records them) and, as newer VS Code, notebook sync."""
    import attrs

    notebooks = types.NotebookDocumentClientCapabilities(synchronization=types.NotebookDocumentSyncClientCapabilities())
    return attrs.evolve(client_capabilities("visual-studio-code"), notebook_document=notebooks)


@contextlib.asynccontextmanager
async def session(folders, *, capabilities=None, options=None, command=SERVER, registrations=None):
    """A started and initialized client; shut down cleanly afterwards (the server must exit 0)."""
    registrations = [] if registrations is None else registrations
    config = ClientServerConfig(server_command=command, server_env=ENV, client_factory=_client_factory(registrations))
    client = await config.start()
    folders = [Path(f) for f in folders]
    client.initialize_result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities or vscode_capabilities(),
            root_uri=folders[0].as_uri() if folders else None,
            workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f in folders],
            initialization_options=options,
        )
    )
    try:
        yield client
        await asyncio.wait_for(client.shutdown_session(), 30)
        assert client._server.returncode == 0
    finally:
        await _stop(client)


async def _stop(client):
    """Stop the client; a server still running (a failed test) is killed, so that nothing hangs."""
    if client._server is not None and client._server.returncode is None:
        client._server.kill()
    await client.stop()


async def wait_for(predicate, timeout=20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for the server")
        await asyncio.sleep(0.01)


async def diagnostics(client, uri, where=lambda found: True):
    return await wait_for(lambda: uri in client.diagnostics and where(client.diagnostics[uri]) and client.diagnostics[uri])


async def no_diagnostics(client, uri):
    await wait_for(lambda: uri in client.diagnostics and not client.diagnostics[uri])


def open_file(client, path: Path, text: str, version: int = 1) -> str:
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text))
    )
    return uri


def change(client, uri, version, text=None, edit=None):
    """A full-text change (`text`) or an incremental one (`edit`: (range, new text))."""
    if text is not None:
        content = types.TextDocumentContentChangeWholeDocument(text=text)
    else:
        content = types.TextDocumentContentChangePartial(range=edit[0], text=edit[1])
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(uri=uri, version=version), [content])
    )


def codes(found):
    return sorted(d.code for d in found)


async def actions(client, uri, found, only=None):
    start = min((d.range.start for d in found), key=lambda p: (p.line, p.character))
    end = max((d.range.end for d in found), key=lambda p: (p.line, p.character))
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start, end),
            context=types.CodeActionContext(diagnostics=list(found), only=only),
        )
    )
    return result or []


def edits_by_uri(edit) -> dict:
    """A WorkspaceEdit's text edits per document, whether sent as `changes` or as versioned `documentChanges`."""
    if edit.document_changes:
        return {change.text_document.uri: change.edits for change in edit.document_changes}
    return dict(edit.changes)


def applied(text: str, edits) -> str:
    """`text` with LSP text edits applied (UTF-16 columns, as the client negotiated by default)."""
    lines = text.splitlines(keepends=True)

    def offset(position):
        if position.line >= len(lines):
            return len(text)
        line = lines[position.line]
        units = 0
        for index, char in enumerate(line):
            if units >= position.character:
                return sum(len(l) for l in lines[: position.line]) + index
            units += 2 if ord(char) > 0xFFFF else 1
        return sum(len(l) for l in lines[: position.line]) + len(line.rstrip("\r\n"))

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
        lines = text.splitlines(keepends=True)
    return text


if pytest_lsp is not None:

    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def shared(tmp_path_factory):
        """One server for the tests that need no settings of their own: (client, its workspace folder)."""
        folder = tmp_path_factory.mktemp("workspace")
        async with session([folder]) as client:
            yield client, folder


# --- diagnostics -----------------------------------------------------------------------------------


@e2e
async def test_diagnostics_on_open_carry_code_severity_range_link_and_related(shared):
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "train1.py", HELPER_STEP)
    found = await diagnostics(client, uri)
    by_code = {d.code: d for d in found}
    step = by_code["AMP020"]
    assert step.source == "amp-lint"
    assert step.severity == types.DiagnosticSeverity.Error
    # `opt.step()` on line 4 (0-based 3), columns 4..14
    assert (step.range.start.line, step.range.start.character, step.range.end.line, step.range.end.character) == (3, 4, 3, 14)
    # the rule's page in this checkout (the docs are generated into docs/rules/)
    # the rule's page that ships in the package (package data: a wheel install has it too)
    assert step.code_description.href == (ROOT / "amp_lint" / "server" / "rule_pages" / "AMP020.md").as_uri()
    [related] = step.related_information
    assert related.location.uri == uri
    assert related.message == "reached through `apply(opt)`"
    assert (related.location.range.start.line, related.location.range.start.character) == (8, 4)
    assert (related.location.range.end.line, related.location.range.end.character) == (8, 14)


@e2e
async def test_columns_are_utf16_code_units_after_non_ascii_text(shared):
    # "é" is one UTF-16 unit, "😀" two: the finding after them starts at character 4 + 2 + 1 + 2 + 2 = ...
    prefix = 'x = "é😀"; '
    text = "import torch\n" + prefix + "scaler = torch.cuda.amp.GradScaler()\n"
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "unicode.py", text)
    [found] = await diagnostics(client, uri)
    assert found.code == "AMP072"
    line = text.splitlines()[1]
    start = line.index("torch.cuda")
    utf16 = lambda s: len(s.encode("utf-16-le")) // 2  # noqa: E731
    assert found.range.start.line == 1
    assert found.range.start.character == utf16(line[:start]) == start + 1  # the emoji counts twice
    assert found.range.end.character == utf16(line[: line.index("()")])  # `torch.cuda.amp.GradScaler`


@e2e
async def test_utf8_position_encoding_when_the_client_prefers_it(tmp_path):
    capabilities = client_capabilities("neovim")  # offers utf-8 first
    text = 'import torch\nx = "é"; scaler = torch.cuda.amp.GradScaler()\n'
    async with session([tmp_path], capabilities=capabilities) as client:
        uri = open_file(client, tmp_path / "utf8.py", text)
        [found] = await diagnostics(client, uri)
        line = text.splitlines()[1]
        assert found.range.start.character == len(line[: line.index("torch.cuda")].encode("utf-8"))


@e2e
async def test_a_burst_of_edits_is_checked_once_for_the_newest_text(tmp_path):
    """Typing one keystroke at a time, faster than the debounce: the newest text is checked once, when the
    burst pauses. The first keystroke follows a pause, so it is checked at once (the leading edge); its result
    is published only if no newer keystroke had arrived when its check ended, which on a loaded machine can
    happen. Nothing between the first and the last version is ever published. A debounce of 1 s keeps the
    keystrokes a burst however slowly a loaded machine delivers them."""
    async with session([tmp_path], options={"debounce": 1000}) as client:
        uri = open_file(client, tmp_path / "typing.py", "import torch\n")
        await no_diagnostics(client, uri)
        await asyncio.sleep(0.2)
        before = len(client.published)
        text = "import torch\n"
        for version, char in enumerate("scaler = torch.cuda.amp.GradScaler()\n", start=2):
            text += char
            change(client, uri, version, text=text)
        found = await diagnostics(client, uri, where=lambda found: codes(found) == ["AMP072"])
        assert codes(found) == ["AMP072"]
        await asyncio.sleep(1.5)  # longer than the debounce: any later check would have been published
        burst = [entry for entry in client.published[before:] if entry[0] == uri]
        assert burst[-1] == (uri, version, ["AMP072"])
        assert burst[:-1] in ([], [(uri, 2, [])])  # at most the leading edge, never a version in between
        # An incremental edit that fixes it by hand (`cuda.amp` -> `amp`, and a device): the finding goes.
        change(client, uri, version + 1, edit=(types.Range(types.Position(1, 15), types.Position(1, 36)), 'amp.GradScaler("cuda")'))
        await wait_for(lambda: client.published[-1] == (uri, version + 1, []))


@e2e
async def test_save_checks_and_close_clears(shared):
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "train2.py", DEPRECATED_SCALER)
    assert codes(await diagnostics(client, uri)) == ["AMP072"]
    client.diagnostics.pop(uri)
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    assert codes(await diagnostics(client, uri)) == ["AMP072"]
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    await no_diagnostics(client, uri)


@e2e
async def test_a_syntax_error_is_an_error_diagnostic(shared):
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "broken.py", DEPRECATED_SCALER + "def f(:\n")
    [found] = await diagnostics(client, uri)
    assert found.severity == types.DiagnosticSeverity.Error
    assert found.code is None and found.range.start.line >= 2  # the parser stops at or after `(:`
    assert "syntax error" in found.message


# --- code actions ----------------------------------------------------------------------------------


@e2e
async def test_quick_fix_noqa_and_fix_all(shared):
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "train3.py", DEPRECATED_SCALER)
    found = await diagnostics(client, uri)
    offered = await actions(client, uri, found)
    titles = [a.title for a in offered]
    quick = next(a for a in offered if a.kind == types.CodeActionKind.QuickFix and "noqa" not in a.title)
    assert "(unsafe)" not in quick.title and quick.is_preferred
    assert applied(DEPRECATED_SCALER, edits_by_uri(quick.edit)[uri]) == 'import torch\nscaler = torch.amp.GradScaler("cuda", enabled=use_amp)\n'
    noqa = next(a for a in offered if "noqa" in a.title)
    assert applied(DEPRECATED_SCALER, edits_by_uri(noqa.edit)[uri]) == "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=use_amp)  # noqa: AMP072\n"
    fix_all = next(a for a in offered if a.kind == "source.fixAll.amp-lint")
    assert applied(DEPRECATED_SCALER, edits_by_uri(fix_all.edit)[uri]) == 'import torch\nscaler = torch.amp.GradScaler("cuda", enabled=use_amp)\n'
    assert len(titles) == 3
    # Asked for `source.fixAll` only (VS Code's editor.codeActionsOnSave): just that one.
    only = await actions(client, uri, found, only=[types.CodeActionKind.SourceFixAll])
    assert [a.kind for a in only] == ["source.fixAll.amp-lint"]
    # Quick fixes only: no fix-all. And the cursor away from every finding: nothing at all.
    quick_only = await actions(client, uri, found, only=[types.CodeActionKind.QuickFix])
    assert sorted(a.kind for a in quick_only) == ["quickfix", "quickfix"]
    elsewhere = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(0, 3)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert not elsewhere


@e2e
async def test_noqa_is_merged_into_an_existing_comment(shared):
    text = "import torch\nscaler = torch.cuda.amp.GradScaler()  # noqa: E501\n"
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "train4.py", text)
    found = await diagnostics(client, uri)
    noqa = next(a for a in await actions(client, uri, found) if "noqa" in a.title)
    assert applied(text, edits_by_uri(noqa.edit)[uri]) == "import torch\nscaler = torch.cuda.amp.GradScaler()  # noqa: E501, AMP072\n"
    # Applied, the finding is gone.
    change(client, uri, 2, text=applied(text, edits_by_uri(noqa.edit)[uri]))
    client.diagnostics.pop(uri)
    await no_diagnostics(client, uri)


@e2e
async def test_unsafe_fixes_only_when_allowed_and_labelled(shared, tmp_path):
    client, folder = shared
    uri = open_file(client, folder / "fwd.py", CUSTOM_FWD)
    found = await diagnostics(client, uri)
    assert set(codes(found)) == {"AMP062"}
    offered = await actions(client, uri, found)
    assert [a.title for a in offered if "noqa" not in a.title] == []  # no unsafe fix, and fix-all has no safe fix
    async with session([tmp_path], options={"unsafeFixes": True}) as client:
        uri = open_file(client, tmp_path / "fwd.py", CUSTOM_FWD)
        found = await diagnostics(client, uri)
        offered = await actions(client, uri, found)
        fixes = [a for a in offered if "noqa" not in a.title]
        assert fixes and all(a.title.endswith("(unsafe)") and not a.is_preferred for a in fixes)
        assert all(a.kind == types.CodeActionKind.QuickFix for a in fixes)  # fix-all stays safe-only
        fixed = applied(CUSTOM_FWD, edits_by_uri(fixes[0].edit)[uri])
        assert 'custom_fwd(device_type="cuda")' in fixed or 'custom_bwd(device_type="cuda")' in fixed


@e2e
async def test_fix_all_applies_every_safe_fix_in_the_file(shared):
    text = UNSCALED_BACKWARD.replace('torch.amp.GradScaler("cuda")', "torch.cuda.amp.GradScaler()")
    client, tmp_path = shared
    uri = open_file(client, tmp_path / "train5.py", text)
    found = await diagnostics(client, uri)
    assert set(codes(found)) >= {"AMP011", "AMP072"}
    [fix_all] = await actions(client, uri, found, only=["source.fixAll.amp-lint"])
    fixed = applied(text, edits_by_uri(fix_all.edit)[uri])
    assert "scaler.scale(loss).backward()" in fixed and 'torch.amp.GradScaler("cuda")' in fixed
    change(client, uri, 2, text=fixed)
    client.diagnostics.pop(uri)
    await no_diagnostics(client, uri)


# --- settings --------------------------------------------------------------------------------------


@e2e
async def test_configuration_is_the_documents_folder_and_reloads_when_it_changes(tmp_path):
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.amp-lint]\nignore = ["AMP072"]\n', encoding="utf-8")
    registrations = []
    async with session([tmp_path], registrations=registrations) as client:
        uri = open_file(client, tmp_path / "train6.py", DEPRECATED_SCALER)
        await no_diagnostics(client, uri)
        # The server asked to watch the configuration files (the client supports dynamic registration).
        await wait_for(lambda: registrations)
        [registration] = registrations
        assert registration.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
        globs = [w["globPattern"] for w in registration.register_options["watchers"]]
        assert "**/pyproject.toml" in globs and "**/amp-lint.toml" in globs
        config.write_text("[tool.amp-lint]\nignore = []\n", encoding="utf-8")
        client.diagnostics.pop(uri)
        client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams([types.FileEvent(uri=config.as_uri(), type=types.FileChangeType.Changed)])
        )
        assert codes(await diagnostics(client, uri)) == ["AMP072"]


@e2e
async def test_a_broken_configuration_is_shown_and_the_defaults_apply(tmp_path):
    (tmp_path / "amp-lint.toml").write_text("select = [\n", encoding="utf-8")
    async with session([tmp_path]) as client:
        uri = open_file(client, tmp_path / "train7.py", DEPRECATED_SCALER)
        assert codes(await diagnostics(client, uri)) == ["AMP072"]
        await wait_for(lambda: any("invalid TOML" in m.message for m in client.messages))


@e2e
async def test_initialization_options_override_the_selection(tmp_path):
    both = DEPRECATED_SCALER + "\n" + CUSTOM_FWD.replace("import torch\n", "")
    # Under `settings` (VS Code's generic clients), with one option refused: shown, the others apply.
    async with session([tmp_path], options={"settings": {"ignore": ["AMP072"], "extendSelect": ["AMP999"]}}) as client:
        uri = open_file(client, tmp_path / "train8.py", both)
        assert codes(await diagnostics(client, uri)) == ["AMP062", "AMP062"]
        await wait_for(lambda: any("AMP999" in m.message for m in client.messages))
    async with session([tmp_path], options={"select": ["AMP072"]}) as client:
        uri = open_file(client, tmp_path / "train9.py", both)
        assert codes(await diagnostics(client, uri)) == ["AMP072"]
        # Changed while running (workspace/didChangeConfiguration, the `amp-lint` section): checked again.
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"amp-lint": {"select": ["AMP062"]}}))
        await wait_for(lambda: codes(client.diagnostics.get(uri, [])) == ["AMP062", "AMP062"])


@e2e
async def test_multi_root_workspaces_use_each_folders_configuration(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "amp-lint.toml").write_text('ignore = ["AMP072"]\n', encoding="utf-8")
    (second / "amp-lint.toml").write_text('select = ["AMP072"]\n', encoding="utf-8")
    text = DEPRECATED_SCALER + "\n" + CUSTOM_FWD.replace("import torch\n", "")
    async with session([first, second]) as client:
        uri_first = open_file(client, first / "a.py", text)
        uri_second = open_file(client, second / "b.py", text)
        assert codes(await diagnostics(client, uri_first)) == ["AMP062", "AMP062"]
        assert codes(await diagnostics(client, uri_second)) == ["AMP072"]
        # An unsaved document belongs to the first folder.
        untitled = "untitled:Untitled-1"
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=untitled, language_id="python", version=1, text=text))
        )
        assert codes(await diagnostics(client, untitled)) == ["AMP062", "AMP062"]
        # The first folder is closed: the unsaved document now follows the second's configuration.
        client.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(
                types.WorkspaceFoldersChangeEvent(added=[], removed=[types.WorkspaceFolder(uri=first.as_uri(), name="first")])
            )
        )
        await wait_for(lambda: codes(client.diagnostics.get(untitled, [])) == ["AMP072"])


# --- notebooks -------------------------------------------------------------------------------------


def _open_notebook(client, path: Path, cells):
    """cells: (kind, language, text) each; returns the cells' uris."""
    uri = path.as_uri()
    cell_uris = [f"vscode-notebook-cell:{path}#cell{index}" for index in range(len(cells))]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=kind, document=cell_uri) for (kind, _, _), cell_uri in zip(cells, cell_uris)],
            ),
            cell_text_documents=[
                types.TextDocumentItem(uri=cell_uri, language_id=language, version=1, text=text)
                for (_, language, text), cell_uri in zip(cells, cell_uris)
            ],
        )
    )
    return uri, cell_uris


@e2e
async def test_notebook_cells_get_cell_relative_diagnostics_and_fixes(shared):
    code, markup = types.NotebookCellKind.Code, types.NotebookCellKind.Markup
    cells = [
        (code, "python", "import torch\n%matplotlib inline"),
        (markup, "markdown", "# Training"),
        (code, "python", "x = 1\nscaler = torch.cuda.amp.GradScaler()"),
    ]
    client, tmp_path = shared
    # Offered because the client said it syncs notebooks.
    [selector] = client.initialize_result.capabilities.notebook_document_sync.notebook_selector
    assert selector.notebook == "jupyter-notebook" and selector.cells[0].language == "python"
    notebook_uri, cell_uris = _open_notebook(client, tmp_path / "train.ipynb", cells)
    [found] = await diagnostics(client, cell_uris[2])
    assert found.code == "AMP072"
    assert (found.range.start.line, found.range.start.character) == (1, 9)
    assert cell_uris[0] in client.diagnostics and not client.diagnostics[cell_uris[0]]
    offered = await actions(client, cell_uris[2], [found])
    quick = next(a for a in offered if a.kind == types.CodeActionKind.QuickFix and "noqa" not in a.title)
    assert list(edits_by_uri(quick.edit)) == [cell_uris[2]]
    assert applied(cells[2][2], edits_by_uri(quick.edit)[cell_uris[2]]) == 'x = 1\nscaler = torch.amp.GradScaler("cuda")'
    noqa = next(a for a in offered if "noqa" in a.title)
    assert applied(cells[2][2], edits_by_uri(noqa.edit)[cell_uris[2]]).endswith("GradScaler()  # noqa: AMP072")
    # Editing the cell (notebook change): the diagnostics follow.
    client.diagnostics.pop(cell_uris[2])
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=notebook_uri),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text="\n\nx = 1\nscaler = torch.cuda.amp.GradScaler()")],
                        )
                    ]
                )
            ),
        )
    )
    [moved] = await diagnostics(client, cell_uris[2])
    assert moved.range.start.line == 3
    client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=notebook_uri),
            cell_text_documents=[types.TextDocumentIdentifier(uri=u) for u in cell_uris],
        )
    )
    await no_diagnostics(client, cell_uris[2])


# --- robustness ------------------------------------------------------------------------------------

CRASHING_SERVER = """
import sys
from amp_lint.engine import checker
original = checker.Checker.check
def check(self, source, filename, **options):
    if "CRASH" in source:
        raise RuntimeError("boom")
    return original(self, source, filename, **options)
checker.Checker.check = check
from amp_lint.server import lsp
original_view = lsp.AmpLintServer._check
def _check(self, view):
    if "EXPLODE" in view.program:
        raise ValueError("kaboom")
    return original_view(self, view)
lsp.AmpLintServer._check = _check
sys.exit(lsp.serve_stdio())
"""


@e2e
async def test_a_crash_in_one_documents_check_is_logged_not_fatal(tmp_path):
    script = tmp_path / "crashing_server.py"
    script.write_text(CRASHING_SERVER, encoding="utf-8")
    async with session([tmp_path], command=[sys.executable, str(script)]) as client:
        crash = open_file(client, tmp_path / "crash.py", "import torch\n# CRASH\n" + DEPRECATED_SCALER)
        explode = open_file(client, tmp_path / "explode.py", "# EXPLODE\n" + DEPRECATED_SCALER)
        await wait_for(lambda: any("boom" in m.message for m in client.log_messages))
        await wait_for(lambda: any("kaboom" in m.message for m in client.log_messages))
        assert all(m.type == types.MessageType.Error for m in client.log_messages if "boom" in m.message)
        await wait_for(lambda: crash in client.diagnostics)
        assert not client.diagnostics[crash]  # nothing to show for it, and nothing stale
        # The server is alive: another document is checked, and requests are answered.
        uri = open_file(client, tmp_path / "fine.py", DEPRECATED_SCALER)
        assert codes(await diagnostics(client, uri)) == ["AMP072"]
        assert explode not in client.diagnostics or client.diagnostics[explode] == []


@e2e
async def test_exit_without_shutdown_is_an_error_exit(tmp_path):
    config = ClientServerConfig(server_command=SERVER, server_env=ENV)
    client = await config.start()
    try:
        await client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
        client.exit(None)
        await asyncio.wait_for(client._server.wait(), 20)
        assert client._server.returncode == 1  # LSP: exit before shutdown is exit code 1
    finally:
        await _stop(client)
