"""The editor server offers a fix that changes several files as one WorkspaceEdit with every document, or not at all
(issue 32, item 3: the AMP100 conversion of a trainer whose GradScaler goes in its caller's file)."""

from __future__ import annotations

import textwrap
from pathlib import Path


from tests.test_server import applied, diagnostics, e2e, edits_by_uri, open_file, pytest_lsp, session
from tests.test_multi_file_fixes import ENGINE, MAIN

if pytest_lsp is not None:
    from lsprotocol import types


async def _conversion(client, uri, found):
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=found[0].range,
            context=types.CodeActionContext(diagnostics=list(found), only=[types.CodeActionKind.QuickFix]),
        )
    )
    return [a for a in result or [] if "noqa" not in a.title]


@e2e
async def test_a_fix_that_changes_two_files_is_one_workspace_edit_or_none(tmp_path: Path):
    package = tmp_path / "mf_server"
    package.mkdir()
    (package / "__init__.py").write_text("")
    main_text = textwrap.dedent(MAIN.format(package="mf_server")).lstrip()
    (package / "main.py").write_text(main_text)
    (tmp_path / "pyproject.toml").write_text('[tool.amp-lint]\nextend-select = ["AMP100"]\n')
    engine_text = textwrap.dedent(ENGINE).lstrip()
    async with session([tmp_path], options={"unsafeFixes": True}) as client:
        uri = open_file(client, package / "engine.py", engine_text)
        found = await diagnostics(client, uri, lambda found: any(d.code == "AMP100" for d in found))
        found = [d for d in found if d.code == "AMP100"]
        fixes = await _conversion(client, uri, found)
        assert len(fixes) == 1, [a.title for a in fixes]
        changes = edits_by_uri(fixes[0].edit)
        main_uri = (package / "main.py").as_uri()
        assert set(changes) == {uri, main_uri}
        assert "scaler.scale(loss).backward()" in applied(engine_text, changes[uri])
        caller = applied(main_text, changes[main_uri])
        assert "scaler = torch.amp.GradScaler(torch.device(device).type)" in caller
        assert "train_one_epoch(model, loader, optimizer, device, scaler=scaler)" in caller
        # The caller open in the editor with unsaved changes: its edits would not fit; the fix is not offered.
        open_file(client, package / "main.py", main_text)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=main_uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=main_text + "# edited\n")],
        ))  # fmt: skip
        (package / "main.py").write_text(main_text)
        import asyncio

        await asyncio.sleep(0.5)
        assert await _conversion(client, uri, found) == []  # never the trainer's half alone
