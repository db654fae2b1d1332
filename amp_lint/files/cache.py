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

Layout, one small file per entry:

    <cache_dir>/CACHEDIR.TAG            tells backup tools to skip the folder
    <cache_dir>/.gitignore              "*": the cache never shows up in `git status`
    <cache_dir>/<version>/ab/cdef....json

Entries are written to a temporary file in their own folder and moved into place with `os.replace`,
which is atomic: a concurrent run sees either no entry or a complete one. A corrupt or unreadable
entry is a miss. If the cache folder cannot be written (read-only file system, no permission, disk
full), the cache turns itself off for the rest of the run instead of failing the check.

Startup time matters for pre-commit-sized runs, so hashlib, json and tempfile are imported only
when first needed (a warm run never imports tempfile).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Set, Tuple

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
# A dependency larger than this is not read (the project index does not read it either): its digest is "".
DEPENDENCY_BYTES_LIMIT = 2_000_000


def dependency_digest(path: str) -> str:
    """The sha256 of a regular file of at most DEPENDENCY_BYTES_LIMIT bytes; "" for anything else (missing,
    a folder, a FIFO, too large, unreadable). A FIFO is never opened: stat first."""
    import hashlib
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
    return hashlib.sha256(data).hexdigest()


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
        return os.path.isdir(self._entries_dir)

    @property
    def enabled(self) -> bool:
        """False once writing has failed: the run goes on without a cache."""
        return self._enabled

    def key(self, path: Path, content: bytes, extra: bytes = b"") -> str:
        """The hex sha256 of (version, settings key, absolute path, content, and `extra`: what else the
        result depends on that must be computed afresh at each lookup, such as the set of files that call
        this file's functions, which a new file can join)."""
        import hashlib

        digest = hashlib.sha256()
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
        digest.update(content)
        return digest.hexdigest()

    def get(self, path: Path, content: bytes, extra: bytes = b"") -> Optional[dict]:
        """The payload stored for this file and content, or None on a miss (also when a file the stored
        result depends on has changed since)."""
        if not self._enabled:
            return None
        key = self.key(path, content, extra)
        try:
            with open(self._entry_path(key), "rb") as entry_file:
                raw = entry_file.read()
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
        if not self._enabled:
            return
        import json

        key = self.key(path, content, extra)
        entry = {"key": key, "payload": payload}
        if dependencies:
            entry["depends"] = [[dependency, digest] for dependency, digest in dependencies]
        data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
        entry_path = self._entry_path(key)
        try:
            self._prepare()
            shard_dir = os.path.dirname(entry_path)
            if shard_dir not in self._shard_dirs_made:
                os.makedirs(shard_dir, exist_ok=True)
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
        """Remove the cache folder. True if something was removed.

        A folder without our CACHEDIR.TAG is left alone, so that a mistyped `--cache-dir` pointing
        at real work is never deleted.
        """
        import shutil

        cache_dir = os.path.abspath(cache_dir)
        if not os.path.isfile(os.path.join(cache_dir, CACHEDIR_TAG_NAME)):
            return False
        shutil.rmtree(cache_dir, ignore_errors=True)
        return True

    def _entry_path(self, key: str) -> str:
        return os.path.join(self._entries_dir, key[:2], key[2:] + ".json")

    def _prepare(self) -> None:
        """Create the cache folder with its tag and .gitignore, once per run."""
        if self._prepared:
            return
        os.makedirs(self._entries_dir, exist_ok=True)
        for name, content in (
            (CACHEDIR_TAG_NAME, CACHEDIR_TAG_CONTENT),
            (".gitignore", GITIGNORE_CONTENT),
        ):
            target = os.path.join(self.cache_dir, name)
            if not os.path.exists(target):
                # Atomic too: two first runs at once must not leave a half-written tag.
                os.replace(_write_temp_file(self.cache_dir, content.encode("utf-8")), target)
        self._prepared = True


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
