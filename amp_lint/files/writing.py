"""Writing a fix back: all of it or nothing, to the file that was read and to no other, keeping what the
file system keeps about it (owner, permission bits, extended attributes and POSIX ACLs, hard links).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from amp_lint.files.sources import FileChangedError, SourceError, SourceText, TooLargeError, _file_id, _read_regular_file

# Held while files are being replaced. A worker process stopped by Ctrl-C takes it before it exits
# (`engine.workers`): it ends at once, unless it is writing, and then as soon as the write is done.
WRITE_LOCK = threading.Lock()


def write_atomic(path: Path, new_text: str, original: SourceText) -> None:
    """Replace the file with `new_text`, or raise and leave it exactly as it was.

    The text goes to a temporary file in the same folder (`.{name}.amp-lint-XXXX.tmp`) that gets
    the original's permission bits and owner, is fsynced, and is renamed over the original, so a
    crash, a full disk or Ctrl-C never leaves a half-written file. The write is refused
    (`FileChangedError`) if the file on disk is no longer the file that was read (its st_dev and st_ino:
    a swap for a symlink to an identical file must not receive the fix) or no longer holds exactly
    `original.raw`, checked before the temporary file is made and again just before the rename, each time
    read as the first read was (non-blocking, regular files only, bounded). The temporary file gets the
    original's extended attributes and POSIX ACLs. A symlink is written through: its target is replaced,
    the link stays.

    A file with hard links (a second name for the same file) is written in place instead, as Ruff
    and Black write every file: a rename would give this name a new file and leave the others with
    the old text. The temporary copy is still written and read back first (a full disk fails there,
    with the original untouched), and a failed in-place write puts the original bytes back.
    """
    data = original.encode(new_text)
    if data == original.raw:
        return
    with WRITE_LOCK:
        _write_atomic(Path(os.path.realpath(path)), data, original)


def _write_atomic(target: Path, data: bytes, original: SourceText) -> None:
    try:
        info = os.stat(target)
    except FileNotFoundError:
        raise FileChangedError("file was removed after it was read; not written") from None
    except OSError as exc:
        raise SourceError(f"{exc.strerror or exc}; not written") from exc
    if original.identity is not None and _file_id(info) != original.identity:
        # Swapped for a symlink to another file (or replaced) since it was read: never write the fix there.
        raise FileChangedError("file was replaced by another file after it was read; not written")
    # Root may write anywhere, so the permission bits are checked as well as access().
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise SourceError("file is read-only; not written")
    _unchanged_or_raise(target, original.raw, info)  # before a temporary file exists, and again before the rename
    try:
        _replace(target, data, info, original.raw)
    except OSError as exc:
        raise SourceError(f"{exc.strerror or exc}; file left unchanged") from exc


def write_all_or_none(items: Sequence[Tuple[Path, str, SourceText]]) -> None:
    """Replace several files, each with its new text (a fix that changes several files), or raise and leave
    every one of them exactly as it was.

    Each file gets what `write_atomic` gives one: a temporary copy beside it with its permission bits, owner,
    extended attributes and ACLs, fsynced, and the check that it is still the file that was read and holds the
    same bytes. Only when every copy is ready are they renamed over the originals; a rename that fails puts the
    originals already replaced back (from the bytes that were read). A file with hard links is refused (writing
    it in place could not be undone with the others).
    """
    with WRITE_LOCK:
        _write_all_or_none(items)


def _write_all_or_none(items: Sequence[Tuple[Path, str, SourceText]]) -> None:
    import tempfile

    staged: List[Tuple[Path, str, bytes, SourceText]] = []
    try:
        for path, new_text, original in items:
            data = original.encode(new_text)
            if data == original.raw:
                continue
            target = Path(os.path.realpath(path))
            info = _writable_or_raise(target, original)
            if info.st_nlink > 1:
                raise SourceError(f"{path} has hard links, and a fix that changes several files writes none in place; not written")
            try:
                fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.amp-lint-", suffix=".tmp", dir=target.parent)
            except OSError as exc:
                if exc.errno not in _FOLDER_REFUSES:
                    raise
                raise SourceError(
                    f"the folder {target.parent} cannot be written ({exc.strerror}), and a fix that changes several "
                    "files writes none in place; not written"
                ) from exc
            staged.append((target, temporary, data, original))
            try:
                _keep_owner(temporary, fd, info)
                os.chmod(temporary, stat.S_IMODE(info.st_mode))
                _copy_extended_attributes(target, fd)
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        for target, _, _, original in staged:
            _unchanged_or_raise(target, original.raw, os.stat(target))
    except BaseException:
        for _, temporary, _, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise
    replaced: List[Tuple[Path, SourceText]] = []
    try:
        for target, temporary, _, original in staged:
            os.replace(temporary, target)
            replaced.append((target, original))
    except BaseException as exc:
        for _, temporary, _, _ in staged[len(replaced) :]:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        for target, original in replaced:  # the originals back, the same way
            with contextlib.suppress(OSError):
                _replace(target, original.raw, os.stat(target), _read_bytes(target) or b"")
        if isinstance(exc, OSError) and exc.errno in _RENAME_REFUSES:
            failed = staged[len(replaced)][0]
            raise SourceError(
                f"{failed} cannot be renamed over ({exc.strerror}), and a fix that changes several files writes "
                "none in place; not written"
            ) from exc
        raise


def _writable_or_raise(target: Path, original: SourceText) -> os.stat_result:
    """The file's stat when it may be written (still the file that was read, not read-only); else raise."""
    try:
        info = os.stat(target)
    except FileNotFoundError:
        raise FileChangedError(f"{target} was removed after it was read; not written") from None
    except OSError as exc:
        raise SourceError(f"{exc.strerror or exc}; not written") from exc
    if original.identity is not None and _file_id(info) != original.identity:
        raise FileChangedError(f"{target} was replaced by another file after it was read; not written")
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise SourceError(f"{target} is read-only; not written")
    return info


