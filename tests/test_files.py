"""The file layer: discovery, reading and atomic writing, one test per kind of bad input."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amp_lint.diagnostics import Location
from amp_lint.files.sources import FileChangedError, SourceError, decode_source, discover, read_source, write_atomic
from amp_lint.files.settings import Settings


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder that is also the cwd, so discovered paths read as relative names."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, content="x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def found(paths, force_exclude=False, warnings=None, **settings):
    def warn(warning):
        (warnings if warnings is not None else []).append((warning.filename, warning.message))

    files, errors = discover(paths, lambda _: Settings(**settings), force_exclude=force_exclude, on_warning=warn)
    return [path.as_posix() for path in files], [(error.filename, error.message) for error in errors]


def temporary_files(folder: Path):
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


# -- discovery ---------------------------------------------------------------------------------


def test_walk_finds_python_stubs_and_notebooks_sorted(project):
    for name in ["b.py", "a.pyi", "pkg/z.ipynb", "pkg/c.py", "notes.txt", "pkg/data.json", "setup.cfg"]:
        write(project / name)
    assert found(["."]) == (["a.pyi", "b.py", "pkg/c.py", "pkg/z.ipynb"], [])


def test_the_walk_says_once_when_it_has_found_many_bytes(project):
    """`on_many_bytes` lets the runner start its workers while a big walk goes on: called once, when the
    files found reach the size, and never for a smaller tree."""
    for index in range(6):
        write(project / "pkg" / f"m{index}.py", "x = 1\n" * 100)  # 600 bytes each
    write(project / "notes.txt", "n" * 10_000)  # not a Python file: not counted
    calls = []
    files, _ = discover(["."], lambda _: Settings(), on_many_bytes=(1_500, lambda: calls.append(len(calls))))
    assert len(files) == 6 and calls == [0]
    calls.clear()
    discover(["."], lambda _: Settings(), on_many_bytes=(10_000, lambda: calls.append(1)))
    assert calls == []


def test_a_file_named_twice_is_checked_once(project):
    write(project / "pkg/a.py")
    assert found(["pkg", "pkg/a.py", str(project / "pkg" / "a.py")]) == (["pkg/a.py"], [])


def test_folder_named_like_a_python_file_is_walked(project):
    write(project / "x.py/inner.py")
    assert found(["."]) == (["x.py/inner.py"], [])
    assert found(["x.py"]) == (["x.py/inner.py"], [])


def test_missing_path_is_an_error_and_the_walk_goes_on(project):
    write(project / "a.py")
    assert found(["missing.py", "a.py"]) == (["a.py"], [("missing.py", "No such file or directory")])


def test_folder_symlink_loop_is_silent_and_does_not_hang(project):
    """As Ruff: a link back to a folder of the walk is no mistake of the user's (issue 28, item 10)."""
    write(project / "pkg/a.py")
    (project / "pkg/loop").symlink_to(project / "pkg", target_is_directory=True)
    warnings = []
    assert found(["."], warnings=warnings) == (["pkg/a.py"], [])
    assert warnings == []


def test_symlinked_folder_already_walked_is_not_walked_twice(project):
    write(project / "real/a.py")
    (project / "alias").symlink_to(project / "real", target_is_directory=True)
    assert found(["."]) == (["alias/a.py"], [])


def test_self_referencing_file_symlink_is_a_warning_when_walked(project):
    (project / "self.py").symlink_to(project / "self.py")
    warnings = []
    assert found(["."], warnings=warnings) == ([], [])
    assert warnings == [("self.py", "symbolic link loop; not followed; skipped")]


def test_broken_symlink_is_a_warning_when_walked_and_an_error_when_named(project):
    (project / "gone.py").symlink_to(project / "nowhere.py")
    (project / "gone.txt").symlink_to(project / "nowhere.txt")  # not a Python file: not our business
    message = f"broken symbolic link (to {project / 'nowhere.py'})"
    warnings = []
    assert found(["."], warnings=warnings) == ([], [])
    assert warnings == [("gone.py", message + "; skipped")]
    assert found(["gone.py"]) == ([], [("gone.py", message)])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_named_like_python_is_not_read_by_the_walk(project):
    os.mkfifo(project / "pipe.py")
    assert found(["."]) == ([], [])


