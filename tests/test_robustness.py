"""Bad input never crashes amp-lint, never hangs it, and never costs the user a byte.

amp-lint runs unattended in hooks and CI over code nobody has cleaned. Every test here runs the real
command in a temporary folder (`python -m amp_lint ...`), except the few that must reach inside a run
(a file edited between read and write, a full disk), which call `amp_lint.engine.runner.check_file`, the
function each worker runs per file. Each input file carries enough AMP code (an autocast block, a
backward) to pass the prefilter, so that amp-lint really reads, decodes and parses it.
"""

from __future__ import annotations

import ast
import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterable, List

import pytest

from child_signals import as_from_a_terminal, sigint_report
from snippets import BACKWARD_IN_AUTOCAST, MISSING_UPDATE

BUGGY = MISSING_UPDATE  # the AMP021 loop (tests/snippets.py)
FIXED = BUGGY.replace("    scaler.step(optimizer)\n", "    scaler.step(optimizer)\n    scaler.update()\n")
FINDING = ":8:5: AMP021"
INSERTED = b"scaler.update()"

MOVED = b"scaler.scale(loss).backward()"

SUBPROCESS_TIMEOUT = 120


def amp_lint(*args: str, cwd: Path, timeout: float = SUBPROCESS_TIMEOUT) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "amp_lint", *args], cwd=cwd, capture_output=True, timeout=timeout)
    result.stdout = result.stdout.decode("utf-8", errors="replace")
    result.stderr = result.stderr.decode("utf-8", errors="replace")
    return result


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def assert_no_crash(result: subprocess.CompletedProcess, *exit_codes: int) -> None:
    assert "Traceback" not in output(result), output(result)
    assert result.returncode in exit_codes, (result.returncode, output(result))


def write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def lines_mentioning(result: subprocess.CompletedProcess, name: str) -> List[str]:
    return [line for line in output(result).splitlines() if name in line]


def assert_kept_outside_edits(before: bytes, after: bytes, edited: Iterable[bytes]) -> None:
    """`after` is `before` byte for byte, except for the lines whose stripped text is in `edited`."""
    edited = {line.strip() for line in edited}

    def untouched(data: bytes) -> List[bytes]:
        # bytes.splitlines breaks at \n, \r\n and \r only, as Python's tokenizer does (not at \f or \v).
        return [line for line in data.splitlines(keepends=True) if line.strip() not in edited]

    assert after != before, "the fix was not applied"
    assert untouched(after) == untouched(before)


