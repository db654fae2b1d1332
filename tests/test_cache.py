"""The result cache: hits and misses, its key, its folder, and its behaviour under trouble."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from amp_lint.files.cache import CACHEDIR_TAG_NAME, ResultCache

SOURCE = b"import torch\nscaler = torch.amp.GradScaler()\n"
PAYLOAD = {"diagnostics": [{"code": "AMP001", "location": {"row": 2, "column": 10}}], "errors": []}


def make_cache(cache_dir: Path, settings_key: str = "settings", version: str = "1.0") -> ResultCache:
    return ResultCache(cache_dir, settings_key=settings_key, version=version)


def entry_files(cache_dir: Path):
    return sorted(p for p in cache_dir.rglob("*.json") if not p.name.startswith(".tmp-"))


def test_miss_then_hit(tmp_path):
    cache = make_cache(tmp_path / "cache")
    source_file = tmp_path / "train.py"

    assert cache.get(source_file, SOURCE) is None
    cache.put(source_file, SOURCE, PAYLOAD)
    assert cache.get(source_file, SOURCE) == PAYLOAD


def test_hit_across_instances(tmp_path):
    """A second run (a new instance) reads what the first one stored."""
    source_file = tmp_path / "train.py"
    make_cache(tmp_path / "cache").put(source_file, SOURCE, PAYLOAD)

    assert make_cache(tmp_path / "cache").get(source_file, SOURCE) == PAYLOAD


def test_empty_payload_is_a_hit(tmp_path):
    """A clean file caches as an empty result, which is not the same as a miss."""
    cache = make_cache(tmp_path / "cache")
    cache.put(tmp_path / "clean.py", b"x = 1\n", {})

    assert cache.get(tmp_path / "clean.py", b"x = 1\n") == {}


@pytest.mark.parametrize(
    "changed",
    [
        {"content": SOURCE + b"# edited\n"},
        {"path_name": "other.py"},
        {"settings_key": "other settings"},
        {"version": "1.1"},
    ],
    ids=["content", "path", "settings", "version"],
)
def test_key_changes_miss(tmp_path, changed):
    make_cache(tmp_path / "cache").put(tmp_path / "train.py", SOURCE, PAYLOAD)

    cache = make_cache(
        tmp_path / "cache",
        settings_key=changed.get("settings_key", "settings"),
        version=changed.get("version", "1.0"),
    )
    assert cache.get(tmp_path / changed.get("path_name", "train.py"), changed.get("content", SOURCE)) is None


def test_key_uses_the_absolute_path(tmp_path, monkeypatch):
    cache = make_cache(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)

    assert cache.key(Path("train.py"), SOURCE) == cache.key(tmp_path / "train.py", SOURCE)


def test_key_parts_do_not_run_together(tmp_path):
    first = ResultCache(tmp_path, settings_key="ab", version="c")
    second = ResultCache(tmp_path, settings_key="b", version="ca")

    assert first.key(tmp_path / "f.py", SOURCE) != second.key(tmp_path / "f.py", SOURCE)


def test_layout_one_file_per_entry_under_the_version(tmp_path):
    cache_dir = tmp_path / "cache"
    cache = make_cache(cache_dir, version="0.1.0")
    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)

    key = cache._entry_key(tmp_path / "train.py")  # the path's entry: an edit replaces it (issue 29, item 13)
    assert entry_files(cache_dir) == [cache_dir / "0.1.0" / key[:2] / f"{key[2:]}.json"]
    assert not list(cache_dir.rglob(".tmp-*")), "no temporary files are left behind"


def test_first_use_writes_cachedir_tag_and_gitignore(tmp_path):
    cache_dir = tmp_path / "nested" / "cache"
    cache = make_cache(cache_dir)
    assert cache.get(tmp_path / "train.py", SOURCE) is None
    assert not cache_dir.exists(), "a read alone creates nothing"

    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)

    tag = (cache_dir / CACHEDIR_TAG_NAME).read_text()
    assert tag.startswith("Signature: 8a477f597d28d172789f06886806bc55")
    gitignore_lines = (cache_dir / ".gitignore").read_text().splitlines()
    assert "*" in gitignore_lines


def test_existing_tag_is_kept(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / CACHEDIR_TAG_NAME).write_text("Signature: 8a477f597d28d172789f06886806bc55\n# ours\n")

    make_cache(cache_dir).put(tmp_path / "train.py", SOURCE, PAYLOAD)

    assert (cache_dir / CACHEDIR_TAG_NAME).read_text().endswith("# ours\n")


@pytest.mark.parametrize(
    "corrupt_bytes",
    [b"", b'{"key": "', b"\x00\xff\xfe garbage", b"[1, 2, 3]", b'{"key": "0000", "payload": {}}', b'{"payload": 3}'],
    ids=["empty", "truncated", "binary", "not-a-dict", "wrong-key", "bad-payload"],
)
def test_corrupt_entry_is_a_miss(tmp_path, corrupt_bytes):
    cache = make_cache(tmp_path / "cache")
    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)
    [entry] = entry_files(tmp_path / "cache")
    entry.write_bytes(corrupt_bytes)

    assert cache.get(tmp_path / "train.py", SOURCE) is None
    # ...and the next put repairs it.
    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)
    assert cache.get(tmp_path / "train.py", SOURCE) == PAYLOAD


def test_unreadable_entry_is_a_miss(tmp_path):
    cache = make_cache(tmp_path / "cache")
    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)
    [entry] = entry_files(tmp_path / "cache")
    entry.unlink()
    entry.mkdir()  # a folder where the entry should be: opening it fails

    assert cache.get(tmp_path / "train.py", SOURCE) is None


def test_unwritable_cache_dir_disables_the_cache(tmp_path):
    """The parent of the cache folder is a file, so nothing can be created: no error, no cache."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    cache = make_cache(blocker / "cache")

    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)

    assert not cache.enabled
    assert cache.get(tmp_path / "train.py", SOURCE) is None
    cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)  # still quiet


