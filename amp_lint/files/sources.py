"""The file layer: which files to check, how to read them, and how to write a fix without risk.

Everything that touches the disk lives here so that the rest of the pipeline works on text. Three
promises hold whatever the input: a bad path or file becomes a one-line error instead of a traceback,
the text round-trips byte for byte (encoding, BOM, line endings), and `write_atomic` either replaces
a file completely or leaves it exactly as it was.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from amp_lint.diagnostics import FileError, Location
from amp_lint.files.lines import LINE_BREAK
from amp_lint.files.settings import Settings

PYTHON_SUFFIXES = frozenset({".py", ".pyi", ".ipynb"})



class SourceError(Exception):
    """A file that cannot be read or written, with a one-line reason fit for the user."""

    def __init__(self, message: str, location: Optional[Location] = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location

    def to_file_error(self, filename: str) -> FileError:
        return FileError(filename, self.message, self.location)


class FileChangedError(SourceError):
    """The file on disk is no longer what was read: another tool or the user edited it meanwhile."""


class TooLargeError(SourceError):
    """A file (or standard input) over the size limit: `read_bytes` stops one byte past it."""


# -- discovery (amp_lint.files.walk) ------------------------------------------------------------------


def discover(*args, **kwargs):
    """`amp_lint.files.walk.discover`: the files command-line paths name."""
    from amp_lint.files.walk import discover as walk_discover

    return walk_discover(*args, **kwargs)


def excluded_by_settings(path: Path, settings_for: Callable[[Path], Settings]) -> bool:
    """`amp_lint.files.walk.excluded_by_settings`: would `--force-exclude` skip this file?"""
    from amp_lint.files.walk import excluded_by_settings as walk_excluded

    return walk_excluded(path, settings_for)


_FileId = Tuple[int, int]  # (st_dev, st_ino)


def _file_id(info: os.stat_result) -> _FileId:
    return info.st_dev, info.st_ino



# -- reading -----------------------------------------------------------------------------------


@dataclass
class SourceText:
    """A file's text as Python reads it, and what is needed to write it back the same way."""

    text: str  # decoded, BOM removed, line endings exactly as on disk
    raw: bytes  # exactly the bytes read
    encoding: str
    bom: bool
    # (st_dev, st_ino) of the file read: a fix is written only to that same file (None: not known).
    identity: Optional[Tuple[int, int]] = None

    def encode(self, new_text: str) -> bytes:
        """The bytes to write for `new_text`: the same encoding, and the BOM if there was one; the bytes read
        when the text is the text read.

        A codec that does not give back the bytes it decoded (`unicode_escape`, cp932's duplicates) would change
        lines no fix touched: for such a file only the changed lines are encoded (`splice.spliced`), and where
        even that cannot give exactly `new_text` back, the write is refused."""
        if new_text == self.text:
            return self.raw
        try:
            data = new_text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            row, column = _position(new_text[: exc.start])
            raise SourceError(
                f"the fixed text has characters that {self.encoding} cannot encode (line {row}, column {column})",
                Location(row, column),
            ) from exc
        bom = codecs.BOM_UTF8 if self.bom else b""
        body = self.raw[len(bom) :]
        exact = self.encoding == "utf-8" or (
            _round_trips(self.text, body, self.encoding) and _reads_back(data, new_text, self.encoding)
        )
        if not exact:
            from amp_lint.files.splice import spliced

            data = spliced(self.text, body, self.encoding, new_text)
            if data is None:  # no bytes read back as the fixed text with the untouched lines as they were
                raise SourceError(f"encoding does not round-trip ({self.encoding}); file left unchanged")
        return bom + data


# Python source this big is generated data, not code to lint; reading it whole (and LibCST's tree of
# it, at some hundred times the text's size) would cost gigabytes. Notebooks carry their outputs
# (images) and get a larger allowance.
MAX_SOURCE_BYTES = 16 * 1024 * 1024
MAX_NOTEBOOK_BYTES = 128 * 1024 * 1024


def read_limit(path: str) -> int:
    """The most bytes `read_bytes` reads of `path` before refusing it."""
    return MAX_NOTEBOOK_BYTES if path.endswith(".ipynb") else MAX_SOURCE_BYTES


