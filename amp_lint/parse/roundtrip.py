"""Hand LibCST a text it reproduces byte for byte, and put back what it would have dropped.

LibCST 1.9 loses two things that CPython accepts, so `cst.parse_module(text).code != text`:

- a lone CR that ends the file: `"x = 1\\r"` comes back as `"x = 1"`;
- form feeds at the start of a line of code, before its indentation: `"\\x0c    b = 2"` comes back
  as `"    b = 2"`; before the first statement of a nested block its tokenizer even refuses the file
  ("no matching outer block for dedent").

CPython ignores a form feed at the start of a line when it measures indentation, so LibCST gets the
text without them (and without the final CR): the code it sees means the same. After the fixes,
`PreparedSource.restore` puts them back, on the lines the fixes left as they were.

Files with neither (all but a handful) skip all of this after one quick test.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, Iterator, List, Optional, Set, Tuple

from amp_lint.diagnostics import Diagnostic, Location
from amp_lint.files.lines import lines_with_ends, split_lines
from amp_lint.parse.python_ast import parse_quietly

# Form feeds that open a line with code on it; a line of only form feeds, blanks or a comment is
# reproduced by LibCST as it is.
_FORM_FEEDS_BEFORE_CODE = re.compile(r"(\x0c+)[ \t\x0c]*[^\s#]")


@dataclass(frozen=True)
class Restored:
    """LibCST's output with the dropped characters back, and where form feeds went back in."""

    text: str
    form_feeds: Dict[int, str] = field(default_factory=dict)  # 1-based row of `text` -> form feeds put back

    def diagnostic(self, diagnostic: Diagnostic) -> Diagnostic:
        """`diagnostic`, located on LibCST's text, moved onto `text`: columns shift past the form feeds."""
        if diagnostic.location.row not in self.form_feeds and diagnostic.end_location.row not in self.form_feeds:
            return diagnostic
        row = diagnostic.location.row
        return dataclasses.replace(
            diagnostic,
            location=self.location(diagnostic.location),
            end_location=self.location(diagnostic.end_location),
            source_line=self._lines[row - 1] if row in self.form_feeds else diagnostic.source_line,
        )

    def location(self, location: Location) -> Location:
        return Location(location.row, location.column + len(self.form_feeds.get(location.row, "")))

    @cached_property
    def _lines(self) -> List[str]:
        return split_lines(self.text)


@dataclass(frozen=True)
class PreparedSource:
    """The text LibCST parses, and what was taken out of the original to make it."""

    text: str
    form_feeds: Dict[int, str] = field(default_factory=dict)  # 0-based line of `text` -> form feeds taken off it
    trailing_cr: bool = False  # the original ended with a lone CR, not in `text`

    @property
    def changed(self) -> bool:
        return bool(self.form_feeds) or self.trailing_cr

    def put_back(
        self, fixed: Optional[str], diagnostics: List[Diagnostic]
    ) -> Tuple[Optional[str], List[Diagnostic]]:
        """The fixed text (None: not fixed) and the diagnostics, moved from `text` onto the original."""
        restored = self.restore(self.text if fixed is None else fixed)
        return (None if fixed is None else restored.text), [restored.diagnostic(d) for d in diagnostics]

    def restore(self, code: str) -> Restored:
        """`code` (LibCST's output for `text`, maybe fixed) with the form feeds and the final CR back.

        A form feed goes back on its line when the fixes left that line, or rewrote it. The CR goes back
        when the output ends the way `text` does, with or without a line break.
        """
        restored = self._with_form_feeds(code) if self.form_feeds else Restored(code)
        if self.trailing_cr and _ends_with_line_break(code) == _ends_with_line_break(self.text):
            restored = dataclasses.replace(restored, text=restored.text + "\r")
        return restored

    def _with_form_feeds(self, code: str) -> Restored:
        lines = lines_with_ends(code)
        put_back = {}
        for new_index, old_index in self._unchanged_lines(code, lines):
            feeds = self.form_feeds.get(old_index)
            if feeds:
                lines[new_index] = feeds + lines[new_index]
                put_back[new_index + 1] = feeds
        return Restored("".join(lines), put_back)

    def _unchanged_lines(self, code: str, new_lines: List[str]) -> Iterator[Tuple[int, int]]:
        """(index in `code`, index in `text`) of each line the fixes left, or rewrote in place.

        A line a fix rewrote (a renamed call, a moved statement's new indentation) is the old line at
        the same offset of a replaced block: its form feed goes back before it, as the README promises.
        """
        if code == self.text:
            yield from ((index, index) for index in range(len(new_lines)))
            return
        old_lines = lines_with_ends(self.text)
        matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
        for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
            if tag == "equal" or tag == "replace":
                for offset in range(min(old_end - old_start, new_end - new_start)):
                    if tag == "equal" or new_lines[new_start + offset].strip():
                        yield new_start + offset, old_start + offset


def prepare(source: str) -> PreparedSource:
    """The text to give LibCST for `source`: itself, unless it holds what LibCST would drop."""
    if "\x0c" not in source and not source.endswith("\r"):
        return PreparedSource(source)
    trailing_cr = source.endswith("\r")
    text = source[:-1] if trailing_cr else source
    form_feeds: Dict[int, str] = {}
    if "\x0c" in text:
        text, form_feeds = _without_form_feeds_before_code(text, source)
    return PreparedSource(text, form_feeds, trailing_cr)


def _without_form_feeds_before_code(text: str, source: str) -> Tuple[str, Dict[int, str]]:
    """`text` without the form feeds that open its lines of code, and those form feeds by line.

    A line that starts inside a string literal keeps them: there they are the string's characters.
    """
    lines = lines_with_ends(text)
    candidates = [index for index, line in enumerate(lines) if _FORM_FEEDS_BEFORE_CODE.match(line)]
    if not candidates:
        return text, {}
    inside_strings = _rows_inside_strings(source)
    if inside_strings is None:  # Python cannot read the file: LibCST gets it as it is
        return text, {}
    form_feeds = {}
    for index in candidates:
        if index + 1 not in inside_strings:
            form_feeds[index] = _FORM_FEEDS_BEFORE_CODE.match(lines[index]).group(1)
            lines[index] = lines[index][len(form_feeds[index]) :]
    return "".join(lines), form_feeds


def _rows_inside_strings(source: str) -> Optional[Set[int]]:
    """The 1-based rows that start inside a string literal (where a form feed is the string's, not
    whitespace); None when Python's own parser cannot read `source`."""
    tree = parse_quietly(source)
    if tree is None:
        return None
    rows: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and node.end_lineno and node.end_lineno > node.lineno:
            rows.update(range(node.lineno + 1, node.end_lineno + 1))
    return rows


def _ends_with_line_break(text: str) -> bool:
    return text.endswith(("\n", "\r"))
