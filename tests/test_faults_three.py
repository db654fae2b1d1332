"""Faults, round three (issue 29; issue 28 items 9 and 10): no input ends a run, no side file hangs it,
no neighbour poisons it. Every test runs the real CLI in a temporary folder, with a timeout."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from snippets import MISSING_UPDATE
from test_faults import FINDING, amp_lint, assert_no_crash, needs_fifo, output, write

BUGGY = MISSING_UPDATE


def notebook(source: str, **metadata) -> str:
    cell = {"cell_type": "code", "source": [source], "metadata": {}, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5})


# -- 1: an integer of more than 4,300 digits in a notebook's JSON ------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_notebook_with_a_huge_integer_is_checked_and_the_run_goes_on(tmp_path, jobs):
    huge = notebook(BUGGY, x="@").replace('"@"', "9" * 5000)
    write(tmp_path / "huge.ipynb", huge)
    for index in range(4):  # enough files and bytes for the workers with -j 2
        write(tmp_path / f"other{index}.py", BUGGY + "#" * 120_000 + "\n")
    result = amp_lint("check", "--no-cache", "-j", jobs, ".", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert "huge.ipynb:cell 1:8:5: AMP021" in output(result)
    assert all(f"other{index}.py{FINDING}" in output(result) for index in range(4))


def test_notebook_with_a_huge_integer_on_stdin_is_checked(tmp_path):
    huge = notebook(BUGGY, x="@").replace('"@"', "9" * 5000)
    result = amp_lint("check", "--no-cache", "--stdin-filename", "nb.ipynb", "-", cwd=tmp_path, input=huge.encode())
    assert_no_crash(result, 1)
    assert "nb.ipynb:cell 1:8:5: AMP021" in output(result)


# -- 6: standard input has the files' size limit ------------------------------------------------------


def test_endless_stdin_is_refused_at_the_size_limit(tmp_path):
    with open("/dev/zero", "rb") as endless:
        result = subprocess.run(
            [sys.executable, "-m", "amp_lint", "check", "--no-cache", "-"],
            cwd=tmp_path, stdin=endless, capture_output=True, timeout=60,
        )
    assert result.returncode == 2, result
    assert b"Traceback" not in result.stderr
    assert b"file too large to analyse" in result.stderr and b"limit is 16 MB" in result.stderr


# -- 7: ignore files are read as configuration files are ---------------------------------------------


@needs_fifo
@pytest.mark.parametrize("ignore_file", [".gitignore", ".git/info/exclude"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_ignore_file_that_is_a_fifo_or_dev_zero_neither_hangs_nor_fills_memory(tmp_path, ignore_file, kind):
    (tmp_path / ".git" / "info").mkdir(parents=True)
    write(tmp_path / "train.py", BUGGY)
    target = tmp_path / ignore_file
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    result = amp_lint("check", "--no-cache", ".", cwd=tmp_path, timeout=30)
    assert_no_crash(result, 1, 2)
    assert "train.py" + FINDING in output(result)
    assert f"{ignore_file}: error: not a regular file; its patterns are not applied" in output(result)


# -- 2: a folder that can be listed but not searched (mode 644), as a user that is not root ----------


def _as_nobody(args, cwd: Path) -> subprocess.CompletedProcess:
    """The real CLI as the user `nobody` (setpriv), or a skip where privileges cannot be dropped."""
    import shutil

    if not hasattr(os, "geteuid"):
        pytest.skip("no users on this platform")
    if os.geteuid() != 0:
        command = [sys.executable, "-m", "amp_lint", *args]  # already not root: permissions apply
    elif shutil.which("setpriv"):
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "amp_lint", *args]
    else:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(command, cwd=cwd, capture_output=True, timeout=60, env=environment)
    if b"Permission denied" in result.stderr and b"python" in result.stderr.split(b"\n", 1)[0]:
        pytest.skip("the interpreter cannot be run as nobody here")
    result.stdout = result.stdout.decode("utf-8", "replace")
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


@pytest.fixture
def shared_folder():
    """A folder `nobody` can enter (pytest's tmp_path is private to root)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="amp-lint-faults-"))
    folder.chmod(0o755)
    yield folder
    for path in folder.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)


def test_folder_that_can_be_listed_but_not_searched_is_one_error_and_the_run_goes_on(shared_folder):
    write(shared_folder / "good.py", BUGGY).chmod(0o644)
    locked = shared_folder / "locked"
    write(locked / "a.py", BUGGY).chmod(0o644)
    locked.chmod(0o644)  # readable, not searchable
    result = _as_nobody(["check", "--no-cache", "."], shared_folder)
    assert_no_crash(result, 2)
    assert "good.py" + FINDING in output(result)
    assert "locked: error: Permission denied (the folder can be listed but not searched)" in output(result)


