"""Code actions of the language server: quick fixes, `# noqa`, fix-all (a mixin of `AmpLintServer`).

The fixes come from the last check's findings; their text edits are computed by the engine on the first request
that needs them (an editor asks for code actions at every cursor move), never on a keystroke.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from lsprotocol import types

from amp_lint.diagnostics import Applicability, Diagnostic, Edit, FixSummary
from amp_lint.engine.runner import check_text
from amp_lint.files.lines import lines_with_ends, split_lines
from amp_lint.files.sources import SourceError
from amp_lint.server.documents import DocumentView, apply_edits, client_position

if TYPE_CHECKING:  # pragma: no cover
    from amp_lint.server.lsp import Checked

FIX_ALL = "source.fixAll.amp-lint"


def _finding_key(finding: Diagnostic) -> tuple:
    return (finding.code, finding.location, finding.end_location, finding.message)


class CodeActions:
    
    def workspace_edit(self, view: DocumentView, new_program: str) -> Optional[types.WorkspaceEdit]:
        try:
            changes = view.changes_for(new_program)
        except SourceError as error:
            self.log(f"amp-lint: edit not offered for {view.path}: {error.message}", types.MessageType.Warning)
            return None
        units = self.workspace.position_codec.client_num_units
        lsp_changes: Dict[str, List[types.TextEdit]] = {}
        versions = {uri: view.version_of(uri) for uri in changes}
        for uri, edits in changes.items():
            text = view.text_of(uri)
            lines = split_lines(text)
            lsp_changes[uri] = [
                types.TextEdit(
                    range=types.Range(
                        types.Position(*client_position(lines, text, edit.location, units)),
                        types.Position(*client_position(lines, text, edit.end_location, units)),
                    ),
                    new_text=edit.content,
                )
                for edit in edits
            ]
        if not any(lsp_changes.values()):
            return None
        return self._workspace_edit(lsp_changes, versions)

    def _workspace_edit(self, changes: Dict[str, List[types.TextEdit]], versions: Dict[str, object]) -> types.WorkspaceEdit:
        """Versioned `documentChanges` when the client takes them: an edit made for version N of a document is then
        refused by the client once the document has moved on (a quick fix applied after more typing), instead of
        landing at stale offsets; plain `changes` otherwise."""
        workspace = getattr(self.client_capabilities, "workspace", None)
        workspace_edit = getattr(workspace, "workspace_edit", None)
        if not getattr(workspace_edit, "document_changes", False):
            return types.WorkspaceEdit(changes=changes)
        return types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(
                        uri=uri, version=versions.get(uri) if isinstance(versions.get(uri), int) else None
                    ),
                    edits=list(edits),
                )
                for uri, edits in changes.items()
            ]
        )


    async def fixes_of(self, checked: Checked) -> Dict[tuple, FixSummary]:
        """The fixes of the checked findings, with their text edits (the engine computes them on request)."""
        if checked.fixes is None:
            config = self.settings.for_path(checked.view.path).with_edits
            view = checked.view
            outcome = await self.in_check_thread(check_text, view.program, view.path, config, _on_disk(view))
            checked.fixes = {_finding_key(d): d.fix for d in outcome.diagnostics if d.fix is not None}
        return checked.fixes

    async def code_actions(self, checked: Checked, uri: str, params: types.CodeActionParams) -> List[types.CodeAction]:
        view = checked.view
        wanted = params.context.only
        actions: List[types.CodeAction] = []
        if _wants(wanted, types.CodeActionKind.QuickFix):
            unsafe_allowed = self.settings.for_path(view.path).unsafe_fixes
            for diagnostic, finding in checked.published.get(uri, []):
                if finding is None or not _overlaps(diagnostic.range, params.range):
                    continue
                fix = finding.fix
                if fix is not None and (fix.applicability is Applicability.SAFE or unsafe_allowed):
                    fix = (await self.fixes_of(checked)).get(_finding_key(finding))
                if fix is not None and fix.edits and (fix.applicability is Applicability.SAFE or unsafe_allowed):
                    edit = self._edit_from(view, fix.edits, fix.files)
                    if edit is not None:
                        unsafe = " (unsafe)" if fix.applicability is Applicability.UNSAFE else ""
                        actions.append(
                            types.CodeAction(
                                title=f"amp-lint ({finding.code}): {fix.message}{unsafe}",
                                kind=types.CodeActionKind.QuickFix,
                                diagnostics=[diagnostic],
                                edit=edit,
                                is_preferred=fix.applicability is Applicability.SAFE,
                            )
                        )
                noqa = self._noqa_edit(view, finding)
                if noqa is not None:
                    actions.append(
                        types.CodeAction(
                            title=f"amp-lint ({finding.code}): Disable for this line (# noqa: {finding.code})",
                            kind=types.CodeActionKind.QuickFix,
                            diagnostics=[diagnostic],
                            edit=noqa,
                        )
                    )
        # Fix-all when asked for by kind (on save, say), or beside the quick fixes under the cursor.
        asked = bool(wanted) and _wants(wanted, FIX_ALL)
        if (asked or (not wanted and actions)) and any(
            f.fix is not None and f.fix.applicability is Applicability.SAFE for f in checked.findings
        ):
            if checked.fix_all is None:
                checked.fix_all = (await self.fix_all_edit(view),)
            fix_all = checked.fix_all[0]
            if fix_all is not None:
                actions.append(types.CodeAction(title="amp-lint: Fix all safe fixes", kind=FIX_ALL, edit=fix_all))
        return actions

    def _edit_from(self, view: DocumentView, edits: Sequence[Edit], files=()) -> Optional[types.WorkspaceEdit]:
        try:
            new_program = apply_edits(view.program, edits)
        except SourceError:
            return None
        edit = self.workspace_edit(view, new_program)
        return self._with_other_files(edit, [(path, file_edits) for path, file_edits in files])

    def _with_other_files(self, edit: Optional[types.WorkspaceEdit], files) -> Optional[types.WorkspaceEdit]:
        """`edit` with the edits of the other files a fix changes (one WorkspaceEdit, several documents), or
        None when one of them cannot go with it: the fix is offered whole or not at all. The edits were made on
        the file as it is on disk: a file open with other text in the editor (unsaved changes) refuses the fix."""
        if edit is None or not files:
            return edit
        from pathlib import Path

        from amp_lint.files.sources import read_source

        units = self.workspace.position_codec.client_num_units
        changes = dict(edit.changes or {})
        versions: Dict[str, object] = {}
        for document_edit in edit.document_changes or ():
            changes[document_edit.text_document.uri] = list(document_edit.edits)
            versions[document_edit.text_document.uri] = document_edit.text_document.version
        for path, file_edits in files:
            uri = Path(path).as_uri()
            try:
                text = read_source(Path(path)).text
            except SourceError:
                return None
            document = self.workspace.text_documents.get(uri)
            if (document is not None and document.source != text) or uri in changes:
                return None
            if self.settings.for_path(path).excluded:  # excluded by the project's configuration: never edited
                return None
            versions[uri] = document.version if document is not None else None  # None: the file on disk
            lines = split_lines(text)
            changes[uri] = [
                types.TextEdit(
                    range=types.Range(
                        types.Position(*client_position(lines, text, e.location, units)),
                        types.Position(*client_position(lines, text, e.end_location, units)),
                    ),
                    new_text=e.content,
                )
                for e in file_edits
            ]
        return self._workspace_edit(changes, versions)

    def _noqa_edit(self, view: DocumentView, finding: Diagnostic) -> Optional[types.WorkspaceEdit]:
        from amp_lint.fixes.noqa import _edit_lines as add_noqa_to_lines

        lines = lines_with_ends(view.program)
        try:
            # The same placement as `--add-noqa`: merged into an existing `# noqa: A, B`, never inside a string.
            edited, _ = add_noqa_to_lines(lines, [(finding, finding.location.row, finding.end_location.row)], view.path)
        except SourceError:
            return None
        return self.workspace_edit(view, "".join(lines)) if edited else None

    async def fix_all_edit(self, view: DocumentView) -> Optional[types.WorkspaceEdit]:
        outcome = await self.in_check_thread(check_text, view.program, view.path, self.settings.for_path(view.path).fix_all, _on_disk(view))
        if outcome.fixed_text is None or outcome.fixed_text == view.program:
            return None
        edit = self.workspace_edit(view, outcome.fixed_text)
        if outcome.file_group:  # fixes that change other files too: all their files in the one edit
            from amp_lint.fixes.text_edits import text_edits

            return self._with_other_files(edit, [(path, text_edits(before, after)) for path, before, after in outcome.file_group])
        return edit



def _on_disk(view: DocumentView) -> Optional[str]:
    """The path of a saved Python file (not a notebook, not an unsaved buffer): its fixes may follow its calls into
    the project's other modules, and change them too (a fix offered whole, with every document, or not at all)."""
    import os

    from amp_lint.server.documents import TextView

    return view.path if isinstance(view, TextView) and os.path.isfile(view.path) else None


def _wants(only: Optional[Sequence[str]], kind: str) -> bool:
    """Does the client's `only` filter (None: everything) ask for actions of `kind`? Kinds are
    hierarchical: asking for `source.fixAll` or `source` includes `source.fixAll.amp-lint`."""
    if not only:
        return True
    return any(kind == wanted or kind.startswith(wanted + ".") for wanted in only)


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(position: types.Position):
        return (position.line, position.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)