# A folder the user cannot write (EACCES, EPERM: no temporary file beside the file, no rename in it), a
# single-file bind mount (EBUSY: the mount point cannot be renamed over), another file system (EXDEV).
_FOLDER_REFUSES = (errno.EACCES, errno.EPERM)
_RENAME_REFUSES = (errno.EBUSY, errno.EXDEV, errno.EACCES, errno.EPERM)


def _replace(target: Path, data: bytes, info: os.stat_result, expected: bytes) -> None:
    import tempfile  # only a fix writes: a check run does not pay for this import

    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.amp-lint-", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        if exc.errno not in _FOLDER_REFUSES:
            raise
        # The file may be written, its folder not: written in place, as Ruff and Black write every file.
        _unchanged_or_raise(target, expected, info)
        try:
            _write_in_place(target, data, expected)
        except OSError as in_place:
            raise SourceError(
                f"the folder {target.parent} cannot be written ({exc.strerror}), and writing the file in place "
                f"failed ({in_place.strerror or in_place}); file left unchanged"
            ) from in_place
        return
    try:
        try:
            _keep_owner(temporary, fd, info)  # before chmod: chown clears setuid/setgid bits
            os.chmod(temporary, stat.S_IMODE(info.st_mode))
            _copy_extended_attributes(target, fd)  # after chmod: an ACL sets the group bits from its mask
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        _unchanged_or_raise(target, expected, info)
        if info.st_nlink > 1:
            _copy_in_place(target, temporary, data, expected)
        else:
            try:
                os.replace(temporary, target)
            except OSError as exc:
                if exc.errno not in _RENAME_REFUSES:
                    raise
                # Written but not renamed over: in place, after the temporary copy read back (a full disk failed there).
                _unchanged_or_raise(target, expected, info)
                _copy_in_place(target, temporary, data, expected)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _copy_in_place(target: Path, temporary: str, data: bytes, expected: bytes) -> None:
    """Write `data` into the file itself, once its temporary copy reads back as written; then drop the copy."""
    if _read_bytes(Path(temporary)) != data:
        raise SourceError("the temporary copy does not read back as written; file left unchanged")
    _write_in_place(target, data, expected)
    with contextlib.suppress(OSError):  # a folder that refused the rename may refuse this too: removed below
        os.unlink(temporary)