# -- 28.9, 28.10: a dangling .py symlink warns; a folder symlink loop is silent ----------------------


def test_dangling_python_symlink_warns_and_the_run_goes_on(tmp_path):
    write(tmp_path / "good.py", BUGGY)
    (tmp_path / ".#good.py").symlink_to("user@host.12345:1700000000")  # an Emacs lock file
    result = amp_lint("check", "--no-cache", ".", cwd=tmp_path)
    assert_no_crash(result, 1)  # the finding's exit code, not 2
    assert "good.py" + FINDING in output(result)
    assert ".#good.py: warning: broken symbolic link (to user@host.12345:1700000000); skipped" in result.stderr
    named = amp_lint("check", "--no-cache", ".#good.py", cwd=tmp_path)  # named on the command line: an error
    assert_no_crash(named, 2)


def test_symlink_loop_in_a_checked_folder_is_silent(tmp_path):
    write(tmp_path / "loop" / "train.py", BUGGY)
    (tmp_path / "loop" / "self").symlink_to(".", target_is_directory=True)
    result = amp_lint("check", "--no-cache", ".", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert output(result).count(FINDING) == 1  # checked once, not again through the link
    assert "self" not in output(result) and "loop" in output(result)


# -- 9: exclude globs in linear time ------------------------------------------------------------------


def test_exclude_glob_with_many_stars_does_not_stall_the_run(tmp_path):
    import time

    deep = tmp_path / ("a" * 60) / ("a" * 60) / ("a" * 60)
    write(deep / "train.py", BUGGY)
    write(tmp_path / "pyproject.toml", '[tool.amp-lint]\nextend-exclude = ["*a*a*a*a*a*a*a*a*a*a*ab", "{x,y}*a*a*a*a*a*b"]\n')
    started = time.monotonic()
    result = amp_lint("check", "--no-cache", ".", cwd=tmp_path)
    assert time.monotonic() - started < 20  # exponential backtracking took minutes for eight stars
    assert_no_crash(result, 1)
    assert "train.py" + FINDING in output(result)


@pytest.mark.parametrize(
    "pattern, path, expected",
    [
        ("*a*a*a*a*a*a*a*ab", "a" * 3000 + "c", False),
        ("*a*a*a*a*a*a*a*ab", "a" * 3000 + "b", True),
        ("{src,lib}/**/test_*.py", "lib/x/y/test_a.py", True),
        ("{src,lib}/**/test_*.py", "lib/test_a.py", True),
        ("{src,lib}/**/test_*.py", "doc/x/test_a.py", False),
        ("*[!x]*.p?", "abc.py", True),
        ("*[!x]*.p?", "x.py", False),
    ],
)
def test_glob_matcher_is_linear_and_agrees_with_globset(pattern, path, expected):
    import time

    from amp_lint.files.globs import compile_globs

    started = time.process_time()  # CPU seconds: the load of other processes does not count
    assert compile_globs([pattern])(path) is expected
    assert time.process_time() - started < 1


# -- 8: the re-read before a fix is written has the first read's limits, and checks identity -----------


def _fixable(tmp_path: Path):
    from amp_lint.files.sources import read_source

    path = write(tmp_path / "train.py", BUGGY)
    return path, read_source(path)


def _temporaries(folder: Path):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@needs_fifo
def test_file_swapped_for_a_fifo_before_the_fix_is_written_is_refused_at_once(tmp_path):
    import signal

    from amp_lint.files.sources import FileChangedError, write_atomic

    path, source = _fixable(tmp_path)
    path.unlink()
    os.mkfifo(path)
    signal.alarm(20)  # a blocking open would hang here: fail instead
    try:
        with pytest.raises(FileChangedError):
            write_atomic(path, BUGGY + "# fixed\n", source)
    finally:
        signal.alarm(0)
    assert stat.S_ISFIFO(os.lstat(path).st_mode) and _temporaries(tmp_path) == []


def test_file_swapped_for_a_dev_zero_link_is_refused_without_reading_it(tmp_path):
    from amp_lint.files.sources import FileChangedError, write_atomic

    path, source = _fixable(tmp_path)
    path.unlink()
    path.symlink_to("/dev/zero")
    with pytest.raises(FileChangedError):
        write_atomic(path, BUGGY + "# fixed\n", source)
    assert _temporaries(tmp_path) == []


def test_file_swapped_for_a_link_to_an_identical_file_does_not_get_the_fix(tmp_path):
    from amp_lint.files.sources import FileChangedError, write_atomic

    path, source = _fixable(tmp_path)
    other = write(tmp_path / "elsewhere" / "other.py", BUGGY)  # same bytes: only its identity differs
    path.unlink()
    path.symlink_to(other)
    with pytest.raises(FileChangedError, match="replaced by another file"):
        write_atomic(path, BUGGY + "# fixed\n", source)
    assert other.read_text() == BUGGY and _temporaries(tmp_path) == []


def test_fix_through_a_symlink_that_was_there_when_read_is_still_written(tmp_path):
    from amp_lint.files.sources import read_source, write_atomic

    real = write(tmp_path / "real.py", BUGGY)
    (tmp_path / "link.py").symlink_to(real)
    write_atomic(tmp_path / "link.py", BUGGY + "# fixed\n", read_source(tmp_path / "link.py"))
    assert real.read_text() == BUGGY + "# fixed\n" and (tmp_path / "link.py").is_symlink()


# -- 14: --fix keeps extended attributes and POSIX ACLs ------------------------------------------------


def _posix_acl(*entries) -> bytes:
    """The binary form of `system.posix_acl_access` (version 2; entries of tag, permissions, id)."""
    import struct

    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


def test_fix_keeps_extended_attributes_and_the_posix_acl(tmp_path):
    if not hasattr(os, "setxattr"):
        pytest.skip("no extended attributes on this platform")
    path = write(tmp_path / "train.py", BUGGY)
    anyone = 0xFFFFFFFF
    # owner rw-, user nobody r--, group r--, mask r--, others r--: the group must not gain write through the mask
    acl = _posix_acl((0x01, 6, anyone), (0x02, 4, 65534), (0x04, 4, anyone), (0x10, 4, anyone), (0x20, 4, anyone))
    try:
        os.setxattr(path, "user.origin", b"downloaded")
        os.setxattr(path, "system.posix_acl_access", acl)
    except OSError as error:
        pytest.skip(f"this file system does not keep user xattrs or ACLs: {error}")
    mode = stat.S_IMODE(path.stat().st_mode)
    result = amp_lint("check", "--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert_no_crash(result, 0)
    assert "scaler.update()" in path.read_text()  # really rewritten (a new file, renamed over the old one)
    assert os.getxattr(path, "user.origin") == b"downloaded"
    assert os.getxattr(path, "system.posix_acl_access") == acl
    assert stat.S_IMODE(path.stat().st_mode) == mode == 0o644


# -- 11, 12: a cache another user can write, or a link to elsewhere, is not used ------------------------


def _cache_entries(cache: Path):
    return sorted(p for p in cache.rglob("*.json") if not p.name.startswith(".tmp-"))


@pytest.mark.parametrize("hostile", ["other-owner", "world-writable"])
def test_cache_folder_another_user_can_write_is_not_used(tmp_path, hostile):
    write(tmp_path / "train.py", BUGGY)
    cache = tmp_path / ".amp_lint_cache"
    cache.mkdir()
    if hostile == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("only root can give a folder to another user")
        os.chown(cache, 65534, 65534)
    else:
        cache.chmod(0o777)
    result = amp_lint("check", "train.py", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert "train.py" + FINDING in output(result)
    assert "warning: not using the cache" in result.stderr
    assert ("another user" if hostile == "other-owner" else "writable by every user") in result.stderr
    assert list(cache.iterdir()) == []  # nothing read from it, nothing written to it


def test_cache_folders_are_created_0755_whatever_the_umask(tmp_path):
    write(tmp_path / "train.py", BUGGY)
    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "train.py"], cwd=tmp_path, capture_output=True, timeout=60,
        preexec_fn=lambda: os.umask(0),
    )
    assert result.returncode == 1, result
    folders = [tmp_path / ".amp_lint_cache"] + [p for p in (tmp_path / ".amp_lint_cache").rglob("*") if p.is_dir()]
    assert len(folders) >= 3  # the cache, its version folder and a shard
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in folders} == {"0o755"}


