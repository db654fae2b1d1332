"""The walk index: what a run with a result cache learnt about each folder it listed, so that the next run
lists again only the folders that changed (issue 31: a warm run of a package of 2,000 files in 0.3 s).

A folder's entries change only together with its `stat` (an entry added, removed or renamed changes the
folder's modification time; a change of its permissions, its change time). So, per folder (by absolute
path), the index keeps:

- the folder's `stat` signature (modification and change times, inode, device);
- what besides the listing decided on its entries (`walk._Walker._context`): the exclude globs and their
  root, whether ignore files count, every ignore file in force with its own `stat` signature, and at a work
  tree's root the `stat` of `.git/info/exclude`;
- the names in it that change those decisions (`.git`, `.gitignore`);
- the entries the walk kept, in name order: folders to enter and Python files to check.

A later walk that finds the same folder `stat` and, with the settings of this run, the same decision context,
takes the kept entries from the index; it still `stat`s each of them (the run needs each file's `stat`
anyway, and a symbolic link's target can change without its folder changing). Anything else (a new or
deleted file, a renamed folder, an edited `.gitignore`, other settings or options) lists the folder again.
A folder whose listing raised an error or a warning is never remembered, so that every run reports it.

A folder modified in the last seconds may change again within the file system's clock tick and keep its
modification time: it is not remembered (git's "racily clean" rule, as for files: `engine.stored`). Any
later change of a folder remembered sets its modification time to the time of that change, which is not
the remembered one.

The index is one entry of the result cache, beside the lists of known files, and it is written only when
a folder's record changed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# The cache entry that holds the walk index.
WALK_INDEX_KEY = Path("<folders as the last walk found them>")

# The most folders the index keeps (about 100 bytes and one name per kept entry each).
FOLDERS_LIMIT = 100_000

# A folder changed this recently is not remembered (see the module's docstring).
RACY_SECONDS = 3.0

# Per folder: [stat signature, decision context, special names ("name\n" each), kept entries ("d"/"f" + name)].
_Record = list


def folder_signature(info: os.stat_result) -> str:
    return f"{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}:{info.st_dev}"


class WalkIndex:
    """The folders a walk may take from the last one (`recall`), and what this walk found (`remember`)."""

    def __init__(self, folders: Optional[Dict[str, _Record]] = None) -> None:
        self._old: Dict[str, _Record] = folders or {}
        self._new: Dict[str, _Record] = {}
        self.changed = False  # does the index need writing?
        self._now = time.time()

    def recall(self, absolute_folder: str, info: os.stat_result) -> Optional[Tuple[str, List[str]]]:
        """(special names, kept entries) remembered for a folder whose `stat` is unchanged, else None."""
        record = self._old.get(absolute_folder)
        if record is None or record[0] != folder_signature(info):
            return None
        return record[2], record[3]

    def same_context(self, absolute_folder: str, context: str) -> bool:
        return self._old[absolute_folder][1] == context

    def keep(self, absolute_folder: str) -> None:
        """The folder was walked as remembered: its record goes on."""
        self._new[absolute_folder] = self._old[absolute_folder]

    def remember(self, absolute_folder: str, info: os.stat_result, context: str, special: str, kept: List[str]) -> None:
        if info.st_mtime_ns / 1e9 > self._now - RACY_SECONDS:
            return  # a later change within the same clock tick would keep this modification time
        record = [folder_signature(info), context, special, kept]
        self._new[absolute_folder] = record
        if self._old.get(absolute_folder) != record:
            self.changed = True

    def records(self) -> Dict[str, _Record]:
        """What the next run should find: this walk's folders, then the earlier ones it did not walk (another
        run's paths), up to `FOLDERS_LIMIT`."""
        merged = dict(self._new)
        for folder, record in self._old.items():
            if len(merged) >= FOLDERS_LIMIT:
                break
            merged.setdefault(folder, record)
        return merged


def load(cache) -> Optional[WalkIndex]:
    """The walk index the cache holds (an empty one when it holds none, or one that does not validate); None
    for a run without a cache (it lists every folder, and remembers nothing)."""
    if cache is None:
        return None
    entry = cache.get(WALK_INDEX_KEY, b"")
    folders = entry.get("folders") if isinstance(entry, dict) else None
    contexts = entry.get("contexts") if isinstance(entry, dict) else None
    if not isinstance(folders, dict) or not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
        return WalkIndex()
    for record in folders.values():
        if not _valid(record, len(contexts)):
            return WalkIndex()
        record[1] = contexts[record[1]]  # stored once each: a package's folders share a few contexts
    return WalkIndex(folders)


def store(cache, index: WalkIndex) -> None:
    """Write the index back when a folder's record changed."""
    if cache is None or not index.changed:
        return
    numbers: Dict[str, int] = {}
    folders = {}
    for folder, (signature, context, special, kept) in index.records().items():
        folders[folder] = [signature, numbers.setdefault(context, len(numbers)), special, kept]
    cache.put(WALK_INDEX_KEY, b"", {"contexts": list(numbers), "folders": folders})


def _valid(record: object, contexts: int) -> bool:
    return (
        isinstance(record, list)
        and len(record) == 4
        and isinstance(record[0], str)
        and type(record[1]) is int
        and 0 <= record[1] < contexts
        and isinstance(record[2], str)
        and isinstance(record[3], list)
        and all(isinstance(item, str) and len(item) > 1 and item[0] in "df" for item in record[3])
    )