def _write_in_place(target: Path, data: bytes, original: bytes) -> None:
    """Overwrite the file itself (its inode: every hard link sees the change); on failure, the original back."""
    fd = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        try:
            _write_all(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.lseek(fd, 0, os.SEEK_SET)
                _write_all(fd, original)
                os.ftruncate(fd, len(original))
                os.fsync(fd)
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    remaining = memoryview(data)
    while remaining:
        remaining = remaining[os.write(fd, remaining) :]


# The temporary files `_replace` creates: `tempfile.mkstemp` puts 8 characters of its alphabet
# between the prefix and the suffix.
_TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.amp-lint-[a-z0-9_]{8}\.tmp\Z")
# A write takes milliseconds; a temporary file this much older than the run was left by a killed one.
STALE_TEMPORARY_SECONDS = 60


def remove_stale_temporaries(folder: str, started: float) -> List[str]:
    """Remove the temporary files a killed `--fix` left in `folder` (`.name.py.amp-lint-XXXX.tmp`).

    Only regular files with exactly our name pattern, last modified well before this run started (a
    concurrent run's write in progress is left alone). Returns the paths removed.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.endswith(".tmp") or ".amp-lint-" not in entry.name or not _TEMPORARY_NAME.match(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_mtime < started - STALE_TEMPORARY_SECONDS:
                os.unlink(entry.path)
                removed.append(entry.path)
        except OSError:
            continue
    return removed


def _keep_owner(temporary: str, fd: int, info: os.stat_result) -> None:
    """When root fixes a user's file, the file must stay the user's; elsewhere this is a no-op."""
    created = os.fstat(fd)
    if (created.st_uid, created.st_gid) != (info.st_uid, info.st_gid) and hasattr(os, "chown"):
        with contextlib.suppress(OSError):
            os.chown(temporary, info.st_uid, info.st_gid)


def _read_bytes(path: Path) -> Optional[bytes]:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _unchanged_or_raise(target: Path, expected: bytes, info: os.stat_result) -> None:
    """`FileChangedError` unless `target` is still the same regular file (`info`'s st_dev and st_ino) and
    holds exactly `expected`. Read as the first read was (without blocking, regular files only) and at
    most one byte more than expected: a file swapped for a FIFO or a `/dev/zero` link is refused at once."""
    try:
        now, now_info = _read_regular_file(str(target), len(expected), getattr(os, "O_NOFOLLOW", 0))
    except TooLargeError:  # it grew: the re-read stops one byte past what was read
        raise FileChangedError("file changed on disk after it was read (it grew); not written") from None
    except SourceError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise FileChangedError("file was removed after it was read; not written") from None
        # "not a regular file", or the reason the file cannot be opened now
        raise FileChangedError(f"file changed on disk after it was read (now: {exc.message}); not written") from None
    if _file_id(now_info) != _file_id(info) or now != expected:
        raise FileChangedError("file changed on disk after it was read; not written")


# Extended attributes a fix must keep: the user's own and the POSIX ACLs. Others (`security.selinux`) the
# kernel sets on the new file itself, and only root may copy `trusted.*`: copied where allowed.
_ATTRIBUTES_TO_KEEP = ("user.", "system.posix_acl_")


def _copy_extended_attributes(target: Path, fd: int) -> None:
    """Copy the original's extended attributes (POSIX ACLs included) to the temporary file before the rename;
    refuse the write (`SourceError`) when one that must be kept cannot be copied."""
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(target)
    except OSError:  # the file system has none (ENOTSUP)
        return
    for name in names:
        try:
            os.setxattr(fd, name, os.getxattr(target, name))
        except OSError as exc:
            if name.startswith(_ATTRIBUTES_TO_KEEP):
                raise SourceError(f"cannot keep the extended attribute {name} ({exc.strerror or exc}); file left unchanged") from exc
