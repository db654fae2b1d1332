"""Issue 45 ("Faults, round four"), the runtime items: verify's children (10-12, 16, 19), the language server's
answers (13, 20) and the guard's end (17). One test per item, named for it.

The verify tests run tiny CPU training scripts (a 4-1 linear model) for a few steps on each side.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest

from amp_lint.verify import NOT_RUN, verify_scripts
from tests.test_server import ENV

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="verify runs torch scripts")

TRAIN = """
import torch
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for step in range(1000):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(net(x), y)
    loss.backward()
    opt.step()
"""


@pytest.fixture(autouse=True)
def one_thread_per_child(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _same_code(path: Path):
    """A "conversion" that hands back the script itself: these tests are about running the children."""
    code = path.read_text(encoding="latin-1")
    return lambda *args, **kwargs: SimpleNamespace(code=code, converted=True, reasons=[])


def _verify(script: Path, **options):
    options = {"device": "cpu", "steps": 12, "warmup": 2, "seeds": 1, "converter": _same_code(script), **options}
    return verify_scripts([script], **options)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")  # a zombie is dead
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


class _Hang(Exception):
    pass


@needs_torch
@pytest.mark.skipif(os.name != "posix", reason="process groups")
def test_item_10_a_grandchild_holding_stdout_neither_hangs_verify_nor_outlives_it(tmp_path):
    pids = tmp_path / "pids"
    script = tmp_path / "logger.py"
    script.write_text(
        f"import subprocess\nlogger = subprocess.Popen(['sleep', '400'])\n"
        f"open({str(pids)!r}, 'a').write(f'{{logger.pid}}\\n')\n" + TRAIN
    )

    def hang(*_):
        raise _Hang

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(150)  # the sleeps last 400 s: verify waiting for them is the bug
    try:
        report = _verify(script)
    except _Hang:
        pytest.fail("verify waited for the grandchild that holds its output")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

    [result] = report.results
    assert len(result.fp32[0].losses) == 12 and len(result.amp[0].losses) == 12
    started = [int(line) for line in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in started), "the run's process group was not killed"


@needs_torch
def test_item_11_a_run_past_the_timeout_is_not_run_timed_out(tmp_path):
    script = tmp_path / "waits.py"
    script.write_text("import torch\nwhile True:\n    pass  # a download that never comes\n")

    report = _verify(script, timeout=4)

    [result] = report.results
    assert result.status == NOT_RUN and report.exit_code == 4
    assert result.reasons == ["timed out: the fp32 run was stopped after 4 s (--timeout)"]
    assert "before its first training step" in result.crash


@needs_torch
def test_item_12_a_huge_output_line_costs_a_bounded_amount_of_memory(tmp_path):
    script = tmp_path / "chatty.py"
    script.write_text("import sys\nsys.stdout.write('x' * 40_000_000 + '\\n')\nsys.stdout.flush()\n" + TRAIN)

    tracemalloc.start()
    try:
        report = _verify(script)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    [result] = report.results
    assert len(result.fp32[0].losses) == 12
    assert peak < 8_000_000, f"verify held {peak:,} bytes for a 40 MB line"


@needs_torch
def test_item_16_a_script_that_leaves_with_os_exit_after_some_steps_is_not_said_to_crash_before_a_step(tmp_path):
    script = tmp_path / "leaves.py"
    script.write_text(TRAIN + "    if step == 5:\n        import os\n        os._exit(0)\n")

    report = _verify(script, steps=20)

    [result] = report.results
    assert result.status == NOT_RUN
    [reason] = result.reasons
    assert reason.startswith("the fp32 run exited without writing its result (exit code 0); steps unknown"), reason
    assert "before its first training step" not in reason


@needs_torch
def test_item_19_a_script_and_a_module_with_a_coding_cookie_are_read_as_python_reads_them(tmp_path):
    cookie = "# -*- coding: latin-1 -*-\n"
    (tmp_path / "names.py").write_bytes((cookie + "CAFE = 'café'\n").encode("latin-1"))
    script = tmp_path / "cafe.py"
    body = cookie + "import names\nassert names.CAFE == 'caf\\xe9' and LOCAL == 'caf\\xe9', (names.CAFE, LOCAL)\n"
    script.write_bytes((body.replace("import names", "import names\nLOCAL = 'café'") + TRAIN).encode("latin-1"))

    def convert(source, **_):  # both files come in as text, and go back with their own cookie
        assert "café" in source
        return SimpleNamespace(code=source.replace("lr=0.05", "lr=0.05 "), converted=True, reasons=[])

    report = _verify(script, converter=convert)

    [result] = report.results
    assert result.crash is None, result.crash
    assert result.converted_modules == ["names"]
    assert len(result.fp32[0].losses) == 12 and len(result.amp[0].losses) == 12


def _guard(tmp_path: Path, script: str, *options: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "scripts" / "train.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(script))
    command = [sys.executable, "-m", "amp_lint.guard", *options, str(path)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd or tmp_path, env=ENV, timeout=120)


@needs_torch
def test_item_17_the_guard_keeps_the_exit_message_reports_an_os_exit_and_ignores_a_torch_py_in_the_current_folder(tmp_path):
    # The script's own exit message, as `python train.py` prints it.
    done = _guard(tmp_path, "import sys\nsys.exit('fatal: bad config')\n")
    assert done.returncode == 1 and done.stderr.rstrip().endswith("fatal: bad config"), done.stderr

    # os._exit skips every `finally`: the summary and the report are still written, and say how it ended.
    report = tmp_path / "guard.json"
    done = _guard(tmp_path, "import os\nos._exit(0)\n", "--report", str(report))
    assert "ended with os._exit(0)" in done.stderr, done.stderr
    assert json.loads(report.read_text()) == {"mode": "warn", "complete": True, "ending": "os._exit(0)", "violations": []}

    # A run killed outright leaves a report that says it is not complete (written at the start).
    done = _guard(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "--report", str(report))
    assert done.returncode == -signal.SIGKILL
    assert json.loads(report.read_text())["complete"] is False

    # A torch.py in the current folder is not torch (`python train.py` would not import it either).
    (tmp_path / "torch.py").write_text("raise SystemExit('the torch.py of the current folder was imported')\n")
    done = _guard(tmp_path, "import torch\nprint(torch.__file__)\n")
    assert done.returncode == 0, done.stderr
    assert "site-packages" in done.stdout or "dist-packages" in done.stdout, done.stdout


# --- the language server ----------------------------------------------------------------------------------------

from tests.test_server_manners import INITIALIZE, Wire, frame, notification, request  # noqa: E402


def test_item_13_a_request_whose_params_do_not_validate_gets_an_invalid_params_error():
    wire = Wire()
    try:
        wire.send(frame(INITIALIZE) + frame(notification("initialized", {})))
        assert "capabilities" in wire.answer(1)["result"]
        for msg_id, (method, params) in enumerate(
            [("textDocument/hover", {}), ("textDocument/hover", None), ("textDocument/codeAction", [1, 2, 3])], start=2
        ):
            wire.send(frame(request(msg_id, method, params)))
            answer = wire.answer(msg_id, timeout=30)
            assert answer["error"]["code"] == -32602 and method in answer["error"]["message"], answer
        wire.send(frame(notification("textDocument/didOpen", {})))  # a notification: no answer, no harm
        assert wire.close() == 0
    finally:
        wire.kill()


def test_item_20_code_actions_are_versioned_document_changes_when_the_client_takes_them(tmp_path):
    uri = (tmp_path / "old_scaler.py").as_uri()
    text = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    opened = {"textDocument": {"uri": uri, "languageId": "python", "version": 7, "text": text}}
    asked = {
        "textDocument": {"uri": uri},
        "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}},
        "context": {"diagnostics": []},
    }
    for takes_them in (True, False):
        capabilities = {"workspace": {"workspaceEdit": {"documentChanges": takes_them}}}
        wire = Wire()
        try:
            wire.send(frame(request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": capabilities})))
            wire.answer(1)
            wire.send(frame(notification("initialized", {})) + frame(notification("textDocument/didOpen", opened)))
            wire.send(frame(request(2, "textDocument/diagnostic", {"textDocument": {"uri": uri}})))
            [found] = wire.answer(2)["result"]["items"]
            wire.send(frame(request(3, "textDocument/codeAction", {**asked, "range": found["range"], "context": {"diagnostics": [found]}})))
            actions = wire.answer(3)["result"]
            quick = next(action for action in actions if action["kind"] == "quickfix" and "noqa" not in action["title"])
            if takes_them:
                [change] = quick["edit"]["documentChanges"]
                assert change["textDocument"] == {"uri": uri, "version": 7} and change["edits"]
                assert "changes" not in quick["edit"]
            else:
                assert list(quick["edit"]["changes"]) == [uri] and "documentChanges" not in quick["edit"]
            assert wire.close() == 0
        finally:
            wire.kill()
