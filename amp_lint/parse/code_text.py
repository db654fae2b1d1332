"""A Python text without its strings and comments (`code_text`): the prefilter's step between the raw text
and the `ast` parse. Every name `ast` would find in the code is left, for a fraction of a parse's cost.
"""

from __future__ import annotations

import re

# Strings and comments, as Python 3.11's tokenizer reads them (a backslash escapes the next character in
# every kind of string, raw ones included), each string form by its opening quote and the rest of it.
_STRING_FORMS = {
    '"""': r'[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""',
    "'''": r"[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''",
    '"': r'[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"',
    "'": r"[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'",
}


def _after_an_f_prefix(quote: str) -> str:
    """Just past an opening quote: the prefix before it makes an f-string (f, rf, fR, ...)."""
    quote = re.escape(quote)
    return rf"(?:(?<=(?<!\w)[fF]{quote})|(?<=(?<!\w)[fF][rR]{quote})|(?<=(?<!\w)[rR][fF]{quote}))"


# An f-string is the first group, kept: its replacement fields are code. Every alternative starts with its
# quote (or `#`): the regular expression engine then skips ahead to those characters alone.
_STRINGS_AND_COMMENTS = re.compile(
    "("
    + "|".join(re.escape(quote) + _after_an_f_prefix(quote) + rest for quote, rest in _STRING_FORMS.items())
    + ")|"
    + "|".join(re.escape(quote) + rest for quote, rest in _STRING_FORMS.items())
    + r"|#[^\r\n]*",
    re.S,
)


def code_text(text: str) -> str:
    """The text without its strings (f-strings excepted) and comments. Every identifier `code_identifiers`
    can find is still in it, spelled as in the source. (`ast` reads names NFKC-normalised: a pattern for
    the normalised spelling of a name written otherwise is the one thing this misses. A Python 3.12
    f-string that nests its own quotes is read as several strings: its replacement fields may be lost, and
    `ast`, which could not parse the file, would have let it through.)"""
    return _STRINGS_AND_COMMENTS.sub(r"\1 ", text)


def _blanked(match: "re.Match[str]") -> str:
    found = match.group()
    if found[0] == "#":
        return ""
    breaks = found.count("\n")
    if not breaks:
        return " " * len(found)
    return "\\\n" * breaks + "~" * (len(found) - found.rfind("\n") - 1)


def without_strings_and_comments(text: str) -> str:
    r"""The text's lines with every comment gone and every string (f-strings too) blanked: its lines are the
    text's, each with its code at the text's columns, and no line is inside a string. A string that spans
    lines ends each of its lines but the last with a backslash (the statement goes on, as a backslash
    says), and its last line with `~`s: a line that starts with `~` goes on with a statement that started
    above it. For a text whose line breaks are all `\n` (the line numbers of `\r` breaks inside a string
    would be lost)."""
    return _STRINGS_AND_COMMENTS.sub(_blanked, text)