def test_unreadable_folder_is_an_error_and_the_walk_goes_on(project):
    write(project / "ok.py")
    locked = project / "locked"
    write(locked / "a.py")
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as root: permissions are not enforced")
        assert found(["."]) == (["ok.py"], [("locked", "Permission denied")])
    finally:
        locked.chmod(0o755)


def test_default_excludes_skip_build_and_virtualenv_folders(project):
    for name in ["src/a.py", "build/lib/a.py", ".venv/lib/site.py", "src/pkg.egg-info/x.py", "src/__pycache__/a.py"]:
        write(project / name)
    assert found(["."], root=str(project)) == (["src/a.py"], [])


def test_extend_exclude_matches_names_and_paths_relative_to_root(project):
    for name in ["src/gen/a.py", "src/keep.py", "src/b_pb2.py", "tests/gen/t.py"]:
        write(project / name)
    excludes = ("src/gen/*", "*_pb2.py")
    assert found(["."], root=str(project), extend_exclude=excludes) == (["src/keep.py", "tests/gen/t.py"], [])


def test_excludes_ignore_the_folders_above_the_root(tmp_path, monkeypatch):
    # A project that lives in a folder called `build` is still checked.
    project = tmp_path / "build" / "proj"
    write(project / "a.py")
    monkeypatch.chdir(project)
    assert found(["."], root=str(project)) == (["a.py"], [])


def test_named_file_is_checked_even_if_excluded_or_another_suffix(project):
    write(project / "build/gen.py")
    write(project / "script")
    assert found(["build/gen.py", "script"], root=str(project)) == (["build/gen.py", "script"], [])


def test_force_exclude_applies_excludes_to_named_files_and_their_folders(project):
    write(project / "build/gen.py")
    write(project / "src/a_pb2.py")
    write(project / "src/a.py")
    named = ["build/gen.py", "src/a_pb2.py", "src/a.py"]
    assert found(named, force_exclude=True, root=str(project), extend_exclude=("*_pb2.py",)) == (["src/a.py"], [])


def git_project(root: Path) -> Path:
    (root / ".git" / "info").mkdir(parents=True)
    return root


def test_gitignore_nested_files_and_negation(project):
    git_project(project)
    write(project / ".gitignore", "*.pyi\nscratch/\ngenerated_*.py\n")
    write(project / "pkg/.gitignore", "!generated_keep.py\nlocal.py\n")
    for name in [
        "a.py",
        "a.pyi",
        "scratch/s.py",
        "generated_x.py",
        "pkg/generated_x.py",
        "pkg/generated_keep.py",
        "pkg/local.py",
        "pkg/m.py",
        "local.py",
    ]:
        write(project / name)
    assert found(["."]) == (["a.py", "local.py", "pkg/generated_keep.py", "pkg/m.py"], [])


def test_gitignore_above_the_walked_folder_and_git_info_exclude_apply(project):
    git_project(project)
    write(project / ".gitignore", "ignored.py\n")
    write(project / ".git/info/exclude", "private/\n")
    for name in ["src/ignored.py", "src/a.py", "src/private/p.py"]:
        write(project / name)
    assert found(["src"]) == (["src/a.py"], [])


def test_gitignore_does_not_apply_to_named_files(project):
    git_project(project)
    write(project / ".gitignore", "ignored.py\n")
    write(project / "ignored.py")
    assert found(["ignored.py"]) == (["ignored.py"], [])
    assert found(["ignored.py"], force_exclude=True) == (["ignored.py"], [])


def test_gitignore_can_be_turned_off(project):
    git_project(project)
    write(project / ".gitignore", "*.py\n")
    write(project / "a.py")
    assert found(["."]) == ([], [])
    assert found(["."], respect_gitignore=False) == (["a.py"], [])


def test_gitignore_outside_a_git_work_tree_means_nothing(project):
    write(project / ".gitignore", "*.py\n")
    write(project / "a.py")
    assert found(["."]) == (["a.py"], [])


