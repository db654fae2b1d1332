"""`amp-lint server`: a language server (LSP over stdio) with diagnostics and fixes as you type.

Stage 10, server. Documents are checked in-process by the engine (`amp_lint.engine.runner.check_text`), with
the settings of the document's folder (`amp_lint.files.config`). `documents` turns a text document or an LSP
notebook into the program the checker sees and maps positions and edits back; `settings` resolves and reloads
the configuration; `document_check` checks a document and builds its LSP diagnostics (as JSON); `lsp` is the
pygls server; `fast_start` answers `initialize`, and `early` publishes the first opened document's diagnostics,
before pygls is loaded. Importing this package does not import pygls: it is an extra
(`pip install '.[lsp]'` in a checkout, or pygls itself), and `serve` says so in one line when it is missing.

May import: `amp_lint.engine`, `amp_lint.reports` and every stage below them; never `amp_lint.verify` or the cli.
"""

from __future__ import annotations

import sys

MISSING_EXTRA = (
    "amp-lint server needs pygls (the lsp extra): pip install 'pygls>=2.1,<3' in amp-lint's environment "
    "(a tool install: uv tool install --with 'pygls>=2.1,<3' <amp-lint checkout>, or pipx inject amp-lint pygls)"
)


def serve() -> int:
    """Run the server over stdin/stdout until the client says exit; the exit status (2: pygls missing).
    `initialize` is answered before pygls is loaded (`fast_start`)."""
    from amp_lint.server.fast_start import main

    try:
        return main()
    except ImportError as error:
        name = getattr(error, "name", None) or ""
        if name.split(".")[0] not in ("pygls", "lsprotocol", "cattrs", "attrs", "attr"):
            raise  # our own bug, not a missing extra
        print(MISSING_EXTRA, file=sys.stderr)
        return 2