def test_cache_folder_that_is_a_symlink_is_never_written_through_and_clean_says_so(tmp_path):
    project, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(project / "train.py", BUGGY)
    (project / ".amp_lint_cache").symlink_to(elsewhere, target_is_directory=True)  # committed in the repository
    result = amp_lint("check", "train.py", cwd=project)
    assert_no_crash(result, 1)
    assert "is a symbolic link" in result.stderr and list(elsewhere.iterdir()) == []
    cleaned = amp_lint("clean", cwd=project)
    assert_no_crash(cleaned, 0)
    assert "Not removed" in output(cleaned) and "symbolic link" in output(cleaned) and "Removed" not in output(cleaned)
    assert (project / ".amp_lint_cache").is_symlink()


def test_clean_from_a_subfolder_removes_the_projects_cache(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.amp-lint]\n")
    write(tmp_path / "pkg" / "train.py", BUGGY)
    assert amp_lint("check", "train.py", cwd=tmp_path / "pkg").returncode == 1
    assert (tmp_path / ".amp_lint_cache").is_dir() and not (tmp_path / "pkg" / ".amp_lint_cache").exists()
    cleaned = amp_lint("clean", cwd=tmp_path / "pkg")
    assert_no_crash(cleaned, 0)
    assert f"Removed {tmp_path / '.amp_lint_cache'}" in output(cleaned)
    assert not (tmp_path / ".amp_lint_cache").exists()
    again = amp_lint("clean", cwd=tmp_path / "pkg")
    assert "No cache at" in output(again)