# -- reading -----------------------------------------------------------------------------------


def read_error(path: Path) -> SourceError:
    with pytest.raises(SourceError) as caught:
        read_source(path)
    return caught.value


def test_nul_bytes_are_refused(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"x = 1\n\0\n"))
    assert error.message == "file contains NUL bytes (binary file?)"


def test_binary_junk_named_py_is_refused(tmp_path):
    junk = bytes(range(256)) * 4
    assert read_error(write(tmp_path / "image.py", junk)).message == "file contains NUL bytes (binary file?)"


def test_invalid_utf8_says_where(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"a = 1\nb = 2\nc = '\xc3\xa9\xff'\n"))
    assert error.message == "invalid utf-8 at line 3, column 7"
    assert error.location == Location(3, 7)


def test_invalid_bytes_on_the_first_line_say_where(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"x = '\xff'\n"))
    assert error.message == "invalid utf-8 at line 1, column 6"


def test_invalid_bytes_for_the_declared_encoding_name_it(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"# -*- coding: cp1252 -*-\r\nx = '\x81'\r\n"))
    assert error.message == "invalid cp1252 at line 2, column 6"


def test_unknown_coding_cookie_is_refused(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"# coding: klingon\nx = 1\n"))
    assert error.message == "unknown encoding in coding cookie: klingon"


def test_coding_cookie_that_is_not_ascii_compatible_is_refused(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"# coding: rot13\nx = 1\n"))
    assert error.message == "unsupported encoding in coding cookie: rot13"


def test_cookie_contradicting_the_bom_is_refused(tmp_path):
    error = read_error(write(tmp_path / "a.py", b"\xef\xbb\xbf# coding: latin-1\nx = 1\n"))
    assert error.message == "the coding cookie contradicts the UTF-8 byte order mark"


def test_empty_file_is_fine(tmp_path):
    source = read_source(write(tmp_path / "a.py", b""))
    assert (source.text, source.raw, source.encoding, source.bom) == ("", b"", "utf-8", False)


def test_folder_is_refused(tmp_path):
    assert read_error(tmp_path).message == "Is a directory"


def test_missing_file_is_refused(tmp_path):
    assert read_error(tmp_path / "missing.py").message == "No such file or directory"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    assert read_error(tmp_path / "pipe.py").message == "not a regular file"


def test_unreadable_file_is_refused(tmp_path):
    path = write(tmp_path / "a.py")
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("running as root: permissions are not enforced")
    assert read_error(path).message == "Permission denied"


