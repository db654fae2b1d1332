"""The file layer: which files to check, how to read them, and how to write a fix without risk.

Everything that touches the disk lives here so that the rest of the pipeline works on text. Three
promises hold whatever the input: a bad path or file becomes a one-line error instead of a traceback,
the text round-trips byte for byte (encoding, BOM, line endings), and `write_atomic` either replaces
a file completely or leaves it exactly as it was.
"""

from __future__ import annotations

import codecs
import errno
import io
import operator
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from amp_lint.diagnostics import FileError, Location
from amp_lint.files.lines import LINE_BREAK
from amp_lint.files.settings import Settings, exclusion_test, is_excluded

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


# -- discovery ---------------------------------------------------------------------------------


def discover(
    paths: Sequence[str],
    settings_for: Callable[[Path], Settings],
    *,
    force_exclude: bool = False,
    on_many_bytes: Optional[Tuple[int, Callable[[], None]]] = None,
    on_warning: Optional[Callable[[FileError], None]] = None,
    as_text: bool = False,
) -> Tuple[list, List[FileError]]:
    """Expand command-line paths into the files to check, sorted and without duplicates.

    Folders are walked for `.py`, `.pyi` and `.ipynb` files, skipping `exclude`/`extend_exclude`
    matches and, inside a git work tree, what `.gitignore` files and `.git/info/exclude` ignore.
    A path named on the command line is always checked (whatever its suffix) unless `force_exclude`
    (the argument or the path's settings) is set: then the exclude globs apply to it and its parent
    folders too, as pre-commit needs; `.gitignore` never applies to a named path.
    `settings_for` is called once per folder (and per named file); problems become `FileError`s
    and the walk goes on. `on_many_bytes`, (size, callback): the callback runs once, as soon as the files
    found add up to that many bytes (the runner starts its workers then, while the walk goes on).

    What an editor or a checkout leaves behind in a walked folder is not the user's mistake, and, as with
    Ruff, it does not fail the run: a broken `.py` symlink (Emacs' lock files `.#x.py`) or a file symlink
    loop is a warning (`on_warning`; by default a line on stderr), and a folder symlink that leads back to
    a folder being walked is skipped silently. Named on the command line, each is an error.

    The files are Paths, or with `as_text` the strings their Paths print (a run's plan wants strings).
    """
    walker = _Walker(settings_for, on_many_bytes, on_warning or _warn_on_stderr)
    for argument in paths:
        walker.add(Path(argument), force_exclude)
    files = _in_path_order(walker.files)
    return (files if as_text else [Path(file) for file in files]), walker.errors


def _child_prefix(folder: Path) -> Optional[str]:
    """What `str(folder / name)` is `name` appended to, on POSIX (None elsewhere: a drive, `C:name`)."""
    if os.name != "posix":
        return None
    text = str(folder)
    if text == ".":
        return ""  # Path(".") / "a.py" is "a.py"
    return text if text.endswith("/") else text + "/"


def _in_path_order(files: List[str]) -> List[str]:
    """The paths sorted as their `Path`s sort (component by component: `a/x.py` before `a-b/x.py`), without
    building a Path for each where every path is absolute or every one relative (then both orders agree on
    POSIX, whatever the Python version)."""
    if os.name == "posix" and not any(file.startswith("//") for file in files):
        absolute = [file.startswith("/") for file in files]
        if all(absolute) or not any(absolute):
            return sorted(files, key=_components)
    return [str(path) for path in sorted(Path(file) for file in files)]


def _components(file: str) -> List[str]:
    return file.split("/")


def excluded_by_settings(path: Path, settings_for: Callable[[Path], Settings]) -> bool:
    """Would `--force-exclude` skip this file (or a folder it sits in)? For `--stdin-filename`, which
    names a file that need not exist: editors and pre-commit pass the real name of the buffer."""
    return _Walker(settings_for)._excluded_with_parents(path)


# A parsed .gitignore (a pathspec.GitIgnoreSpec) and the folder its patterns are relative to.
_IgnoreRule = Tuple[Path, object]
# The rules in force in a folder, shallowest first; None outside a git work tree.
_IgnoreRules = Optional[Tuple[_IgnoreRule, ...]]
_FileId = Tuple[int, int]  # (st_dev, st_ino): the same file reached by two paths is checked once
# A folder still to walk, and its ignore rules.
_PendingFolder = Tuple[Path, _IgnoreRules]