# -- 13: the cache is bounded and pruned ---------------------------------------------------------------


def test_cache_keeps_one_entry_per_file_across_edits(tmp_path):
    path = write(tmp_path / "train.py", BUGGY)
    for edit in range(3):
        path.write_text(BUGGY + f"# edit {edit}\n")
        assert amp_lint("check", "train.py", cwd=tmp_path).returncode == 1
    entries = [p for p in _cache_entries(tmp_path / ".amp_lint_cache") if "payload" in p.read_text()]
    assert len(entries) == 1


def test_cache_prunes_old_entries_old_versions_and_deleted_files(tmp_path):
    import time

    write(tmp_path / "train.py", BUGGY)
    for index in range(3):
        write(tmp_path / f"plain{index}.py", "x = 1\n")  # ruled out by the prefilter: listed as such
    assert amp_lint("check", ".", cwd=tmp_path).returncode == 1
    cache = tmp_path / ".amp_lint_cache"
    [version] = [p for p in cache.iterdir() if p.is_dir()]
    old_version = cache / "0.0.1-old"
    write(old_version / "ab" / "cd.json", "{}")
    month_ago = time.time() - 40 * 24 * 3600
    stale_entry = write(version / "ff" / ("f" * 62 + ".json"), "{}")  # a deleted file's entry
    for path in (stale_entry, old_version / "ab" / "cd.json", old_version / "ab", old_version, version / ".last-pruned"):
        os.utime(path, (month_ago, month_ago))
    (tmp_path / "plain0.py").unlink()
    write(tmp_path / "plain1.py", "x = 2\n")  # changed: the list of ruled-out files is written again
    assert amp_lint("check", ".", cwd=tmp_path).returncode == 1
    assert not stale_entry.exists() and not old_version.exists()
    listed = [json.loads(p.read_text())["payload"]["files"] for p in _cache_entries(cache) if '"files"' in p.read_text()]
    assert len(listed) == 1 and sorted(Path(p).name for p in listed[0]) == ["plain1.py", "plain2.py"]


# -- 10: memory is bounded per file, before any parse --------------------------------------------------


def test_ten_megabyte_list_literal_is_refused_fast_and_in_little_memory(tmp_path):
    import time

    write(tmp_path / "data.py", BUGGY + "table = [" + "1, " * 3_500_000 + "]\n")  # 10 MB, 7 million tokens
    write(tmp_path / "good.py", BUGGY)
    script = (
        "import resource, subprocess, sys;"
        "r = subprocess.run([sys.executable, '-m', 'amp_lint', 'check', '--no-cache', 'data.py', 'good.py'], capture_output=True);"
        "sys.stdout.write(r.stdout.decode() + r.stderr.decode());"
        "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
    )
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 2 and "Traceback" not in result.stdout, result.stdout
    assert "data.py: error: not analysed: about 7,000,0" in result.stdout and "GB per file" in result.stdout
    assert "good.py" + FINDING in result.stdout
    peak_mb = int(result.stdout.rsplit("PEAK_KB", 1)[1].split()[0]) / 1024
    assert peak_mb < 600, peak_mb  # was 3.45 GB in the prefilter's `ast.parse`
    assert elapsed < 30


# -- 5: an out-of-memory abort in LibCST's native parser does not end a serial run ---------------------

_ABORTING_RUN = """
import os, sys
from amp_lint.engine import runner
real_check_file = runner.check_file

def check_file(path, config, **options):
    if path.endswith("huge.py"):
        os.abort()  # what LibCST's native parser does when an allocation fails
    return real_check_file(path, config, **options)

runner.check_file = check_file
from amp_lint.cli import main
main(sys.argv[1:])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the isolated check is a forked process")
@pytest.mark.parametrize("jobs", [(), ("-j", "1")], ids=["two-files", "j1"])
def test_native_abort_on_a_big_file_does_not_end_a_serial_run(tmp_path, jobs):
    write(tmp_path / "huge.py", BUGGY + "y = 1\n" * 40_000)  # 120,000 tokens: big enough to be checked apart
    write(tmp_path / "good.py", BUGGY)
    result = subprocess.run(
        [sys.executable, "-c", _ABORTING_RUN, "check", "--no-cache", *jobs, "huge.py", "good.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)  # not 134
    assert "huge.py: error: not analysed: the process checking this file died" in result.stdout + result.stderr
    assert "good.py" + FINDING in result.stdout
