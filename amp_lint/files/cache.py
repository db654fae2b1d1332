"""A per-file result cache, so that a run over unchanged files skips their analysis (like Ruff's).

An entry maps (amp-lint version, the settings that change what a check reports, the file's absolute
path, the file's bytes) to a JSON payload: the diagnostics the engine found in that file. The key is
the sha256 of those four parts, so a changed file, changed settings or a new version simply miss;
nothing is ever invalidated in place. The settings part is the run's, plus the file's own check
configuration where the caller gives one (`set_file_settings`): a nested configuration file, a
per-file ignore or an output format that needs fix edits (JSON, SARIF) changes what is stored.

A file's result can depend on other files too: the project modules its analysis read to follow calls
(`amp_lint.analysis.project.ProjectIndex.recording`). The entry lists them with the digest each had
(`dependency_digest`), and a lookup is a hit only while every one of them still has that digest: an edit
in a helper module is a miss for the files whose analysis read it, and for no other file. Only the
dependencies of an entry are read on a lookup, never the project's imports as a whole.

The paths inside a payload are the ones of the run that stored it; whoever replays an entry names the
file as the current run does (absolute in, absolute out), never as the stored payload did.

Layout, one small file per file checked (per settings), named by the digest of (version, settings, path)
only: an edit replaces the file's entry instead of adding one, so the cache holds one entry per file:

    <cache_dir>/CACHEDIR.TAG            tells backup tools to skip the folder
    <cache_dir>/.gitignore              "*": the cache never shows up in `git status`
    <cache_dir>/<version>/ab/cdef....json
    <cache_dir>/<version>/.last-pruned  when this version's entries were last pruned (its mtime)

Pruning, at most once a day per version (`PRUNE_EVERY_SECONDS`), by the first run that stores something:
entries not written for `ENTRY_LIFETIME_SECONDS` go (a deleted or renamed file's among them; an unchanged
file's entry is rewritten by the next run after it goes), and so do other versions' folders that no run
has used for that long.

The cache is only used where only this user can write: the folder and the folders in it must be real
folders (not symbolic links: a `.amp_lint_cache` link committed in a repository must not make amp-lint
write elsewhere), owned by the user that runs amp-lint and not writable by every user; otherwise another
local user could plant entries that hide every finding. A cache that fails these checks is not used
(a warning says why) and the run goes on without one. Folders are created 0755 whatever the umask.

Entries are written to a temporary file in their own folder and moved into place with `os.replace`,
which is atomic: a concurrent run sees either no entry or a complete one. A corrupt or unreadable
entry is a miss. If the cache folder cannot be written (read-only file system, no permission, disk
full), the cache turns itself off for the rest of the run instead of failing the check.

Startup time matters for pre-commit-sized runs, so json and tempfile are imported only when first
needed (a warm run never imports tempfile), and the digests come from `amp_lint.files.digests`, which
does not import hashlib (nor OpenSSL's bindings with it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Set, Tuple

from amp_lint.files import digests

if TYPE_CHECKING:
    from pathlib import Path

CACHEDIR_TAG_NAME = "CACHEDIR.TAG"
# The signature line is fixed by the Cache Directory Tagging Specification.
CACHEDIR_TAG_CONTENT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by amp-lint.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)
GITIGNORE_CONTENT = "# Automatically created by amp-lint.\n*\n"
PRUNE_EVERY_SECONDS = 24 * 3600
ENTRY_LIFETIME_SECONDS = 30 * 24 * 3600
_PRUNE_STAMP = ".last-pruned"
_FOLDER_MODE = 0o755
# A dependency larger than this is not read (the project index does not read it either): its digest is "".
DEPENDENCY_BYTES_LIMIT = 2_000_000


def dependency_digest(path: str) -> str:
    """The sha256 of a regular file of at most DEPENDENCY_BYTES_LIMIT bytes; "" for anything else (missing,
    a folder, a FIFO, too large, unreadable). A FIFO is never opened: stat first."""
    import stat

    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > DEPENDENCY_BYTES_LIMIT:
            return ""
        with open(path, "rb") as handle:
            data = handle.read(DEPENDENCY_BYTES_LIMIT + 1)
    except OSError:
        return ""
    if len(data) > DEPENDENCY_BYTES_LIMIT:
        return ""
    return digests.sha256(data).hexdigest()


def content_digest(content: bytes) -> str:
    """The digest of a file's bytes that the cache keys by (blake2b, 128 bits, hex): also what the runner
    keeps, beside the file's `stat`, for the files a warm run need not read again."""
    return digests.blake2b(content, 16).hexdigest()


