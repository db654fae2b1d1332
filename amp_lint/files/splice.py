"""Fixed text back to bytes for a file whose codec does not round-trip: only the changed lines are encoded.

Most codecs give back the bytes they decoded, and `SourceText.encode` encodes the whole fixed text. A few do not:
`unicode_escape` reads `\\x41` as `A` and writes every line break as `\\n` (the whole file would become one
line), `raw_unicode_escape` reads `\\u0041` as `A`, and cp932 reads two byte pairs as the same character (NEC and
IBM duplicates) but writes one of them. For such a file the bytes of every line a fix did not touch are kept as
they were read; the lines it changed are encoded, each line break kept as it is (ASCII in every codec a Python
source may use). The result is decoded once more and must give exactly the fixed text; otherwise there is no
safe way to write it (`None`), and the fix is refused.
"""

from __future__ import annotations

import codecs
import difflib
import re
from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import List, Optional, Tuple

from amp_lint.files.lines import lines_with_ends

_RAW_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_LINE_END = re.compile(r"(?:\r\n|\r|\n)\Z")
_MAX_SPAN_BYTES = 1 << 20


def spliced(old_text: str, body: bytes, encoding: str, new_text: str) -> Optional[bytes]:
    """`body` (decoded with `encoding`, it reads `old_text`) with the lines `new_text` changes re-encoded and
    every other byte kept; None when the result would not decode to exactly `new_text`."""
    raw_pieces = _RAW_LINE.findall(body)
    try:
        text_pieces = [piece.decode(encoding) for piece in raw_pieces]
    except UnicodeDecodeError:
        text_pieces = None
    if text_pieces is None or "".join(text_pieces) != old_text:  # a codec with state across lines: one piece
        raw_pieces, text_pieces = [body], [old_text]
    # Where each piece starts and ends, in characters of the old text and in bytes.
    char_bounds = [0, *accumulate(len(piece) for piece in text_pieces)]
    byte_bounds = [0, *accumulate(len(piece) for piece in raw_pieces)]
    result: List[bytes] = []
    kept_until = 0  # the piece up to which the raw bytes are taken as they are
    for start, end, new_start, new_end in _changed_spans(old_text, new_text, char_bounds):
        first = bisect_right(char_bounds, start) - 1
        last = max(first, bisect_left(char_bounds, end))  # a piece that reads as nothing is kept once
        result.append(body[byte_bounds[kept_until] : byte_bounds[first]])
        try:
            old_span = body[byte_bounds[first] : byte_bounds[last]]
            result.append(_spliced_span(old_span, old_text[start:end], new_text[new_start:new_end], encoding))
        except UnicodeEncodeError:
            return None
        kept_until = last
    result.append(body[byte_bounds[kept_until] :])
    data = b"".join(result)
    try:
        return data if data.decode(encoding) == new_text else None
    except UnicodeDecodeError:
        return None


def _changed_spans(old_text: str, new_text: str, bounds: List[int]) -> List[Tuple[int, int, int, int]]:
    """The changes from `old_text` to `new_text` as (old start, old end, new start, new end) in characters,
    each widened to whole pieces (`bounds`: where the pieces of the old text start), overlapping ones merged."""
    old_lines, new_lines = lines_with_ends(old_text), lines_with_ends(new_text)
    # The same lines at both ends are common to all fixes; the diff runs on what is between them.
    head = 0
    while head < min(len(old_lines), len(new_lines)) and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < min(len(old_lines), len(new_lines)) - head and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    old_middle, new_middle = old_lines[head : len(old_lines) - tail], new_lines[head : len(new_lines) - tail]
    matcher = difflib.SequenceMatcher(None, old_middle, new_middle, autojunk=False)
    old_at = [0, *accumulate(len(line) for line in old_lines)]
    new_at = [0, *accumulate(len(line) for line in new_lines)]
    # Every block, in characters: (tag, old start, old end, new start, new end).
    blocks = [
        (tag, old_at[head + i1], old_at[head + i2], new_at[head + j1], new_at[head + j2])
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    spans: List[Tuple[int, int]] = []
    for tag, i1, i2, _, _ in blocks:
        if tag == "equal":
            continue
        start = bounds[bisect_right(bounds, i1) - 1]
        end = bounds[min(bisect_left(bounds, i2), len(bounds) - 1)]
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return [(start, end, _new_offset(blocks, start, False), _new_offset(blocks, end, True)) for start, end in spans]


def _new_offset(blocks, offset: int, at_end: bool) -> int:
    """Where `offset` of the old text is in the new one. A widened span starts and ends outside every change
    (inside unchanged lines, or where a change starts or ends); an insertion right there belongs to the span,
    so its start is placed before what the changes there insert, its end after."""
    for tag, i1, i2, j1, j2 in reversed(blocks) if at_end else blocks:
        if i1 <= offset <= i2:
            if tag == "equal":
                return j1 + offset - i1
            if offset == (i2 if at_end else i1):
                return j2 if at_end else j1
    # Outside the diffed middle: in the common head or tail.
    if not blocks or offset < blocks[0][1]:
        return offset
    return blocks[-1][4] + offset - blocks[-1][2]


def _spliced_span(raw: bytes, old: str, new: str, encoding: str) -> bytes:
    """The bytes for `new` where `raw` (decoding to `old`) was: the characters the two lines share at their
    start and at their end keep their bytes (a cp932 duplicate beside the fix stays as it was)."""
    if len(raw) > _MAX_SPAN_BYTES:  # decoded byte by byte below: a huge one-line span is encoded whole
        return _encode_lines(new, encoding)
    shared_start = 0
    shortest = min(len(old), len(new))
    while shared_start < shortest and old[shared_start] == new[shared_start]:
        shared_start += 1
    shared_end = 0
    while shared_end < shortest - shared_start and old[-1 - shared_end] == new[-1 - shared_end]:
        shared_end += 1
    # The places between whole characters: (byte offset, characters decoded before it), in order.
    places = [(0, 0)]
    decoder = codecs.getincrementaldecoder(encoding)()
    decoded = 0
    try:
        for offset in range(len(raw)):
            decoded += len(decoder.decode(raw[offset : offset + 1]))
            if not decoder.getstate()[0]:
                places.append((offset + 1, decoded))
    except UnicodeDecodeError:
        places = [(0, 0), (len(raw), len(old))]
    if places[-1] != (len(raw), len(old)):  # not decoded as a whole decodes it: no place inside to trust
        places = [(0, 0), (len(raw), len(old))]
    head_bytes, head_chars = max(place for place in places if place[1] <= shared_start)
    tail_from = max(len(old) - shared_end, head_chars)
    tail_bytes, tail_chars = min(place for place in places if place[1] >= tail_from and place[0] >= head_bytes)
    middle = new[head_chars : len(new) - (len(old) - tail_chars)]
    return raw[:head_bytes] + _encode_lines(middle, encoding) + raw[tail_bytes:]


def _encode_lines(text: str, encoding: str) -> bytes:
    """`text` encoded line by line, each line break written as the ASCII it is (`unicode_escape` would write
    `\\n`, joining the lines)."""
    pieces = []
    for line in lines_with_ends(text):
        ending = _LINE_END.search(line)
        content = line[: ending.start()] if ending else line
        pieces.append(content.encode(encoding))
        if ending:
            pieces.append(ending.group().encode("ascii"))
    return b"".join(pieces)