def temporary_files(folder: Path) -> List[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob(".*.amp-lint-*.tmp"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with one ordinary buggy file, to show that the run goes on past a bad one."""
    write(tmp_path / "good.py", BUGGY)
    return tmp_path


def assert_good_file_still_checked(result: subprocess.CompletedProcess) -> None:
    assert f"good.py{FINDING}" in result.stdout, output(result)


# -- source that does not parse -------------------------------------------------------------------


def test_syntax_error_is_reported_with_file_line_and_reason_and_the_run_goes_on(project):
    write(project / "broken.py", BUGGY.replace("loss = loss_fn(model(x), y)", "loss = loss_fn(model(x), y"))
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert_no_crash(result, 2)
    [line] = lines_mentioning(result, "broken.py")
    # Python's position (issue 44.16): the bracket never closed is on line 6, where LibCST gave up on line 7.
    assert line.startswith("broken.py:6:23:") and "syntax error: '(' was never closed" in line, line
    assert_good_file_still_checked(result)


def test_python2_file_is_reported_as_a_syntax_error_and_the_run_goes_on(project):
    python2 = textwrap.dedent(
        """\
        import torch

        scaler = torch.cuda.amp.GradScaler()
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = loss_fn(model(x), y)
            print "loss", loss
            try:
                scaler.scale(loss).backward()
            except RuntimeError, error:
                print >>sys.stderr, `error`
            scaler.step(optimizer)
            scaler.update()
        """
    )
    write(project / "legacy.py", python2)
    original = (project / "legacy.py").read_bytes()
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert_no_crash(result, 2)
    [line] = lines_mentioning(result, "legacy.py")
    assert line.startswith("legacy.py:") and "syntax error" in line
    assert_good_file_still_checked(result)
    # --fix leaves a file it cannot parse alone.
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=project), 2)
    assert (project / "legacy.py").read_bytes() == original


TOKENIZER_ERROR_LOCATION = ()  # fixed: the location comes from Python's own parser


@pytest.mark.parametrize(
    "bad_line",
    [
        pytest.param('    print "loss", loss', id="python2-print"),
        pytest.param("    except RuntimeError, error:", id="python2-except"),
        pytest.param("    x = 0777", id="python2-octal", marks=TOKENIZER_ERROR_LOCATION),
        pytest.param("    x = `loss`", id="python2-backticks", marks=TOKENIZER_ERROR_LOCATION),
        pytest.param("    name = 'unterminated", id="unterminated-string", marks=TOKENIZER_ERROR_LOCATION),
        pytest.param("    cost = $loss", id="invalid-character", marks=TOKENIZER_ERROR_LOCATION),
    ],
)
def test_syntax_error_is_reported_at_the_line_python_names(tmp_path, bad_line):
    source = BUGGY.replace("    optimizer.zero_grad()\n", bad_line + "\n    optimizer.zero_grad()\n")
    with pytest.raises(SyntaxError) as python_says:
        compile(source, "broken.py", "exec")
    assert python_says.value.lineno == 9
    write(tmp_path / "broken.py", source)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 2)
    [line] = lines_mentioning(result, "broken.py")
    assert line.startswith("broken.py:9:") and "syntax error" in line, line


# -- bytes that are not Python source ---------------------------------------------------------------


@pytest.mark.parametrize(
    "content, reason",
    [
        pytest.param(BUGGY.encode().replace(b"optimizer.zero_grad()", b"optimizer.zero_grad(\0)"), "NUL", id="nul-bytes"),
        pytest.param(
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\x01\0" + BUGGY.encode() + bytes(range(256)) * 4, "NUL", id="binary-blob"
        ),
        pytest.param(BUGGY.encode().replace(b'"cuda")\n', b'"cuda")  # \xff\xfe\xfd\n', 1), "line 3", id="invalid-utf8"),
        pytest.param(b"# \xe9t\xe9\n" + BUGGY.encode(), "line 1", id="invalid-utf8-first-line"),
        pytest.param(b"# -*- coding: klingon -*-\n" + BUGGY.encode(), "klingon", id="unknown-coding-cookie"),
    ],
)
def test_undecodable_file_is_one_error_line_and_never_written(project, content, reason):
    path = write(project / "model.py", content)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert_no_crash(result, 2)
    [line] = lines_mentioning(result, "model.py")
    assert "error" in line and reason in line, line
    assert_good_file_still_checked(result)
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=project), 2)
    assert path.read_bytes() == content
    assert (project / "good.py").read_text() == FIXED


def test_latin1_file_with_coding_cookie_is_checked_and_fixed_in_latin1(tmp_path):
    source = "# -*- coding: latin-1 -*-\n# Entraînement à précision mixte (café, 25 °C)\n" + BUGGY.replace(
        "optimizer.zero_grad()", "optimizer.zero_grad()  # remise à zéro"
    )
    before = source.encode("latin-1")
    path = write(tmp_path / "train.py", before)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert "train.py:10:5: AMP021" in result.stdout
    result = amp_lint("--fix", "--no-cache", cwd=tmp_path)
    assert_no_crash(result, 0)
    after = path.read_bytes()
    assert_kept_outside_edits(before, after, [INSERTED])
    assert after.decode("latin-1") == source.replace("    scaler.step(optimizer)\n", "    scaler.step(optimizer)\n    scaler.update()\n")


def test_utf8_bom_is_kept_by_fix(tmp_path):
    before = b"\xef\xbb\xbf" + BUGGY.encode()
    path = write(tmp_path / "train.py", before)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"train.py{FINDING}" in result.stdout  # the BOM does not shift columns
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=tmp_path), 0)
    after = path.read_bytes()
    assert after.startswith(b"\xef\xbb\xbf") and not after.startswith(b"\xef\xbb\xbf" * 2)
    assert after == b"\xef\xbb\xbf" + FIXED.encode()


def _mixed_line_endings(text: str) -> bytes:
    endings = [b"\r", b"\r\n", b"\n"]  # the last of the 9 lines ends with \n
    lines = text.encode().split(b"\n")[:-1]
    return b"".join(line + endings[index % 3] for index, line in enumerate(lines))


WHITESPACE_VARIANTS = {
    "crlf": BUGGY.encode().replace(b"\n", b"\r\n"),
    "mixed-line-endings": _mixed_line_endings(BUGGY),
    "cr-line-endings": BUGGY.encode().replace(b"\n", b"\r"),
    "last-line-ends-with-cr": BUGGY.encode()[:-1] + b"\r",
    "tabs": BUGGY.encode()
    .replace(b"    ", b"\t")
    .replace(b"loss_fn(model(x), y)", b"loss_fn(model(x),\ty)\t# tab\tseparated")
    .replace(b"import torch", b"import torch\t\t"),
    "form-feeds-on-their-own-lines": BUGGY.encode()
    .replace(b"scaler = ", b"\x0c\nscaler = ")
    .replace(b"        loss = loss_fn", b"\x0c\n        loss = loss_fn")
    .replace(b"optimizer.zero_grad()\n", b"optimizer.zero_grad()\n\x0c\n# page 2\n"),
    "form-feed-before-indentation": BUGGY.encode().replace(b"y)\n", b"y)\n\x0c        loss = loss / 2\n"),
    "no-newline-at-end": BUGGY.encode().replace(b"optimizer.zero_grad()\n", b"optimizer.zero_grad()  # last"),
    "crlf-no-newline-at-end": BUGGY.encode().replace(b"\n", b"\r\n")[:-2],
    "trailing-whitespace-and-blank-lines": BUGGY.encode()
    .replace(b"\n", b"   \n")
    .replace(b"import torch   \n", b"import torch\n\n \n\t\n"),
}


@pytest.mark.parametrize("name", list(WHITESPACE_VARIANTS))
def test_fix_keeps_line_endings_tabs_and_form_feeds_byte_for_byte(tmp_path, name):
    before = WHITESPACE_VARIANTS[name]
    compile(before, "train.py", "exec")  # the input is valid Python
    path = write(tmp_path / "train.py", before)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert "AMP021" in result.stdout
    result = amp_lint("--fix", "--no-cache", cwd=tmp_path)
    assert_no_crash(result, 0)
    after = path.read_bytes()
    assert_kept_outside_edits(before, after, [INSERTED])
    assert after.count(INSERTED) == before.count(INSERTED) + 1
    compile(after, "train.py", "exec")
    if name.startswith("crlf"):
        assert after.count(b"\n") == after.count(b"\r\n"), "the inserted line must end like the others"


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_fix_that_moves_lines_keeps_the_line_endings(tmp_path, ending):
    before = BACKWARD_IN_AUTOCAST.encode().replace(b"\n", ending)
    path = write(tmp_path / "train.py", before)
    result = amp_lint("--fix", "--no-cache", cwd=tmp_path)
    assert_no_crash(result, 0)
    after = path.read_bytes()
    assert_kept_outside_edits(before, after, [MOVED])
    assert after == BACKWARD_IN_AUTOCAST.replace("        scaler.scale", "    scaler.scale").encode().replace(b"\n", ending)


def test_form_feed_before_a_nested_block_is_not_a_syntax_error(tmp_path):
    source = BUGGY.replace("        loss = loss_fn", "\x0c        loss = loss_fn")
    compile(source, "train.py", "exec")
    write(tmp_path / "train.py", source)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"train.py{FINDING}" in result.stdout, output(result)


def test_empty_and_comment_only_files_are_fine(project):
    write(project / "empty.py", b"")
    write(project / "blank.py", b"\n\n   \n")
    # Passes the prefilter (it names autocast and backward) but holds no code at all.
    write(project / "comments.py", b"# with torch.autocast('cuda'): loss.backward()\n# scaler.step(optimizer)\n")
    write(project / "docstring.py", b'"""torch.autocast, loss.backward(), scaler.step(optimizer)."""\n')
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert_no_crash(result, 1)
    assert result.stdout.strip().splitlines()[0].startswith(f"good.py{FINDING}")
    for name in ("empty.py", "blank.py", "comments.py", "docstring.py"):
        assert not lines_mentioning(result, name)
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=project), 0)
    assert (project / "empty.py").read_bytes() == b""
    assert (project / "comments.py").read_bytes().startswith(b"# with torch.autocast")


# -- big and deep inputs ----------------------------------------------------------------------------


def test_50000_line_file_of_data_finishes(tmp_path):
    rows = "".join(f"    ({i}, 'row {i}', {i * 0.5}),\n" for i in range(25_000))
    assignments = "".join(f"setting_{i} = {i} * 2  # filler\n" for i in range(25_000))
    path = write(tmp_path / "big.py", BUGGY + "TABLE = [\n" + rows + "]\n" + assignments)
    assert path.read_text().count("\n") > 50_000
    started = time.monotonic()
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"big.py{FINDING}" in result.stdout
    assert time.monotonic() - started < SUBPROCESS_TIMEOUT


def test_50000_line_file_of_small_functions_finishes(tmp_path):
    functions = "".join(f"def helper_{i}(a):\n    return combine(a, {i})\n" for i in range(25_000))
    path = write(tmp_path / "big.py", BUGGY + functions)
    assert path.read_text().count("\n") > 50_000
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"big.py{FINDING}" in result.stdout


def test_1000_nested_ifs_are_one_clear_error(project):
    nested = "".join(" " * depth + "if x:\n" for depth in range(1000)) + " " * 1000 + "loss.backward()\n"
    path = write(project / "deep.py", BUGGY + nested)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
    assert_no_crash(result, 0, 1, 2)
    assert len(lines_mentioning(result, "deep.py")) <= 1
    assert_good_file_still_checked(result)
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=project), 0, 1, 2)
    assert path.read_text() == BUGGY + nested


def test_98_nested_blocks_are_analysed(tmp_path):
    # Python allows about 100 indentation levels: this is valid code, deep enough to overflow a naive
    # recursive tree walk; the bug sits at the bottom.
    ifs = 96
    body = "".join(" " * level + f"if flag_{level}:\n" for level in range(ifs))
    body += textwrap.indent(BUGGY.split("\n", 2)[2], " " * ifs)
    source = "import torch\n\n" + body
    compile(source, "deep.py", "exec")
    write(tmp_path / "deep.py", source)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"deep.py:{2 + ifs + 6}:{ifs + 5}: AMP021" in result.stdout, result.stdout
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=tmp_path), 0)
    compile((tmp_path / "deep.py").read_text(), "deep.py", "exec")
    assert (tmp_path / "deep.py").read_text() == "import torch\n\n" + body.replace(
        "scaler.step(optimizer)\n", "scaler.step(optimizer)\n" + " " * (ifs + 4) + "scaler.update()\n"
    )


def test_200_nested_brackets_are_analysed(tmp_path):
    # 200 levels of brackets is Python's own limit.
    source = BUGGY + "nested = " + "[" * 199 + "]" * 199 + "\ncall = " + "f(" * 199 + ")" * 199 + "\n"
    compile(source, "deep.py", "exec")
    write(tmp_path / "deep.py", source)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"deep.py{FINDING}" in result.stdout


def test_20000_term_expression_is_analysed_or_refused_quickly(project):
    path = write(project / "deep.py", BUGGY + "total = " + "+".join(["1"] * 20_000) + "\n")
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project, timeout=60)
    assert_no_crash(result, 1, 2)
    assert f"deep.py{FINDING}" in result.stdout or len(lines_mentioning(result, "deep.py")) == 1
    assert_good_file_still_checked(result)
    assert path.read_text().endswith("+1\n")


def test_20000_term_boolean_chain_is_analysed_quickly(project):
    # LibCST parses `a and a and ...` in linear time; the analysis must not be quadratic in it either.
    path = write(project / "deep.py", BUGGY + "ready = " + " and ".join(["flag"] * 20_000) + "\n")
    started = time.monotonic()
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project, timeout=60)
    assert_no_crash(result, 1)
    assert f"deep.py{FINDING}" in result.stdout
    assert time.monotonic() - started < 30
    assert path.read_text().endswith("and flag\n")


@pytest.mark.parametrize(
    "long_line",
    [
        pytest.param("BLOB = '" + "a" * 1_000_000 + "'\n", id="1MB-string"),
        pytest.param("# " + "x" * 1_000_000 + "\n", id="1MB-comment"),
        pytest.param("DATA = [" + ", ".join(["1"] * 35_000) + "]\n", id="100KB-list"),
    ],
)
def test_very_long_line_is_checked_and_kept_by_fix(tmp_path, long_line):
    before = (BUGGY + long_line).encode()
    path = write(tmp_path / "train.py", before)
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=tmp_path)
    assert_no_crash(result, 1)
    assert f"train.py{FINDING}" in result.stdout
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=tmp_path), 0)
    assert path.read_bytes() == (FIXED + long_line).encode()


# -- paths ------------------------------------------------------------------------------------------


def test_path_that_does_not_exist_is_one_clear_line(project):
    result = amp_lint("--no-cache", "nothere.py", cwd=project)
    assert_no_crash(result, 2)
    [line] = lines_mentioning(result, "nothere.py")
    assert "No such file or directory" in line
    result = amp_lint("--no-cache", "--output-format", "concise", "nothere.py", "good.py", cwd=project)
    assert_no_crash(result, 2)
    assert len(lines_mentioning(result, "nothere.py")) == 1
    assert_good_file_still_checked(result)


def test_folder_named_like_a_python_file_is_walked(project):
    write(project / "x.py" / "inner.py", BUGGY)
    for arguments in (["x.py"], ["."], ["x.py", "good.py"]):
        result = amp_lint("--no-cache", "--output-format", "concise", *arguments, cwd=project)
        assert_no_crash(result, 1)
        assert f"x.py/inner.py{FINDING}" in result.stdout
        assert ": error:" not in output(result)


def test_symlink_loops_are_warnings_and_do_not_hang(project):
    (project / "pkg").mkdir()
    (project / "pkg" / "loop").symlink_to("..", target_is_directory=True)
    (project / "self.py").symlink_to("self.py")
    (project / "ping.py").symlink_to("pong.py")
    (project / "pong.py").symlink_to("ping.py")
    (project / "dangling.py").symlink_to("gone.py")
    result = amp_lint("--no-cache", "--output-format", "concise", cwd=project, timeout=60)
    assert_no_crash(result, 1)  # walked, each is a warning (issue 28, item 9): the run does not fail for them
    for name in ("self.py", "ping.py", "pong.py", "dangling.py"):
        assert len(lines_mentioning(result, name)) == 1, (name, output(result))
        assert f"{name}: warning:" in result.stderr
    assert any("loop" in line for line in lines_mentioning(result, "self.py"))
    assert_good_file_still_checked(result)
    # Named on the command line, too.
    result = amp_lint("--no-cache", "--output-format", "concise", "self.py", "pkg/loop/pkg", "good.py", cwd=project, timeout=60)
    assert_no_crash(result, 1, 2)
    assert_good_file_still_checked(result)


def test_unreadable_file_is_reported_and_the_run_goes_on(project):
    path = write(project / "secret.py", BUGGY)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: a mode-000 file is still readable")
        result = amp_lint("--no-cache", "--output-format", "concise", cwd=project)
        assert_no_crash(result, 2)
        [line] = lines_mentioning(result, "secret.py")
        assert "Permission denied" in line
        assert_good_file_still_checked(result)
    finally:
        path.chmod(0o644)


def test_read_only_file_is_reported_not_written_and_the_rest_fixed(project):
    path = write(project / "locked.py", BUGGY)
    path.chmod(0o444)
    try:
        result = amp_lint("--fix", "--no-cache", cwd=project)
        assert_no_crash(result, 2)
        assert any("read-only" in line and "not written" in line for line in lines_mentioning(result, "locked.py"))
        assert path.read_text() == BUGGY
        assert (project / "good.py").read_text() == FIXED
        assert temporary_files(project) == []
    finally:
        path.chmod(0o644)


def test_read_only_file_keeps_its_finding_in_the_fix_report(tmp_path):
    path = write(tmp_path / "locked.py", BUGGY)
    path.chmod(0o444)
    try:
        result = amp_lint("--fix", "--no-cache", "--output-format", "concise", cwd=tmp_path)
        assert_no_crash(result, 2)
        assert f"locked.py{FINDING}" in result.stdout, output(result)
    finally:
        path.chmod(0o644)


# -- in-process: what happens between read and write -------------------------------------------------


def _fix_config():
    from amp_lint import rules
    from amp_lint.engine.runner import CheckConfig

    return CheckConfig(
        enabled=frozenset(rules.default_codes()), fix=True, unsafe_fixes=False, with_edits=False, write=True
    )


def test_file_edited_between_read_and_write_is_not_overwritten(tmp_path, monkeypatch):
    from amp_lint.files import sources as files
    from amp_lint.engine.runner import check_file

    path = write(tmp_path / "train.py", BUGGY)
    edited = BUGGY + "# the user saved this while amp-lint was working\n"
    real_read_source = files.read_source

    def read_then_user_edits(target):
        source = real_read_source(target)
        Path(target).write_text(edited)
        return source

    monkeypatch.setattr(files, "read_source", read_then_user_edits)
    outcome = check_file(str(path), _fix_config())
    assert path.read_text() == edited
    assert [error.filename for error in outcome.errors] == [str(path)]
    assert "changed" in outcome.errors[0].message and "not written" in outcome.errors[0].message
    assert outcome.fixed == {}
    assert temporary_files(tmp_path) == []


def test_file_removed_between_read_and_write_is_not_recreated(tmp_path, monkeypatch):
    from amp_lint.files import sources as files
    from amp_lint.engine.runner import check_file

    path = write(tmp_path / "train.py", BUGGY)
    real_read_source = files.read_source

    def read_then_user_deletes(target):
        source = real_read_source(target)
        Path(target).unlink()
        return source

    monkeypatch.setattr(files, "read_source", read_then_user_deletes)
    outcome = check_file(str(path), _fix_config())
    assert not path.exists()
    assert len(outcome.errors) == 1 and "not written" in outcome.errors[0].message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("written_before_full", [0, 10])
def test_full_disk_during_the_write_leaves_the_original(tmp_path, monkeypatch, written_before_full):
    from amp_lint.engine.runner import check_file

    path = write(tmp_path / "train.py", BUGGY)
    real_write = os.write
    budget = [written_before_full]

    def disk_fills_up(fd, data):
        if fd <= 2:  # the test's own output
            return real_write(fd, data)
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        count = real_write(fd, bytes(data[: budget[0]]))
        budget[0] -= count
        return count

    monkeypatch.setattr(os, "write", disk_fills_up)
    outcome = check_file(str(path), _fix_config())
    monkeypatch.undo()
    assert path.read_text() == BUGGY
    assert len(outcome.errors) == 1
    assert "No space left on device" in outcome.errors[0].message and "unchanged" in outcome.errors[0].message
    assert outcome.fixed == {}
    assert temporary_files(tmp_path) == []


# -- interruptions and concurrent runs ---------------------------------------------------------------


def _buggy_variant(index: int, padding: int) -> str:
    """Four kinds of fixable bug, a distinct comment per file, and optional filler to make files bigger."""
    kind = index % 4
    if kind == 0:
        text = BUGGY
    elif kind == 1:
        text = BACKWARD_IN_AUTOCAST
    elif kind == 2:
        text = BUGGY.replace("    optimizer.zero_grad()\n", "    scaler.update()\n").replace(
            "    scaler.step(optimizer)\n", "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    scaler.step(optimizer)\n"
        )
    else:
        text = BUGGY.replace("    scaler.step(optimizer)\n", "    optimizer.step()\n    scaler.update()\n")
    filler = "".join(f"\n\ndef helper_{index}_{j}(a, b):\n    return a * {j} + b\n" for j in range(padding))
    return f"# module {index}\n" + text + filler


def _tree(folder: Path, count: int, padding: int) -> Dict[str, bytes]:
    originals = {}
    for index in range(count):
        name = f"pkg{index % 5}/m{index:03d}.py"
        originals[name] = write(folder / name, _buggy_variant(index, padding)).read_bytes()
    return originals


def _fully_fixed(tmp_path: Path, originals: Dict[str, bytes]) -> Dict[str, bytes]:
    copy = tmp_path / "reference"
    for name, content in originals.items():
        write(copy / name, content)
    result = amp_lint("--fix", "--no-cache", cwd=copy)
    assert_no_crash(result, 0)
    fixed = {name: (copy / name).read_bytes() for name in originals}
    assert all(fixed[name] != originals[name] for name in originals)
    shutil.rmtree(copy)
    return fixed


def _start_fix(folder: Path, *arguments: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "amp_lint", "--fix", "--no-cache", *arguments, "."],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so that SIGINT reaches the workers too, as Ctrl-C does
        preexec_fn=as_from_a_terminal,
    )


def _ctrl_c(process: subprocess.Popen) -> str:
    """Press Ctrl-C (SIGINT to the whole process group); the run's standard error, then how the processes held
    SIGINT when it was sent (for the assertion messages; it holds no 'Traceback')."""
    held = sigint_report(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=SUBPROCESS_TIMEOUT)
    return stderr.decode("utf-8", errors="replace") + f"\n[SIGINT as held when sent: {held}]"


def _wait_until(condition, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None and not condition():
        time.sleep(0.01)


@pytest.mark.parametrize(
    "padding, jobs", [pytest.param(0, "1", id="serial"), pytest.param(40, "2", id="worker-processes")]
)
def test_ctrl_c_during_fix_leaves_every_file_untouched_or_fully_fixed(tmp_path, padding, jobs):
    tree = tmp_path / "tree"
    originals = _tree(tree, 200, padding)
    assert (sum(map(len, originals.values())) > 400_000) == (jobs == "2")  # workers._PARALLEL_MIN_BYTES
    fixed = _fully_fixed(tmp_path, originals)
    process = _start_fix(tree, "--jobs", jobs)
    # Interrupt as soon as the run is writing fixes.
    _wait_until(lambda: any((tree / name).read_bytes() != content for name, content in originals.items()), process)
    stderr = _ctrl_c(process)
    for name, original in originals.items():
        assert (tree / name).read_bytes() in (original, fixed[name]), f"{name} is neither untouched nor fully fixed"
    assert temporary_files(tree) == []
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr
    assert process.returncode >= 0, f"killed by signal {-process.returncode}"
    if process.returncode == 0:  # only a run that had finished before Ctrl-C landed (a loaded machine) reports success
        assert all((tree / name).read_bytes() == fixed[name] for name in originals), f"an interrupted run reported success: {stderr}"
    # Running again finishes the job.
    assert_no_crash(amp_lint("--fix", "--no-cache", cwd=tree), 0)
    assert all((tree / name).read_bytes() == fixed[name] for name in originals)


def _slow_to_parse(helpers: int) -> str:
    """BUGGY followed by `helpers` clean training-step functions: a file amp-lint is surely still busy with.

    Slow only because it is big (about 420 bytes a helper): 2,500 helpers make 1.1 MB that LibCST takes
    5.6 s to parse on a 2-CPU test machine (3,000: 1.3 MB, 6.4 s). No expression in it is long enough
    for amp-lint's guard against slow parses (`amp_lint.parse.guard`) to refuse it.
    """
    step = (
        "def train_step_{index}(model, batch, optimizer, scale={index}):\n"
        "    inputs, targets = batch\n"
        "    outputs = model(inputs.to('cuda', non_blocking=True) * scale)\n"
        "    loss = ((outputs - targets) ** 2).mean() + 0.01 * sum(p.abs().sum() for p in model.parameters())\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    return {{'loss': loss.item(), 'step': {index}, 'lr': optimizer.param_groups[0]['lr']}}\n\n\n"
    )
    return BUGGY + "".join(step.format(index=index) for index in range(helpers))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="watches the run's threads in /proc")
def test_ctrl_c_while_a_file_is_being_parsed_exits_cleanly(tmp_path):
    path = write(tmp_path / "slow.py", _slow_to_parse(3000))
    original = path.read_bytes()
    process = _start_fix(tmp_path, "--jobs", "1")
    _wait_until(lambda: len(os.listdir(f"/proc/{process.pid}/task")) > 1, process)  # the check thread started
    time.sleep(1.0)
    assert process.poll() is None, "the file was parsed faster than expected"
    stderr = _ctrl_c(process)
    assert path.read_bytes() == original
    assert temporary_files(tmp_path) == []
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr
    assert process.returncode >= 0, f"killed by signal {-process.returncode}"
    assert process.returncode != 0, stderr


def test_ctrl_c_while_a_worker_waits_for_work_prints_no_traceback(tmp_path):
    # The slow file is the largest, so it goes to a worker first; the other worker fixes the small files,
    # then waits for work that never comes.
    slow = write(tmp_path / "slow.py", _slow_to_parse(2500) + "# padding to pass the 400 kB parallel threshold\n" * 9000)
    slow_original = slow.read_bytes()
    small = {f"m{index:02d}.py": write(tmp_path / f"m{index:02d}.py", BUGGY) for index in range(20)}
    process = _start_fix(tmp_path, "--jobs", "2")
    _wait_until(lambda: all(path.read_text() == FIXED for path in small.values()), process)
    time.sleep(0.3)
    assert process.poll() is None, "the slow file was parsed faster than expected"
    pressed = time.monotonic()
    stderr = _ctrl_c(process)
    # The run ends at once: the worker busy with the slow file (over 30 s of LibCST and analysis on a
    # 2-CPU machine) does not finish it first.
    assert time.monotonic() - pressed < 10, "Ctrl-C waited for the worker to finish its file"
    assert all(path.read_text() == FIXED for path in small.values())
    assert slow.read_bytes() in (slow_original, slow_original.replace(b"step(optimizer)\n", b"step(optimizer)\n    scaler.update()\n"))
    assert temporary_files(tmp_path) == []
    assert "Traceback" not in stderr, stderr
    assert process.returncode not in (0,) and process.returncode >= 0, stderr


def test_a_stopped_worker_ends_only_after_the_write_in_progress(monkeypatch):
    """A worker ends as soon as the run stops (its lifeline pipe closes), but never in the middle of a write."""
    import threading
    import types

    from amp_lint.engine import workers
    from amp_lint.files.writing import WRITE_LOCK

    exits = []
    monkeypatch.setattr(workers, "os", types.SimpleNamespace(read=os.read, _exit=exits.append))
    read_end, write_end = os.pipe()
    os.close(write_end)  # the run stopped
    with WRITE_LOCK:  # a write in progress
        ending = threading.Thread(target=workers._wait_for_eof, args=(read_end,), daemon=True)
        ending.start()
        time.sleep(0.2)
        assert exits == [], "the worker ended in the middle of a write"
    ending.join(10)
    assert exits == [1]
    WRITE_LOCK.release()  # taken for good by the (here, pretend) ending worker
    os.close(read_end)


def test_two_fix_runs_at_once_do_not_corrupt_files_or_the_cache(tmp_path):
    tree = tmp_path / "tree"
    originals = _tree(tree, 60, 10)
    # Files with findings that have no fix, so that the cache holds something after the fixes.
    for index in range(10):
        text = BUGGY.replace('scaler = torch.amp.GradScaler("cuda")\n', "").replace(
            "scaler.scale(loss).backward()\n    scaler.step(optimizer)\n", "loss.backward()\n    optimizer.step()\n"
        )
        write(tree / f"fp16/n{index}.py", f"# {index}\n" + text)
    fixed = _fully_fixed(tmp_path, originals)

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "amp_lint", *args], cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    runs = [start("--fix", "--jobs", "2", "."), start("--fix", "--jobs", "1", ".")]
    for run in runs:
        stdout, stderr = run.communicate(timeout=SUBPROCESS_TIMEOUT)
        assert b"Traceback" not in stdout + stderr, stderr
        assert run.returncode in (1, 2)  # 1: the fp16 findings remain; 2: "file changed on disk" is fair
    for name in originals:
        content = (tree / name).read_bytes()
        ast.parse(content)
        assert content == fixed[name], f"{name} differs from its fully fixed form"
    assert temporary_files(tree) == []

    # Two checking runs at once, both writing the cache, then two more reading it.
    racing = [start("--output-format", "concise", "."), start("--output-format", "concise", "--jobs", "1", ".")]
    outputs = [run.communicate(timeout=SUBPROCESS_TIMEOUT)[0].decode() for run in racing]
    cached = [amp_lint("--output-format", "concise", cwd=tree) for _ in range(2)]
    fresh = amp_lint("--output-format", "concise", "--no-cache", cwd=tree)
    assert_no_crash(fresh, 1)
    assert fresh.stdout.count("AMP010") == 10
    for result in cached:
        assert_no_crash(result, 1)
    assert outputs == [fresh.stdout, fresh.stdout]
    assert [result.stdout for result in cached] == [fresh.stdout, fresh.stdout]


# -- bad configuration and command lines --------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, config_name, config, expected",
    [
        pytest.param(["--frobnicate"], None, None, "--frobnicate", id="unknown-option"),
        pytest.param(["--output-format", "xml"], None, None, "xml", id="bad-output-format"),
        pytest.param(["--select", "AMP999"], None, None, "AMP999", id="unknown-rule-code"),
        pytest.param(["--ignore", "AMP0x1"], None, None, "AMP0x1", id="malformed-rule-code"),
        pytest.param(["--jobs", "0"], None, None, "--jobs", id="zero-jobs"),
        pytest.param(["--config", "missing.toml"], None, None, "missing.toml", id="missing-config-file"),
        pytest.param([], "pyproject.toml", "[tool.amp-lint\nselect = [", "invalid TOML", id="bad-toml"),
        pytest.param([], "amp-lint.toml", 'select = "AMP001"\n', "'select' must be a list of strings", id="wrong-type"),
        pytest.param([], "amp-lint.toml", 'fix = "yes"\n', "'fix' must be true or false", id="wrong-type-bool"),
        pytest.param([], "amp-lint.toml", 'select = ["AMP999"]\n', "AMP999", id="unknown-code-in-config"),
        pytest.param([], "amp-lint.toml", "colour = true\n", "unknown key 'colour'", id="unknown-key"),
        pytest.param([], "pyproject.toml", "[tool]\namp-lint = 3\n", "must be a table", id="not-a-table"),
        pytest.param([], "amp-lint.toml", b"select = ['\xff']\n", "not UTF-8", id="config-not-utf8"),
    ],
)
def test_bad_configuration_or_command_line_is_a_clear_error(project, arguments, config_name, config, expected):
    if config_name is not None:
        write(project / config_name, config)
    result = amp_lint(*arguments, cwd=project)
    assert_no_crash(result, 2)
    assert expected.lower() in result.stderr.lower(), result.stderr
    assert result.stdout == ""
    assert (project / "good.py").read_text() == BUGGY
