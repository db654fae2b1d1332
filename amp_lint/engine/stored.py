"""What the result cache knows about a run's files (the runner's side of `amp_lint.files.cache`): the stored
outcome of a file, checked field by field when read back, and the two run-wide lists of files a warm run need
not read again, known by their content's digest and their `stat` (`Known`).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from amp_lint.diagnostics import Diagnostic, diagnostic_from_record, diagnostic_to_record


# The cache entry that lists files the prefilter ruled out (one entry, replaced atomically).
NEGATIVES_KEY = Path("<files that cannot hold a finding>")


# The cache entry that lists files whose result is stored, with their digest and `stat` (`Known`).
POSITIVES_KEY = Path("<files whose result is stored>")

# A file changed this recently may change again within the file system's clock tick, keeping its `stat`:
# its `stat` is not trusted to stand for its content (git's "racily clean" files), and the next run reads it.
_RACY_SECONDS = 3.0


@dataclass
class Known:
    """What the cache knows about files without reading them: `negatives`, files the prefilter ruled out, and
    `positives`, files whose result is stored, each `{path: "digest@stat signature"}`; `found`, this run's
    positives (what the next run should know); `signatures`, this run's `_signature` of each planned file."""

    negatives: Dict[str, str]
    positives: Dict[str, str]
    found: Dict[str, str]
    signatures: Dict[str, Optional[str]]

    def remember(self, path: str, raw: bytes, callers: bytes) -> None:
        """A file whose stored result was found or put: known by digest and `stat` from now on, when its key
        is its content alone and it was not written just now. A file that names a GradScaler is never known
        so: its key holds its callers in other modules (`runner._callers_key`), and a new file can become one."""
        import time

        from amp_lint.files.cache import content_digest

        signature = self.signatures.get(path)
        if callers or b"GradScaler" in raw or signature is None or float(signature.split(":")[1]) / 1e9 > time.time() - _RACY_SECONDS:
            return
        self.found[path] = content_digest(raw) + signature


# The most files the list of files the prefilter ruled out keeps (about 100 bytes each).
NEGATIVES_LIMIT = 200_000


def merged_negatives(known: Dict[str, str], found: Dict[str, str], outcomes: Dict[str, object]) -> Dict[str, str]:
    """The list of files the prefilter ruled out, as the next run should see it: this run's verdicts, and the
    earlier ones about files this run did not check that still exist (a deleted file, or one of a checkout
    that moved, is dropped); at most `NEGATIVES_LIMIT`, this run's first."""
    merged = dict(found)
    for path, digest in known.items():
        if len(merged) >= NEGATIVES_LIMIT:
            break
        if path not in merged and path not in outcomes and os.path.isfile(path):
            merged[path] = digest
    return merged


def stat_of(path: str) -> Optional[os.stat_result]:
    try:
        return os.stat(path)
    except OSError:
        return None


def signature(info: Optional[os.stat_result]) -> Optional[str]:
    """`@size:mtime:ctime:inode` of a regular file (None otherwise): the part of a ruled-out file's entry
    that lets a warm run skip reading it. A write changes the times (ctime too, which no tool sets back)."""
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    return f"@{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"


def to_payload(outcome) -> dict:
    """What the cache stores for a file's outcome (a `runner.FileOutcome`)."""
    return {"diagnostics": [diagnostic_to_record(d) for d in outcome.diagnostics], "unsafe_fixable": outcome.unsafe_fixable}


def stored_outcome(path: str, payload: dict) -> Optional[Tuple[List[Diagnostic], int]]:
    """The outcome a cache entry stored, (diagnostics, unsafe fixable count), or None when the entry is not one
    we wrote (a miss).

    The entry is keyed by the absolute path, so another run may have named the file differently
    (`pkg/train.py`, then `train.py` from inside pkg/): findings name the file as this run does.

    A cache file is outside our control (a disk error, a hand edit, another version's bug): what it
    holds is checked field by field, so that a renamed key or a number where a list belongs is a miss
    instead of a crash in this run and every later one.
    """
    records = payload.get("diagnostics")
    unsafe_fixable = payload.get("unsafe_fixable")
    if set(payload) != {"diagnostics", "unsafe_fixable"} or not isinstance(records, list) or not _is_count(unsafe_fixable):
        return None
    diagnostics = []
    for record in records:
        diagnostic = _diagnostic_from_cache(record)
        if diagnostic is None:
            return None
        diagnostics.append(dataclasses.replace(diagnostic, filename=path))
    return diagnostics, unsafe_fixable


_RECORD_STRINGS = ("code", "message", "filename", "rule_name", "source_line", "context")


def _diagnostic_from_cache(record: object) -> Optional[Diagnostic]:
    if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in _RECORD_STRINGS):
        return None
    positions = [record.get("location"), record.get("end_location")]
    fix = record.get("fix")
    if fix is not None:
        edits = fix.get("edits") if isinstance(fix, dict) else None
        if not isinstance(edits, list) or not isinstance(fix.get("message"), str):
            return None
        for edit in edits:
            if not isinstance(edit, list) or len(edit) not in (5, 6) or not isinstance(edit[4], str):
                return None
            positions += [edit[0:2], edit[2:4]] + ([[edit[5], 1]] if len(edit) == 6 else [])
    if not all(isinstance(p, list) and len(p) == 2 and all(_is_count(n) for n in p) for p in positions):
        return None
    if record.get("cell") is not None and not _is_count(record["cell"]):
        return None
    try:
        diagnostic = diagnostic_from_record(record)
    except (KeyError, TypeError, ValueError):  # a severity, confidence or applicability we do not know
        return None
    # Exactly what we write, no key more or less: anything else is not our entry.
    return diagnostic if diagnostic_to_record(diagnostic) == record else None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def known_negatives(cache) -> Dict[str, str]:
    """The cache's list of files the prefilter ruled out ({path: digest}); empty when it does not validate."""
    return known_files(cache, NEGATIVES_KEY)


def known_files(cache, key: Path) -> Dict[str, str]:
    """One of the cache's lists of files known by digest and `stat` ({path: digest}); empty when it does not validate."""
    entry = cache.get(key, b"") if cache is not None else None
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()):
        return {}
    return files
