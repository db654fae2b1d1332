"""One check of an editor's document and the diagnostics it publishes, as LSP JSON, without pygls.

The pygls server (`lsp`) and the first result written before pygls is loaded (`early`) both check a document
with `check_document` and place its findings with `diagnostic_json` / `error_json`: what the editor is shown
first is, byte for byte, what the server would publish for the same text. `lsp` structures these objects as
lsprotocol's `Diagnostic` (its JSON is the same). Nothing here imports pygls or lsprotocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import unquote, urlparse

from amp_lint.diagnostics import Diagnostic, FileError, Location, Severity
from amp_lint.server import hover as rule_help
from amp_lint.server.documents import DocumentView, Units
from amp_lint.server.first_look import python_syntax_error

SOURCE = "amp-lint"
# A document larger than this is not checked (the analysis takes about 1.5 GB per MB of code); said so once.
MAX_DOCUMENT_CHARS = 1_000_000

# LSP's numbers (lsprotocol's `DiagnosticSeverity`, `DiagnosticTag`, `MessageType`).
SEVERITY = {Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}
SEVERITY_ERROR, SEVERITY_INFORMATION, SEVERITY_WARNING = 1, 3, 2
TAG_DEPRECATED = 2
MESSAGE_WARNING = 2

# uri -> [(the LSP diagnostic, as JSON; the finding it shows, None for a file error)]
Published = Dict[str, List[Tuple[dict, Optional[Diagnostic]]]]


@dataclass
class DocumentCheck:
    """What one check of a document gives the editor."""

    findings: List[Diagnostic] = field(default_factory=list)
    published: Published = field(default_factory=dict)
    # For the user: a broken configuration (str), or (text, LSP message type) for a notice.
    messages: list = field(default_factory=list)
    checker: object = None  # the `UnitChecker` that ran, if one did
    ran: bool = False  # the engine checked something (not a result it kept)


def check_document(view: DocumentView, settings, unit_checker_of: Optional[Callable], units: Units) -> DocumentCheck:
    """Check `view` with its `settings` (`server.settings.DocumentSettings`) by the `UnitChecker` that
    `unit_checker_of(config)` gives (`engine.units`), or whole (`check_text`) when it is None: the same findings
    (`UnitChecker.check` is identical to it), without splitting the text into units first (a first check);
    `units`: the client's position encoding."""
    result = DocumentCheck()
    if settings.error:
        result.messages.append(settings.error)
    published: Published = {uri: [] for uri in view.uris()}
    result.published = published
    if settings.excluded:  # the project's configuration excludes it: nothing to say, as Ruff's server
        return result
    if len(view.program) > MAX_DOCUMENT_CHARS:
        text = (
            f"not checked: the document has {len(view.program):,} characters, more than the "
            f"{MAX_DOCUMENT_CHARS:,} the server checks (run `amp-lint check` on the file)"
        )
        result.messages.append((f"{view.path}: {text}", MESSAGE_WARNING))
        start = {"line": 0, "character": 0}
        diagnostic = {"range": {"start": start, "end": dict(start)}, "message": text, "severity": SEVERITY_INFORMATION, "source": SOURCE}
        published[view.uris()[0] if view.uris() else view.key].append((diagnostic, None))
        return result
    if unit_checker_of is None:
        from amp_lint.engine.runner import check_text

        outcome = check_text(view.program, view.path, settings.config)
        result.ran = True
    else:
        checker = result.checker = unit_checker_of(settings.config)
        checks_before = checker.stats["core"]
        outcome = checker.check(view.program, view.path, view.key)
        result.ran = checker.stats["core"] != checks_before
    result.findings = list(outcome.diagnostics)
    for finding in outcome.diagnostics:
        uri, diagnostic = diagnostic_json(view, finding, units)
        published.setdefault(uri, []).append((diagnostic, finding))
    for error in outcome.errors:
        if error.location is None:
            result.messages.append(f"{error.filename}: {error.message}")
            continue
        uri, diagnostic = error_json(view, error, units)
        published.setdefault(uri, []).append((diagnostic, None))
    return result


def _range(start: Tuple[int, int], end: Tuple[int, int]) -> dict:
    return {"start": {"line": start[0], "character": start[1]}, "end": {"line": end[0], "character": end[1]}}


def diagnostic_json(view: DocumentView, finding: Diagnostic, units: Units) -> Tuple[str, dict]:
    """(uri, the LSP diagnostic) of a finding: its place in the editor, code, link, related places, tags."""
    uri, line, character = view.place(finding.location, units)
    end_uri, end_line, end_character = view.place(finding.end_location, units)
    if end_uri != uri:  # cannot span cells; keep it on its first line
        end_line, end_character = line, character
    related = []
    for place in finding.related:
        related_uri, related_line, related_character = view.place(place.location, units)
        end = view.place(place.end_location, units)
        end_position = (end[1], end[2]) if end[0] == related_uri else (related_line, related_character)
        related.append(
            {"location": {"uri": related_uri, "range": _range((related_line, related_character), end_position)}, "message": place.message}
        )
    diagnostic = {
        "range": _range((line, character), (end_line, end_character)),
        "message": view.message_of(finding),
        "severity": SEVERITY.get(finding.severity, SEVERITY_WARNING),
        "code": finding.code,
    }
    href = rule_help.rule_href(finding.code)
    if href:
        diagnostic["codeDescription"] = {"href": href}
    diagnostic["source"] = SOURCE
    if related:
        diagnostic["relatedInformation"] = related
    if "deprecated" in finding.rule_name:
        diagnostic["tags"] = [TAG_DEPRECATED]
    return uri, diagnostic


def error_json(view: DocumentView, error: FileError, units: Units) -> Tuple[str, dict]:
    """(uri, the LSP diagnostic) of a syntax error (or another located file error): an error without a code,
    in Python's own words and place, inside the document."""
    message = error.message.split(": ", 1)[1] if error.message.startswith("cell ") else error.message
    python = python_syntax_error(view.program) if "syntax error" in message else None
    start, end = (python[1], python[2]) if python else (error.location, Location(error.location.row, error.location.column + 1))
    message = python[0] if python else message
    (uri, line, character), (end_uri, end_line, end_character) = view.place(start, units), view.place(end, units)
    end_line, end_character = (end_line, end_character) if end_uri == uri else (line, character + 1)
    return uri, {"range": _range((line, character), (end_line, end_character)), "message": message, "severity": SEVERITY_ERROR, "source": SOURCE}


def units_of(encoding: str) -> Units:
    """The length of a piece of a line in the code units of a position encoding (pygls's `client_num_units`)."""
    if encoding == "utf-32":
        return len
    if encoding == "utf-8":
        return lambda text: sum(1 if ord(c) < 0x80 else 2 if ord(c) < 0x800 else 3 if ord(c) < 0x10000 else 4 for c in text)
    return lambda text: sum(2 if ord(character) > 0xFFFF else 1 for character in text)


def is_python(uri: str, language_id: Optional[str]) -> bool:
    """A Python document: said so by the client, or named so (a client without filetype detection
    sends an empty language id)."""
    return language_id == "python" or urlparse(uri).path.endswith((".py", ".pyi"))


def config_uri(uri: str, watched_names) -> bool:
    """A configuration file (`pyproject.toml`, ...): not a document to check."""
    import os

    return os.path.basename(unquote(urlparse(uri).path)) in watched_names