class _Walker:
    def __init__(
        self,
        settings_for: Callable[[Path], Settings],
        on_many_bytes: Optional[Tuple[int, Callable[[], None]]] = None,
        on_warning: Optional[Callable[[FileError], None]] = None,
    ) -> None:
        self._settings_for = settings_for
        self._on_warning = on_warning or _warn_on_stderr
        self._on_many_bytes = on_many_bytes
        self._bytes_found = 0
        self._settings: Dict[Path, Settings] = {}
        self._exclusion_tests: Dict[int, Tuple[Settings, Callable[[str], bool]]] = {}
        self._cwd = Path.cwd()  # the root of relative exclude globs when the settings have none
        self._seen_files: Set[_FileId] = set()
        self._walked_folders: Set[_FileId] = set()
        self.files: List[str] = []  # as `str(Path)` prints each (a walk builds thousands: no Path objects)
        self.errors: List[FileError] = []

    def add(self, path: Path, force_exclude: bool) -> None:
        try:
            info = path.stat()
        except OSError:
            self._error(path, _describe_unreachable(path))
            return
        if (force_exclude or self._settings_of(path).force_exclude) and self._excluded_with_parents(path):
            return
        if stat.S_ISDIR(info.st_mode):
            self._walk(path, info)
        elif not stat.S_ISREG(info.st_mode):
            # A FIFO named `x.py` would block the read; a device or socket is no source file either.
            self._error(path, "not a regular file")
        else:
            self._add_file(path, info)

    def _walk(self, top: Path, info: os.stat_result) -> None:
        """Depth-first walk without recursion, so that deep trees cannot overflow the stack."""
        if _file_id(info) in self._walked_folders:
            return
        self._walked_folders.add(_file_id(info))
        ignore_rules = self._gitignores_above(top)
        pending: List[_PendingFolder] = [(top, ignore_rules)]
        while pending:
            folder, ignore_rules = pending.pop()
            try:
                with os.scandir(folder) as scan:
                    entries = list(scan)
            except OSError as exc:
                self._error(folder, exc.strerror or str(exc))
                continue
            if entries and not os.access(folder, os.X_OK):
                # Readable but not searchable (mode 644): its names can be listed, nothing in it opened.
                self._error(folder, "Permission denied (the folder can be listed but not searched)")
                continue
            settings = self._settings_of(folder)
            if settings.respect_gitignore:
                ignore_rules = self._folder_gitignores(folder, {entry.name for entry in entries}, ignore_rules)
            excluded = self._exclusion_test(settings)
            # Strings, not pathlib, for what is asked of every entry: a walk of torch's package asks 13,000 times.
            absolute_folder = os.path.join(os.path.abspath(folder), "")
            # A file's path as `folder / name` names it, built as a string (`_child_prefix`).
            file_prefix = _child_prefix(folder)
            subfolders = []
            # Only folders and Python files, in name order: most entries of a tree (headers, data) are neither,
            # and are dropped before the sort and before any question to the exclude globs.
            entries = sorted(filter(_folder_or_python_file, entries), key=_entry_name)
            for entry in entries:
                try:
                    is_folder = entry.is_dir()
                except OSError:  # a symlink loop, say; described below
                    is_folder = False
                if not is_folder and os.path.splitext(entry.name)[1] not in PYTHON_SUFFIXES:
                    continue
                absolute = absolute_folder + entry.name
                if excluded(absolute) or (
                    settings.respect_gitignore and ignore_rules and _gitignored(Path(absolute), is_folder, ignore_rules)
                ):
                    continue
                try:
                    is_file = not is_folder and entry.is_file()
                except OSError:
                    is_file = False
                if is_folder:
                    subfolders.append(self._enter(folder / entry.name, entry, ignore_rules))
                else:
                    path = file_prefix + entry.name if file_prefix is not None else str(folder / entry.name)
                    if is_file:
                        try:
                            self._add_file(path, entry.stat())
                        except OSError as exc:
                            self._error(Path(path), exc.strerror or str(exc))
                    elif entry.is_symlink():
                        self._on_warning(FileError(path, _describe_unreachable(Path(path)) + "; skipped"))
            # Reversed so that the stack pops the subfolders in name order.
            pending.extend(reversed([item for item in subfolders if item is not None]))

    def _enter(
        self, path: Path, entry: os.DirEntry, ignore_rules: _IgnoreRules
    ) -> Optional[_PendingFolder]:
        """The stack item for a subfolder, or None where a symlink leads to a folder of the walk (a loop)."""
        try:
            folder_id = _file_id(entry.stat())
        except OSError as exc:
            self._error(path, exc.strerror or str(exc))
            return None
        if folder_id in self._walked_folders:  # a link back to a folder of the walk (a loop), or walked already
            return None
        self._walked_folders.add(folder_id)
        return path, ignore_rules

    def _add_file(self, path, info: os.stat_result) -> None:
        """`path`: a Path, or the string a Path would print."""
        file_id = _file_id(info)
        if file_id not in self._seen_files:
            self._seen_files.add(file_id)
            self.files.append(str(path))
            if self._on_many_bytes is not None:
                self._bytes_found += info.st_size
                if self._bytes_found >= self._on_many_bytes[0]:
                    callback, self._on_many_bytes = self._on_many_bytes[1], None
                    callback()

    def _error(self, path: Path, message: str) -> None:
        self.errors.append(FileError(str(path), message))

    @staticmethod
    def _absolute(path: Path) -> Path:
        return Path(os.path.abspath(path))

    def _settings_of(self, path: Path) -> Settings:
        if path not in self._settings:
            self._settings[path] = self._settings_for(path)
        return self._settings[path]

    def _root(self, settings: Settings) -> Path:
        return Path(os.path.abspath(settings.root)) if settings.root else self._cwd

    def _exclusion_test(self, settings: Settings) -> Callable[[str], bool]:
        """`_excluded` for one settings object, as a test of an absolute, normalized path (a string)."""
        test = self._exclusion_tests.get(id(settings))
        if test is None or test[0] is not settings:
            patterns = settings.exclude + settings.extend_exclude
            root = str(self._root(settings))
            test = self._exclusion_tests[id(settings)] = (settings, exclusion_test(patterns, root))
        return test[1]

    def _excluded(self, path: Path, settings: Settings) -> bool:
        """Ruff's exclude semantics (`amp_lint.files.settings.is_excluded`): a pattern made absolute against
        the settings' root (or the cwd) matches the absolute path; a pattern without `/` matches the name.

        A bare-name glob never matches the absolute path: `*test*` must not exclude a whole project that
        lives in /tmp/tests.
        """
        absolute = os.path.abspath(path)  # strings, not pathlib: a walk asks this for every file
        return is_excluded(absolute, settings.exclude + settings.extend_exclude, str(self._root(settings)))

    def _excluded_with_parents(self, path: Path) -> bool:
        """For --force-exclude: `build/x.py` is excluded by `build`, so the parents count too."""
        settings = self._settings_of(path)
        absolute = self._absolute(path)
        root = self._root(settings)
        candidates = [absolute] + [parent for parent in absolute.parents if root in parent.parents]
        return any(self._excluded(candidate, settings) for candidate in candidates)

    def _gitignores_above(self, top: Path) -> _IgnoreRules:
        """The ignore files that apply to `top` from the folders above it, up to its work tree's root.

        None outside a git work tree: there `.gitignore` files mean nothing, as for git itself.
        """
        if not self._settings_of(top).respect_gitignore:
            return None
        above = list(self._absolute(top).parents)
        repository = next((folder for folder in above if (folder / ".git").exists()), None)
        if repository is None:
            return None
        rules = self._load_gitignore(repository / ".git" / "info" / "exclude", repository)
        for folder in reversed(above):
            if folder == repository or repository in folder.parents:
                rules += self._load_gitignore(folder / ".gitignore", folder)
        if rules and _gitignored(self._absolute(top), True, rules):
            # A folder named on the command line is checked even if git ignores it (`.venv/.../torch`):
            # naming it says so. Ignore files inside it still apply.
            return None
        return rules

    def _folder_gitignores(self, folder: Path, names: Set[str], inherited: _IgnoreRules) -> _IgnoreRules:
        """The ignore rules inside `folder`: a work tree's root (or a submodule) starts afresh."""
        rules = inherited
        if ".git" in names:
            rules = self._load_gitignore(folder / ".git" / "info" / "exclude", folder)
        if rules is not None and ".gitignore" in names:
            rules += self._load_gitignore(folder / ".gitignore", folder)
        return rules

    def _load_gitignore(self, ignore_file: Path, base: Path) -> Tuple[_IgnoreRule, ...]:
        # As configuration files are read: without blocking (a FIFO), regular files only (`/dev/zero`), bounded.
        try:
            raw = read_bytes(str(ignore_file), _IGNORE_FILE_BYTES)
        except SourceError as exc:
            if isinstance(exc.__cause__, (FileNotFoundError, NotADirectoryError)):
                return ()  # `.git` is a file in submodules and worktrees
            self._error(ignore_file, f"{exc.message}; its patterns are not applied")
            return ()
        lines = raw.decode("utf-8", errors="replace").splitlines()
        import pathspec  # only where a project has ignore files: keeps a plain run's start-up fast

        try:
            spec = pathspec.GitIgnoreSpec.from_lines(lines)
        except ValueError:
            # A line git accepts but pathspec refuses (`!` or `\` alone): git matches nothing with it.
            spec = pathspec.GitIgnoreSpec.from_lines([line for line in lines if _valid_gitignore_line(pathspec, line)])
        return ((self._absolute(base), spec),)


