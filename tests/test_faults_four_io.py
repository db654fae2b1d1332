"""Faults, round four (issue 45), the file layer: bytes kept on every path (standard input, codecs that do not
round-trip), no write through a symlink out of the checked paths, notebooks that rewrite or refuse cleanly,
clean reasons, in-place writes where a rename is refused, and configuration files read as Ruff reads them.
Each test is named for its item."""

from __future__ import annotations

import codecs
import errno
import json
import os
from pathlib import Path

import pytest

from snippets import MISSING_UPDATE
from test_faults import FINDING, amp_lint, assert_no_crash, output, write

BUGGY = MISSING_UPDATE
UPDATE = "    scaler.update()\n"
FIXED = BUGGY.replace("    scaler.step(optimizer)\n", "    scaler.step(optimizer)\n" + UPDATE)
CLEAN = FIXED


def _fixed_bytes(raw: bytes) -> bytes:
    """`raw` with the one line AMP021's fix inserts, every other byte as it was."""
    step = b"    scaler.step(optimizer)\n"
    assert raw.count(step) == 1
    return raw.replace(step, step + UPDATE.encode("ascii"))


def notebook(source: str, **metadata) -> str:
    cell = {"cell_type": "code", "source": [source], "metadata": {}, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5})


# -- 1: `--fix -` writes the input's own encoding and BOM, and the input's bytes when nothing was fixed ------


LATIN_1 = ("# -*- coding: latin-1 -*-\n" + BUGGY + 'name = "café"\n').encode("latin-1")


def test_item1_fix_stdin_keeps_a_latin_1_encoding(tmp_path):
    assert _stdout_bytes(tmp_path, LATIN_1) == _fixed_bytes(LATIN_1)


@pytest.mark.parametrize(
    "raw",
    [
        ("# -*- coding: latin-1 -*-\n" + CLEAN + 'name = "café"\n').encode("latin-1"),
        codecs.BOM_UTF8 + (CLEAN + 'name = "café"\n').encode("utf-8"),
    ],
    ids=["latin-1", "utf-8-bom"],
)
def test_item1_fix_stdin_with_nothing_to_fix_gives_back_the_input_bytes(tmp_path, raw):
    assert _stdout_bytes(tmp_path, raw) == raw


def test_item1_fix_stdin_keeps_the_bom_when_it_fixes(tmp_path):
    raw = codecs.BOM_UTF8 + (BUGGY + 'name = "café"\n').encode("utf-8")
    assert _stdout_bytes(tmp_path, raw) == _fixed_bytes(raw)


def _stdout_bytes(tmp_path: Path, raw: bytes) -> bytes:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--fix", "-"],
        cwd=tmp_path, input=raw, capture_output=True, timeout=120,
    )
    assert b"Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


# -- 2: a codec that does not round-trip: only the changed lines are encoded, or the fix is refused ----------