class ResultCache:
    """Per-file results keyed by version, settings, absolute path and content."""

    def __init__(self, cache_dir: Path, settings_key: str, version: str) -> None:
        self.cache_dir = os.path.abspath(cache_dir)
        self.settings_key = settings_key
        self.version = version
        # A version string becomes a folder name: keep it to one path component.
        version_folder = version.replace("/", "_").replace("\\", "_") or "unknown"
        self._entries_dir = os.path.join(self.cache_dir, version_folder)
        self._enabled = True
        self._checked = False  # the folders' ownership and permissions (`_check_folders`), once a run
        self._prepared = False
        self._shard_dirs_made: Set[str] = set()
        self._file_settings: Dict[str, str] = {}
        self._digests: Dict[str, str] = {}  # dependency path -> its digest now (read once a run)

    def set_file_settings(self, file_settings: Dict[str, str]) -> None:
        """Per file (any spelling of its path), a description of the check configuration that applies to it."""
        self._file_settings = {os.path.abspath(path): key for path, key in file_settings.items()}

    @property
    def has_entries(self) -> bool:
        """Has a run of this amp-lint version stored results here (a warm run settles most files)?"""
        return self._usable() and os.path.isdir(self._entries_dir)

    @property
    def enabled(self) -> bool:
        """False once writing has failed: the run goes on without a cache."""
        return self._enabled

    def key(self, path: Path, content: bytes, extra: bytes = b"", *, digest_of_content: Optional[str] = None) -> str:
        """The hex sha256 of (version, settings key, absolute path, the content's digest (`content_digest`),
        and `extra`: what else the result depends on that must be computed afresh at each lookup, such as the
        set of files that call this file's functions, which a new file can join). The content enters through
        its digest, so that a run that knows a file's digest (an unchanged file: `get(digest_of_content=)`)
        need not read the file to find its entry."""
        if digest_of_content is None:
            digest_of_content = content_digest(content)
        digest = digests.sha256()
        absolute = os.path.abspath(path)
        for part in (
            self.version.encode("utf-8"),
            self.settings_key.encode("utf-8"),
            self._file_settings.get(absolute, "").encode("utf-8"),
            os.fsencode(absolute),
            extra,
        ):
            # Length prefixes keep the parts apart: ("ab", "c") and ("a", "bc") differ.
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        digest.update(digest_of_content.encode("ascii"))
        return digest.hexdigest()

    def _entry_key(self, path: Path) -> str:
        """The name of a file's entry: (version, settings, absolute path), not its content."""
        return self.key(path, b"", b"entry")

    def _usable(self) -> bool:
        if not self._checked:
            self._checked = True
            reason = _unsafe_folder(self.cache_dir) or _unsafe_folder(self._entries_dir)
            if reason is not None:
                self._disable(reason)
        return self._enabled

    def _disable(self, reason: str) -> None:
        import sys

        self._enabled = False
        sys.stderr.write(f"amp-lint: warning: not using the cache: {reason}\n")

    def get(self, path: Path, content: bytes, extra: bytes = b"", *, digest_of_content: Optional[str] = None) -> Optional[dict]:
        """The payload stored for this file and content (or, without reading it, for the content whose
        `content_digest` is `digest_of_content`), or None on a miss (also when a file the stored result
        depends on has changed since)."""
        if not self._usable():
            return None
        key = self.key(path, content, extra, digest_of_content=digest_of_content)
        try:  # never through a symbolic link, never a FIFO
            fd = os.open(self._entry_path(self._entry_key(path)), _ENTRY_READ_FLAGS)
            with open(fd, "rb") as entry_file:
                raw = entry_file.read(_ENTRY_BYTES_LIMIT + 1)
        except OSError:  # missing, unreadable, or a folder in the way: a miss all the same
            return None
        import json

        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):  # corrupt (a disk error, a hand edit): a miss, the next put repairs it
            return None
        # The entry names its own key, so a file that ended up under the wrong name is a miss too.
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        payload = entry.get("payload")
        if not isinstance(payload, dict) or not self._still_valid(entry.get("depends", [])):
            return None
        return payload

    def put(
        self, path: Path, content: bytes, payload: dict, dependencies: Sequence[Tuple[str, str]] = (), extra: bytes = b""
    ) -> None:
        """Store the payload for this file and content, with the `(path, digest)` of every other file the
        result depends on; never raises for file-system trouble."""
        if not self._usable():
            return
        import json

        key = self.key(path, content, extra)
        entry = {"key": key, "payload": payload}
        if dependencies:
            entry["depends"] = [[dependency, digest] for dependency, digest in dependencies]
        data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
        entry_path = self._entry_path(self._entry_key(path))
        try:
            self._prepare()
            shard_dir = os.path.dirname(entry_path)
            if shard_dir not in self._shard_dirs_made:
                _make_folder(shard_dir)
                reason = _unsafe_folder(shard_dir)
                if reason is not None:
                    self._disable(reason)
                    return
                self._shard_dirs_made.add(shard_dir)
            temp_path = _write_temp_file(shard_dir, data)
        except OSError:
            self._enabled = False  # read-only, no permission, disk full: go on without a cache
            return
        try:
            os.replace(temp_path, entry_path)
        except OSError:
            # On Windows a reader holding the entry open blocks the rename; that reader's writer
            # stored the same result, so dropping ours loses nothing.
            _remove_quietly(temp_path)

    def _still_valid(self, depends: object) -> bool:
        """Does every dependency an entry lists still have the digest it had? (Each file is read once a run.)"""
        if not isinstance(depends, list):
            return False
        for item in depends:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)):
                return False
            dependency, digest = item
            current = self._digests.get(dependency)
            if current is None:
                current = self._digests[dependency] = dependency_digest(dependency)
            if current != digest:
                return False
        return True

    @staticmethod
    def clean(cache_dir: Path) -> bool:
        """Remove the cache folder. True if something was removed (see `clean`)."""
        return clean(cache_dir)[0] == "removed"

    def _entry_path(self, key: str) -> str:
        return os.path.join(self._entries_dir, key[:2], key[2:] + ".json")

    def _prepare(self) -> None:
        """Create the cache folder with its tag and .gitignore, once per run; prune once a day."""
        if self._prepared:
            return
        _make_folder(self.cache_dir)
        _make_folder(self._entries_dir)
        for name, content in (
            (CACHEDIR_TAG_NAME, CACHEDIR_TAG_CONTENT),
            (".gitignore", GITIGNORE_CONTENT),
        ):
            target = os.path.join(self.cache_dir, name)
            if not os.path.exists(target):
                # Atomic too: two first runs at once must not leave a half-written tag.
                os.replace(_write_temp_file(self.cache_dir, content.encode("utf-8")), target)
        self._prepared = True
        self._prune_if_due()

    def _prune_if_due(self) -> None:
        import time

        stamp = os.path.join(self._entries_dir, _PRUNE_STAMP)
        now = time.time()
        try:
            if now - os.lstat(stamp).st_mtime < PRUNE_EVERY_SECONDS:
                return
        except FileNotFoundError:
            pass
        os.replace(_write_temp_file(self._entries_dir, b""), stamp)  # first: a concurrent run need not prune too
        prune(self.cache_dir, os.path.basename(self._entries_dir), now)