def test_latin1_file_round_trips_byte_for_byte_through_a_fix(tmp_path):
    path = write(tmp_path / "a.py", b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\nloss.backward()\n")
    source = read_source(path)
    assert source.encoding == "iso-8859-1" and "café" in source.text
    write_atomic(path, source.text.replace("loss.backward()", "scaler.scale(loss).backward()"), source)
    assert path.read_bytes() == b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\nscaler.scale(loss).backward()\n"


def test_fix_with_characters_the_encoding_lacks_is_refused(tmp_path):
    path = write(tmp_path / "a.py", b"# coding: latin-1\nx = 1\n")
    source = read_source(path)
    with pytest.raises(SourceError, match="iso-8859-1 cannot encode"):
        write_atomic(path, source.text + "euro = '\u20ac'\n", source)
    assert path.read_bytes() == b"# coding: latin-1\nx = 1\n"


def test_bom_is_removed_from_the_text_and_kept_on_write(tmp_path):
    path = write(tmp_path / "a.py", b"\xef\xbb\xbfx = 1\n")
    source = read_source(path)
    assert (source.text, source.encoding, source.bom) == ("x = 1\n", "utf-8", True)
    write_atomic(path, "x = 2\n", source)
    assert path.read_bytes() == b"\xef\xbb\xbfx = 2\n"


def test_line_endings_tabs_and_form_feeds_are_kept_byte_for_byte(tmp_path):
    raw = b"if x:\r\n\ty = 1\n\x0c\rz = '\xc3\xa9'\r\n# end"
    path = write(tmp_path / "a.py", raw)
    source = read_source(path)
    assert source.text == raw.decode("utf-8")
    write_atomic(path, source.text.replace("y = 1", "y = 2"), source)
    assert path.read_bytes() == raw.replace(b"y = 1", b"y = 2")


@given(st.text().filter(lambda text: "\0" not in text and not text.startswith("\ufeff")))
def test_any_nul_free_utf8_text_round_trips(text):
    source = decode_source(text.encode("utf-8"))
    assert source.text == text and source.encode(source.text) == source.raw


# -- writing -----------------------------------------------------------------------------------


def test_read_only_file_is_not_written(tmp_path):
    path = write(tmp_path / "a.py", "x = 1\n")
    source = read_source(path)
    path.chmod(0o444)
    with pytest.raises(SourceError, match="^file is read-only; not written$"):
        write_atomic(path, "x = 2\n", source)
    assert path.read_text() == "x = 1\n"
    assert temporary_files(tmp_path) == []


def test_file_changed_since_it_was_read_is_not_overwritten(tmp_path):
    path = write(tmp_path / "a.py", "x = 1\n")
    source = read_source(path)
    path.write_text("x = 1  # edited meanwhile\n")
    with pytest.raises(FileChangedError):
        write_atomic(path, "x = 2\n", source)
    assert path.read_text() == "x = 1  # edited meanwhile\n"
    assert temporary_files(tmp_path) == []


def test_change_during_the_write_is_caught_just_before_the_rename(tmp_path, monkeypatch):
    path = write(tmp_path / "a.py", "x = 1\n")
    source = read_source(path)
    real_fsync = os.fsync

    def edit_while_syncing(fd):
        real_fsync(fd)
        path.write_text("x = 3\n")

    monkeypatch.setattr(os, "fsync", edit_while_syncing)
    with pytest.raises(FileChangedError):
        write_atomic(path, "x = 2\n", source)
    assert path.read_text() == "x = 3\n"
    assert temporary_files(tmp_path) == []


def test_file_removed_since_it_was_read_is_not_recreated(tmp_path):
    path = write(tmp_path / "a.py")
    source = read_source(path)
    path.unlink()
    with pytest.raises(FileChangedError):
        write_atomic(path, "x = 2\n", source)
    assert not path.exists()


def test_full_disk_leaves_the_original_and_no_temporary_file(tmp_path, monkeypatch):
    path = write(tmp_path / "a.py", "x = 1\n" * 1000)
    source = read_source(path)

    def disk_full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(SourceError, match="No space left on device; file left unchanged"):
        write_atomic(path, "x = 2\n", source)
    monkeypatch.undo()
    assert path.read_text() == "x = 1\n" * 1000
    assert temporary_files(tmp_path) == []


def test_ctrl_c_during_the_write_leaves_the_original_and_no_temporary_file(tmp_path, monkeypatch):
    path = write(tmp_path / "a.py", "x = 1\n")
    source = read_source(path)
    during_write = []

    def interrupted(fd):
        during_write.extend(temporary_files(tmp_path))
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "x = 2\n", source)
    assert len(during_write) == 1 and during_write[0].startswith(".a.py.amp-lint-")
    assert path.read_text() == "x = 1\n"
    assert temporary_files(tmp_path) == []


def test_permission_bits_are_kept(tmp_path):
    path = write(tmp_path / "run.py")
    path.chmod(0o754)
    write_atomic(path, "x = 2\n", read_source(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o754
    assert path.read_text() == "x = 2\n"


def test_symlink_is_written_through_and_stays_a_link(tmp_path):
    target = write(tmp_path / "real.py")
    link = tmp_path / "link.py"
    link.symlink_to(target)
    write_atomic(link, "x = 2\n", read_source(link))
    assert link.is_symlink() and target.read_text() == "x = 2\n"


def test_unchanged_text_is_not_rewritten(tmp_path):
    path = write(tmp_path / "a.py")
    source = read_source(path)
    path.chmod(0o444)  # would be refused if a write were attempted
    write_atomic(path, source.text, source)
    assert path.read_text() == "x = 1\n"