@pytest.mark.parametrize(
    "raw",
    [
        # `\x41` reads as `A`; unicode_escape would write every line break as `\n`: one line
        b"# -*- coding: unicode_escape -*-\n" + BUGGY.encode() + b'name = "\\x41\\u00e9"\n',
        # `\u00e9` reads as `é`, and would be written as the byte 0xe9
        b"# -*- coding: raw_unicode_escape -*-\n" + BUGGY.encode() + b'name = "\\u00e9"\n',
        # NEC's 0x8790 and IBM's 0xfa5b read as the same characters as 0x81e0 and 0x81e6
        b"# -*- coding: cp932 -*-\n" + BUGGY.encode() + b'name = "\x87\x90\xfa\x5b"  # \x87\x90\n',
    ],
    ids=["unicode_escape", "raw_unicode_escape", "cp932"],
)
def test_item2_fix_keeps_the_bytes_it_did_not_touch_when_the_codec_does_not_round_trip(tmp_path, raw):
    path = write(tmp_path / "train.py", raw)
    result = amp_lint("check", "--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert_no_crash(result, 0)
    assert path.read_bytes() == _fixed_bytes(raw)


def test_item2_fix_keeps_the_bytes_of_a_changed_line_beside_the_change():
    from amp_lint.files.sources import decode_source

    raw = b"# -*- coding: cp932 -*-\nname = '\x87\x90'\n"
    source = decode_source(raw)
    assert source.encode(source.text.replace("name =", "label =")) == raw.replace(b"name =", b"label =")


def test_item2_fix_that_cannot_be_written_back_exactly_is_refused():
    from amp_lint.files.sources import SourceError, decode_source

    # raw_unicode_escape writes a backslash as it is: the new `\u0041` would read back as `A`
    source = decode_source(b"# -*- coding: raw_unicode_escape -*-\nx = 1\n")
    with pytest.raises(SourceError, match="encoding does not round-trip"):
        source.encode(source.text + 'y = "\\u0041"\n')


def test_item2_refused_fix_leaves_the_file_as_it_was(tmp_path):
    from amp_lint.files.sources import SourceError, read_source, write_atomic

    raw = b"# -*- coding: raw_unicode_escape -*-\nx = 1\n"
    path = write(tmp_path / "train.py", raw)
    source = read_source(path)
    with pytest.raises(SourceError, match="encoding does not round-trip"):
        write_atomic(path, source.text + 'y = "\\u0041"\n', source)
    assert path.read_bytes() == raw and [p.name for p in tmp_path.iterdir()] == ["train.py"]


# -- 3: a symlink out of the checked paths is checked, not written ------------------------------------------


@pytest.mark.parametrize("named", [".", "train.py"], ids=["folder", "file"])
def test_item3_fix_does_not_write_through_a_symlink_out_of_the_checked_paths(tmp_path, named):
    outside = write(tmp_path / "elsewhere" / "victim.py", BUGGY)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").symlink_to(outside)
    write(project / "own.py", BUGGY)
    result = amp_lint("check", "--no-cache", "--fix", named, cwd=project)
    assert_no_crash(result, 1, 2)
    assert outside.read_text() == BUGGY
    assert "train.py: error: not fixed: symlink to a file outside the checked paths" in output(result)
    assert "train.py" + FINDING in output(result)  # checked all the same
    if named == ".":
        assert (project / "own.py").read_text() == FIXED


def test_item3_fix_through_a_folder_symlink_out_of_the_checked_paths_is_refused(tmp_path):
    outside = write(tmp_path / "elsewhere" / "victim.py", BUGGY)
    project = tmp_path / "project"
    project.mkdir()
    (project / "vendor").symlink_to(outside.parent, target_is_directory=True)
    result = amp_lint("check", "--no-cache", "--fix", ".", cwd=project)
    assert_no_crash(result, 1, 2)
    assert outside.read_text() == BUGGY
    assert "not fixed: symlink to a file outside the checked paths" in output(result)


def test_item3_fix_through_a_symlink_inside_the_checked_paths_is_still_written(tmp_path):
    real = write(tmp_path / "src" / "real.py", BUGGY)
    (tmp_path / "link.py").symlink_to(real)
    result = amp_lint("check", "--no-cache", "--fix", "link.py", "src", cwd=tmp_path)
    assert_no_crash(result, 0)
    assert real.read_text() == FIXED and (tmp_path / "link.py").is_symlink()


# -- 4: a notebook with an integer of more than 4,300 digits is fixed, diffed and fixed on stdin -------------


HUGE = "9" * 5000


def _huge_notebook() -> str:
    return notebook(BUGGY, x="@").replace('"@"', HUGE)


def test_item4_fix_of_a_notebook_with_a_huge_integer_writes_it_and_the_other_files(tmp_path):
    path = write(tmp_path / "huge.ipynb", _huge_notebook())
    other = write(tmp_path / "other.py", BUGGY)
    result = amp_lint("check", "--no-cache", "--fix", ".", cwd=tmp_path)
    assert_no_crash(result, 0)
    assert other.read_text() == FIXED
    fixed = path.read_text()
    assert HUGE in fixed and "".join(json.loads(fixed.replace(HUGE, "1"))["cells"][0]["source"]) == FIXED


def test_item4_diff_of_a_notebook_with_a_huge_integer(tmp_path):
    write(tmp_path / "huge.ipynb", _huge_notebook())
    write(tmp_path / "other.py", BUGGY)
    result = amp_lint("check", "--no-cache", "--diff", ".", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert "+++ b/huge.ipynb" in result.stdout and "+++ b/other.py" in result.stdout


def test_item4_fix_stdin_of_a_notebook_with_a_huge_integer(tmp_path):
    result = amp_lint(
        "check", "--no-cache", "--fix", "--stdin-filename", "nb.ipynb", "-", cwd=tmp_path, input=_huge_notebook().encode()
    )
    assert_no_crash(result, 0)
    assert HUGE in result.stdout and "scaler.update()" in result.stdout


# -- 6: a notebook cell with a lone surrogate is a clear error ----------------------------------------------


@pytest.mark.parametrize("mode", [(), ("--fix",)], ids=["check", "fix"])
def test_item6_notebook_cell_with_a_lone_surrogate_is_a_clear_error(tmp_path, mode):
    text = json.dumps({"cells": [{"cell_type": "markdown", "source": "#"},
                                 {"cell_type": "code", "source": [BUGGY + "s = '\ud800'\n"]}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})  # fmt: skip
    assert "\\ud800" in text
    write(tmp_path / "nb.ipynb", text)
    write(tmp_path / "other.py", BUGGY)
    result = amp_lint("check", "--no-cache", *mode, ".", cwd=tmp_path)
    assert_no_crash(result, 2)
    assert "internal error" not in output(result)
    assert "nb.ipynb: error: cell 2: lone surrogate \\ud800 at line 10, column 6" in output(result)
    assert (tmp_path / "nb.ipynb").read_text() == text


# -- 15: a file that grew during --fix gets a clean reason -------------------------------------------------


def test_item15_file_that_grew_before_the_write_gets_a_clean_reason(tmp_path):
    from amp_lint.files.sources import FileChangedError, read_source, write_atomic

    path = write(tmp_path / "train.py", BUGGY)
    source = read_source(path)
    with open(path, "a") as grown:
        grown.write("# a line more\n")
    with pytest.raises(FileChangedError) as raised:
        write_atomic(path, FIXED, source)
    assert raised.value.message == "file changed on disk after it was read (it grew); not written"
    assert path.read_text() == BUGGY + "# a line more\n"


# -- 18: a file that can be written but not renamed over is written in place -------------------------------


@pytest.mark.parametrize("code", [errno.EBUSY, errno.EACCES, errno.EPERM, errno.EXDEV])
def test_item18_file_that_cannot_be_renamed_over_is_written_in_place(tmp_path, monkeypatch, code):
    from amp_lint.files.sources import read_source, write_atomic

    path = write(tmp_path / "train.py", BUGGY)
    inode = os.stat(path).st_ino
    source = read_source(path)

    def refuse(source_path, target):  # a single-file bind mount: EBUSY; a folder the user cannot write: EACCES
        raise OSError(code, os.strerror(code), str(target))

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(os, "rename", refuse)
    write_atomic(path, FIXED, source)
    assert path.read_text() == FIXED and os.stat(path).st_ino == inode
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left


def _unwritable_folder(monkeypatch):
    """As root ignores the folder's mode bits: no file may be created in it (EACCES), none renamed."""
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(os, "replace", refuse)


def test_item18_writable_file_in_a_folder_that_cannot_be_written_is_written_in_place(tmp_path, monkeypatch):
    from amp_lint.files.sources import read_source, write_atomic

    path = write(tmp_path / "train.py", BUGGY)
    source = read_source(path)
    _unwritable_folder(monkeypatch)
    write_atomic(path, FIXED, source)
    assert path.read_text() == FIXED


def test_item18_when_the_folder_is_the_problem_the_reason_says_so(tmp_path, monkeypatch):
    from amp_lint.files import writing
    from amp_lint.files.sources import SourceError, read_source, write_atomic

    path = write(tmp_path / "train.py", BUGGY)
    other = write(tmp_path / "other.py", BUGGY)
    source, other_source = read_source(path), read_source(other)
    _unwritable_folder(monkeypatch)

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writing, "_write_all", full)
    in_place = "and writing the file in place failed .No space left on device."
    with pytest.raises(SourceError, match=f"the folder {tmp_path} cannot be written .Permission denied., {in_place}"):
        write_atomic(path, FIXED, source)
    assert path.read_text() == BUGGY
    none_in_place = "and a fix that changes several files writes none in place"
    with pytest.raises(SourceError, match=f"the folder {tmp_path} cannot be written .Permission denied., {none_in_place}"):
        writing.write_all_or_none([(path, FIXED, source), (other, FIXED, other_source)])
    assert path.read_text() == BUGGY and other.read_text() == BUGGY


def test_item18_several_files_where_one_cannot_be_renamed_over_say_so(tmp_path, monkeypatch):
    from amp_lint.files import writing
    from amp_lint.files.sources import SourceError, read_source

    first, second = write(tmp_path / "a.py", BUGGY), write(tmp_path / "b.py", BUGGY)
    items = [(first, FIXED, read_source(first)), (second, FIXED, read_source(second))]
    real_replace = os.replace

    def busy_for_b(source_path, target):
        if Path(target).name == "b.py":
            raise OSError(errno.EBUSY, "Device or resource busy")
        real_replace(source_path, target)

    monkeypatch.setattr(os, "replace", busy_for_b)
    with pytest.raises(SourceError, match="b.py cannot be renamed over .Device or resource busy."):
        writing.write_all_or_none(items)
    assert first.read_text() == BUGGY and second.read_text() == BUGGY


# -- 21: configuration files: a BOM is read; an `extend` cycle through a folder symlink is named -------------


@pytest.mark.parametrize("name", ["amp-lint.toml", "pyproject.toml"])
def test_item21_config_with_a_utf8_bom_is_read(tmp_path, name):
    table = "[tool.amp-lint]\n" if name == "pyproject.toml" else ""
    write(tmp_path / name, codecs.BOM_UTF8 + f'{table}ignore = ["AMP021"]\n'.encode())
    write(tmp_path / "train.py", BUGGY)
    result = amp_lint("check", "--no-cache", ".", cwd=tmp_path)
    assert_no_crash(result, 0)
    assert "Invalid statement" not in output(result) and FINDING not in output(result)


def test_item21_extend_cycle_through_a_folder_symlink_is_named_a_cycle(tmp_path):
    write(tmp_path / "amp-lint.toml", 'extend = "loop/amp-lint.toml"\n')
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    write(tmp_path / "train.py", BUGGY)
    result = amp_lint("check", "--no-cache", "train.py", cwd=tmp_path)
    assert_no_crash(result, 2)
    assert "'extend' makes a cycle" in output(result), output(result)
    assert "loop/loop" not in output(result)