def read_bytes(path: str, limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file `path`, or `SourceError` with a one-line reason.

    Whatever the path names, this neither hangs nor exhausts memory: the file is opened without
    blocking (a FIFO has no writer to wait for), what was opened is checked with `fstat` (so a file
    swapped for a FIFO or a device after discovery is refused too), and at most `limit` bytes are
    read (`/dev/zero` named `z.py` is not a regular file; a file that grows while read stops there).
    """
    return _read_regular_file(path, read_limit(path) if limit is None else limit)[0]


_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def _read_regular_file(path: str, limit: int, extra_flags: int = 0) -> Tuple[bytes, os.stat_result]:
    """`read_bytes`, and the `fstat` of the file it read."""
    try:
        fd = os.open(path, _READ_FLAGS | extra_flags)
    except OSError as exc:
        raise SourceError(exc.strerror or str(exc)) from exc
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SourceError("Is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise SourceError("not a regular file")
        if info.st_size > limit:
            raise TooLargeError(_too_large(info.st_size, limit))
        chunks = []
        total = 0
        wanted = info.st_size + 1  # one byte more than expected: to see the end of the file at once
        while True:
            asked = min(max(wanted, 65536), limit + 1 - total)
            chunk = os.read(fd, asked)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise TooLargeError(_too_large(total, limit))
            if len(chunk) < asked:
                break  # a regular file reads short only at its end: no read more to see it
            wanted = 65536
    except OSError as exc:
        raise SourceError(exc.strerror or str(exc)) from exc
    finally:
        os.close(fd)
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), info


def read_stream(stream, name: str) -> bytes:
    """All of a binary stream (standard input), with the limit of a file of that name (`read_limit`):
    an endless or huge input is refused (`SourceError`) after reading one byte more than the limit."""
    limit = read_limit(name)
    chunks: List[bytes] = []
    total = 0
    while total <= limit:
        chunk = stream.read(min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    raise TooLargeError(_too_large(total, limit))


def _too_large(size: int, limit: int) -> str:
    return f"file too large to analyse ({size / 1048576:.1f} MB or more; the limit is {limit // 1048576} MB); not read"


def read_source(path: Path) -> SourceText:
    """Read and decode a file, raising `SourceError` with a one-line reason when that is not possible."""
    name = os.fspath(path)
    raw, info = _read_regular_file(name, read_limit(name))
    source = decode_source(raw)
    source.identity = _file_id(info)
    return source


def decode_source(raw: bytes) -> SourceText:
    """Decode Python source as the interpreter would: BOM, then the PEP 263 coding cookie, else UTF-8."""
    if b"\0" in raw:
        raise SourceError("file contains NUL bytes (binary file?)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        encoding = _encoding_or_reason(exc)
    bom = raw.startswith(codecs.BOM_UTF8)  # detect_encoding refuses a BOM with any other encoding
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = raw[len(codecs.BOM_UTF8) :] if bom else raw
    if not _is_ascii_compatible(encoding):
        raise SourceError(f"unsupported encoding in coding cookie: {encoding}")
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        row, column = _position(body[: exc.start].decode(encoding, errors="replace"))
        raise SourceError(f"invalid {encoding} at line {row}, column {column}", Location(row, column)) from None
    return SourceText(text=text, raw=raw, encoding=encoding, bom=bom)


def _encoding_or_reason(exc: SyntaxError) -> str:
    """`detect_encoding` gives up on bad bytes in the first two lines: decode as UTF-8 to say where."""
    message = str(exc.msg)
    if message.startswith("invalid or missing encoding declaration"):
        return "utf-8"
    if message.startswith("unknown encoding"):
        raise SourceError(f"unknown encoding in coding cookie: {message.rsplit(': ', 1)[-1]}") from None
    if message.startswith("encoding problem"):
        raise SourceError("the coding cookie contradicts the UTF-8 byte order mark") from None
    raise SourceError(message) from None


def _is_ascii_compatible(encoding: str) -> bool:
    """Python source needs an ASCII-compatible text codec; `utf-16` or `rot13` cookies are not."""
    try:
        return b"# \n".decode(encoding) == "# \n"
    except (LookupError, UnicodeDecodeError):
        return False


def _round_trips(text: str, body: bytes, encoding: str) -> bool:
    """Does encoding `text` (decoded from `body`) give back `body`? (UTF-8 always does: it was decoded strictly.)"""
    try:
        return text.encode(encoding) == body
    except UnicodeEncodeError:
        return False


def _reads_back(data: bytes, text: str, encoding: str) -> bool:
    """Does `data` (`text` encoded) decode to `text`? Not in raw_unicode_escape when `text` holds `\\u0041`."""
    try:
        return data.decode(encoding) == text
    except UnicodeDecodeError:
        return False


def _position(text_before: str) -> Tuple[int, int]:
    """1-based (line, column) of the character just after `text_before`."""
    lines = LINE_BREAK.split(text_before)
    return len(lines), len(lines[-1]) + 1


# -- writing (amp_lint.files.writing; loaded only by a run that writes) ------------------------------

_WRITING = ("write_atomic", "remove_stale_temporaries", "STALE_TEMPORARY_SECONDS")


def __getattr__(name: str):
    if name in _WRITING:
        from amp_lint.files import writing

        return getattr(writing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