def test_read_only_file_system_disables_the_cache(tmp_path, monkeypatch):
    """Tests often run as root, which ignores permission bits, so raise EROFS as the kernel would."""
    cache_dir = tmp_path / "cache"
    writer = make_cache(cache_dir)
    writer.put(tmp_path / "train.py", SOURCE, PAYLOAD)
    cache = make_cache(cache_dir)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("tempfile.mkstemp", read_only)
    cache.put(tmp_path / "other.py", SOURCE, PAYLOAD)

    assert not cache.enabled
    assert cache.get(tmp_path / "train.py", SOURCE) is None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores permission bits")
def test_permission_denied_disables_the_cache(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        cache = make_cache(locked / "cache")
        cache.put(tmp_path / "train.py", SOURCE, PAYLOAD)
        assert not cache.enabled
    finally:
        locked.chmod(0o700)


def test_clean_removes_the_cache(tmp_path):
    cache_dir = tmp_path / "cache"
    make_cache(cache_dir).put(tmp_path / "train.py", SOURCE, PAYLOAD)

    assert ResultCache.clean(cache_dir) is True
    assert not cache_dir.exists()
    assert ResultCache.clean(cache_dir) is False, "nothing left to remove"


def test_clean_leaves_a_folder_that_is_not_a_cache(tmp_path):
    precious = tmp_path / "src"
    precious.mkdir()
    (precious / "train.py").write_bytes(SOURCE)

    assert ResultCache.clean(precious) is False
    assert (precious / "train.py").exists()


# -- concurrency -------------------------------------------------------------------------------

ROUNDS = 150
KEYS = 8


def payload_for(index: int, writer: int) -> dict:
    # Big enough that a torn write would be visible, and checkable on its own.
    rows = [{"code": "AMP%03d" % index, "row": row, "writer": writer} for row in range(200)]
    return {"index": index, "count": len(rows), "diagnostics": rows}


def is_complete(payload: dict, index: int) -> bool:
    return payload.get("index") == index and payload.get("count") == 200 and len(payload.get("diagnostics", [])) == 200


def hammer(cache_dir: str, source_dir: str, writer: int, results) -> None:
    """Write and read the same keys as the other process, many times; report what was seen."""
    try:
        cache = ResultCache(Path(cache_dir), settings_key="settings", version="1.0")
        hits = misses = 0
        for round_number in range(ROUNDS):
            for index in range(KEYS):
                path = Path(source_dir) / f"module_{index}.py"
                content = b"x = %d\n" % index
                if (round_number + index + writer) % 2:
                    cache.put(path, content, payload_for(index, writer))
                found = cache.get(path, content)
                if found is None:
                    misses += 1
                elif is_complete(found, index):
                    hits += 1
                else:
                    results.put(("torn", writer, index))
                    return
        results.put(("ok", writer, hits, misses, cache.enabled))
    except BaseException as error:  # report it to the parent, which asserts
        results.put(("error", writer, repr(error)))


def test_concurrent_writers_never_corrupt_or_tear(tmp_path):
    context = multiprocessing.get_context("spawn" if os.name == "nt" else "fork")
    results = context.Queue()
    cache_dir = tmp_path / "cache"
    workers = [
        context.Process(target=hammer, args=(str(cache_dir), str(tmp_path), writer, results)) for writer in range(2)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)

    for report in reports:
        assert report[0] == "ok", report
        _, writer, hits, misses, enabled = report
        assert enabled, f"writer {writer} disabled its cache"
        assert hits > 0
    # Afterwards every entry is complete and a fresh reader hits on every key.
    reader = ResultCache(cache_dir, settings_key="settings", version="1.0")
    for index in range(KEYS):
        found = reader.get(tmp_path / f"module_{index}.py", b"x = %d\n" % index)
        assert found is not None and is_complete(found, index)
    assert len(entry_files(cache_dir)) == KEYS
    for entry in entry_files(cache_dir):
        json.loads(entry.read_bytes())
    assert not list(cache_dir.rglob(".tmp-*")), "no temporary files are left behind"


def test_the_digests_are_hashlibs_without_importing_hashlib():
    """`amp_lint.files.digests` gives hashlib's digests; a warm run's cache keys do not import hashlib (which
    loads OpenSSL's bindings, about 7 ms of every warm run)."""
    import hashlib
    import subprocess
    import sys

    from amp_lint.files import cache as cache_module, digests

    data = bytes(range(256)) * 40
    assert digests.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert digests.blake2b(data, 16).hexdigest() == hashlib.blake2b(data, digest_size=16).hexdigest()
    assert cache_module.content_digest(data) == hashlib.blake2b(data, digest_size=16).hexdigest()
    probe = (
        "import sys, pathlib; from amp_lint.files.cache import ResultCache, content_digest; "
        "c = ResultCache(pathlib.Path('unused'), 'settings', 'v'); c.key(pathlib.Path('a.py'), b'x'); "
        "content_digest(b'x'); print('hashlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