# git reads ignore files of any size; one this big is not a list of patterns someone wrote.
_IGNORE_FILE_BYTES = 4 * 1024 * 1024


def _valid_gitignore_line(pathspec, line: str) -> bool:
    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except ValueError:
        return False
    return True


def _gitignored(path: Path, is_folder: bool, ignore_rules: Sequence[_IgnoreRule]) -> bool:
    """The deepest ignore file with a matching pattern decides, as in git (`!` patterns re-include)."""
    for base, spec in reversed(ignore_rules):
        relative = path.relative_to(base).as_posix() + ("/" if is_folder else "")
        verdict = spec.check_file(relative).include
        if verdict is not None:
            return verdict
    return False


def _warn_on_stderr(warning: FileError) -> None:
    import sys

    sys.stderr.write(f"{warning.filename}: warning: {warning.message}\n")


_PYTHON_SUFFIX_TUPLE = tuple(PYTHON_SUFFIXES)
_entry_name = operator.attrgetter("name")


def _folder_or_python_file(entry: os.DirEntry) -> bool:
    """Could the walk keep this entry (a folder, or a name with a Python suffix)? A cheap first look: a name
    that does not even end in a Python suffix is asked only whether it is a folder (from the folder listing's
    file type, without a `stat` in most file systems); the walk then asks again exactly."""
    if entry.name.endswith(_PYTHON_SUFFIX_TUPLE):
        return True
    try:
        return entry.is_dir()
    except OSError:  # a symlink loop, say: the walk describes it if it is a Python file, and it is not
        return False


def _file_id(info: os.stat_result) -> _FileId:
    return info.st_dev, info.st_ino


def _describe_unreachable(path: Path) -> str:
    """Why `path` cannot be stat'ed: missing, a broken link, a link loop, or what the OS says."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop; not followed"
        if exc.errno == errno.ENOENT and path.is_symlink():
            return f"broken symbolic link (to {os.readlink(path)})"
        return exc.strerror or str(exc)
    return "not a regular file"


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
        """The bytes to write for `new_text`: the same encoding, and the BOM if there was one."""
        try:
            data = new_text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            row, column = _position(new_text[: exc.start])
            raise SourceError(
                f"the fixed text has characters that {self.encoding} cannot encode (line {row}, column {column})",
                Location(row, column),
            ) from exc
        return codecs.BOM_UTF8 + data if self.bom else data


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
            raise SourceError(_too_large(info.st_size, limit))
        chunks = []
        total = 0
        wanted = info.st_size + 1  # one byte more than expected: to see the end of the file at once
        while True:
            chunk = os.read(fd, min(max(wanted, 65536), limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise SourceError(_too_large(total, limit))
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
    raise SourceError(_too_large(total, limit))


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