_ENTRY_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_ENTRY_BYTES_LIMIT = 64 * 1024 * 1024


def _make_folder(path: str) -> None:
    """Create a folder 0755 whatever the umask (mkdir's mode is masked by it, never widened)."""
    try:
        os.mkdir(path, _FOLDER_MODE)
    except FileExistsError:
        return
    except FileNotFoundError:  # the folders above too, each 0755 (`os.makedirs` gives them the umask's mode)
        parent = os.path.dirname(path)
        if parent == path:
            raise
        _make_folder(parent)
        os.mkdir(path, _FOLDER_MODE)
    os.chmod(path, _FOLDER_MODE)


def _unsafe_folder(path: str):
    """Why the folder `path` must not hold the cache, or None (also when it does not exist yet)."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link (to {os.readlink(path)}); amp-lint does not write through it"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder"
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {info.st_uid}); its entries could hide findings"
    if info.st_mode & 0o002:
        return f"{path} is writable by every user; its entries could hide findings"
    return None


def prune(cache_dir: str, current_version: str, now: float) -> int:
    """Remove entries of `current_version` not written for `ENTRY_LIFETIME_SECONDS`, and the folders of other
    versions not used for as long (their `.last-pruned` stamp, or the folder's own time). Returns the number
    of entries removed. Never follows a symbolic link; never raises for file-system trouble."""
    import shutil

    removed = 0
    oldest = now - ENTRY_LIFETIME_SECONDS
    try:
        versions = [entry for entry in os.scandir(cache_dir) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for version in versions:
        if version.name != current_version:
            try:
                stamp = os.lstat(os.path.join(version.path, _PRUNE_STAMP)).st_mtime
            except OSError:
                stamp = version.stat(follow_symlinks=False).st_mtime
            if stamp < oldest:
                shutil.rmtree(version.path, ignore_errors=True)
            continue
        try:
            shards = [entry for entry in os.scandir(version.path) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for shard in shards:
            try:
                entries = list(os.scandir(shard.path))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.stat(follow_symlinks=False).st_mtime < oldest:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:
                    continue
    return removed


def default_cache_dir(cwd: str) -> str:
    """Where a run from `cwd` keeps its cache: the folder of the configuration file that applies there
    (the project's root, also from a subfolder), else `cwd`."""
    from pathlib import Path

    from amp_lint.files.config import find_config

    config = find_config(Path(cwd))
    return os.path.join(os.path.dirname(str(config)) if config is not None else cwd, ".amp_lint_cache")


def clean(cache_dir) -> Tuple[str, str]:
    """Remove a cache folder: ("removed" | "absent" | "refused" | "failed", a sentence that says what happened).

    Only a real folder with our CACHEDIR.TAG is removed, so that a mistyped `--cache-dir` pointing at real
    work is never deleted; a symbolic link is neither followed nor removed. What could not be removed is
    said, never reported as removed.
    """
    import shutil
    import stat

    shown = os.fspath(cache_dir)
    cache_dir = os.path.abspath(cache_dir)
    try:
        info = os.lstat(cache_dir)
    except FileNotFoundError:
        return "absent", f"No cache at {shown}"
    except OSError as exc:
        return "failed", f"Cannot remove {shown}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return "refused", (
            f"Not removed: {shown} is a symbolic link (to {os.readlink(cache_dir)}), not a cache amp-lint made "
            "(it never writes through one)"
        )
    if not stat.S_ISDIR(info.st_mode) or not os.path.isfile(os.path.join(cache_dir, CACHEDIR_TAG_NAME)):
        return "refused", f"Not removed: {shown} is not an amp-lint cache (no {CACHEDIR_TAG_NAME})"
    failures = []
    shutil.rmtree(cache_dir, onerror=lambda function, path, info: failures.append((path, info[1])))
    if os.path.lexists(cache_dir):
        path, error = failures[0] if failures else (cache_dir, OSError("still there"))
        reason = getattr(error, "strerror", None) or str(error)
        return "failed", f"Could not remove all of {shown}: {path}: {reason}"
    return "removed", f"Removed {shown}"


def _write_temp_file(folder: str, data: bytes) -> str:
    """Write `data` to a new temporary file in `folder` (so that os.replace stays atomic)."""
    import tempfile

    fd, temp_path = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as temp_file:
            temp_file.write(data)
    except BaseException:
        _remove_quietly(temp_path)
        raise
    return temp_path


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
