"""Issue 44 ("Daily use, round four"), the runtime items: verify's report (12, 13, 21) and the language server's
syntax errors (16) and first diagnostics (17). One test per item, named for it."""

from __future__ import annotations

import math
from pathlib import Path

from click.testing import CliRunner

from amp_lint.verify import EQUIVALENT, INCONCLUSIVE, RunRecord, ScriptResult, VerifyReport, format_text, judge, runner
from amp_lint.verify import cli as verify_cli


def _record(losses=None, parts=None):
    if parts is not None:
        losses = [sum(step) for step in parts]
    autocast = [{"device_type": "cpu", "dtype": "float16", "enabled": True}]
    each = {"loss_parts": parts} if parts is not None else {}
    return RunRecord("ok", losses=list(losses), autocast=autocast, device="cpu", **each)


def _curve(seed, *, rate=0.05, steps=60, offset=0.0, rising=False):
    shape = (lambda step: 1 - math.exp(-rate * step)) if rising else (lambda step: math.exp(-rate * step))
    return [(1.0 + 0.1 * seed) * shape(step) + offset + 0.02 * math.sin(7.3 * step + seed) for step in range(steps)]


def _judged(fp32, amp):
    result = ScriptResult(Path("gan.py"), None, fp32=fp32, amp=amp)
    judge(result, warmup=5, tolerance=3.0, dtype="float16")
    return result


def test_item_12_parted_at_is_not_shown_beside_an_equivalent_verdict_and_the_tolerance_help_gives_the_real_band():
    # A curve that leaves the band at one step and comes back: its mean gap is inside, so the verdict is equivalent.
    fp32 = [_record(_curve(seed)) for seed in range(3)]
    amp = [_record([loss + (0.05 if step == 30 else 0.0) for step, loss in enumerate(_curve(seed))]) for seed in range(3)]
    result = _judged(fp32, amp)
    assert result.status == EQUIVALENT and result.judgement.parted_at is not None

    report = VerifyReport("cpu", "float16", 60, 5, 3, 3.0, [result], notes=[])
    header, _, row = format_text(report).splitlines()[:3]
    parted = header.index("parted at")
    assert row[parted : parted + len("parted at")].strip() == "-", row
    assert "The verdict is judged on the mean gap" in format_text(report)

    help_text = " ".join(CliRunner().invoke(verify_cli.verify, ["--help"]).output.split())
    assert "at least 1% of the loss" not in help_text
    assert "at least 0.15% (float16) or 1.2% (bfloat16) of the loss" in help_text


def test_item_13_an_adversarial_pair_whose_sum_does_not_fall_is_judged_loss_by_loss_against_its_fp32_twin():
    # A GAN: the discriminator's loss falls while the generator's rises; their sum stays flat.
    def parts(seed, shift=0.0):
        return [[d, g + shift] for d, g in zip(_curve(seed), _curve(seed, rising=True))]

    fp32 = [_record(parts=parts(seed)) for seed in range(3)]

    same = _judged(fp32, [_record(parts=parts(seed)) for seed in range(3)])
    assert same.status == EQUIVALENT, same.reasons
    assert same.judgement.judged_on.startswith("each of the 2 losses backpropagated in each training step, against its fp32 twin")
    assert "judged on: each of the 2 losses" in format_text(VerifyReport("cpu", "float16", 60, 5, 3, 3.0, [same], []))

    # The generator's loss 3% higher in every AMP run and the discriminator's 3% lower: the sum hides it. A loss
    # beyond its own band while the sum is within its band is not conclusive (a right conversion's discriminator
    # drifts as far in a chaotic GAN): never "not equivalent" on that alone.
    apart = [[[d - 0.03, g + 0.03] for d, g in step_parts] for step_parts in (parts(seed) for seed in range(3))]
    moved = _judged(fp32, [_record(parts=p) for p in apart])
    assert moved.status == INCONCLUSIVE, moved.reasons
    assert moved.reasons[0].startswith("loss 1 of 2 (the first backpropagated in a step): its AMP curve is")

    # Several losses whose sum falls (a two-loss model, micro-batches): judged on the sum, as before, and said so.
    falling = [_record(parts=[[a, b] for a, b in zip(_curve(seed), _curve(seed, rate=0.03))]) for seed in range(3)]
    summed = _judged(falling, [_record(parts=r.loss_parts) for r in falling])
    assert summed.status == EQUIVALENT
    assert summed.judgement.judged_on == "the sum of the 2 losses backpropagated in each training step"

    # One loss per step: which one is judged is said where it matters (fp32 did not learn).
    flat = [_record([1.0 + 0.001 * math.sin(step + seed) for step in range(60)]) for seed in range(3)]
    assert "its loss (the loss backpropagated in each training step)" in _judged(flat, flat).reasons[0]


def test_item_21_the_default_output_folder_is_ignored_by_git(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = VerifyReport("cpu", "float16", 20, 2, 3, 3.0, [], notes=[], output_dir=tmp_path / "amp-lint-verify")
    monkeypatch.setattr(runner, "verify_scripts", lambda paths, **options: report)

    result = CliRunner().invoke(verify_cli.verify, ["--device", "cpu"])

    assert (tmp_path / "amp-lint-verify" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert f"Per-step losses (CSV) and plots: {tmp_path / 'amp-lint-verify'}" in result.output
    chosen = tmp_path / "mine"
    CliRunner().invoke(verify_cli.verify, ["--device", "cpu", "--output-dir", str(chosen)])
    assert not (chosen / ".gitignore").exists()  # a folder the user names is theirs


# --- the language server ----------------------------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from tests.test_server import ENV  # noqa: E402
from tests.test_server_manners import INITIALIZE, Wire, frame, notification, request  # noqa: E402

BROKEN = "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=use_amp)\nx = f(1,\n"


def _published(wire: Wire, uri: str, timeout: float) -> dict:
    """The next `publishDiagnostics` of `uri` (the answers that come meanwhile are kept)."""
    deadline = time.monotonic() + timeout
    fd = wire.process.stdout.fileno()
    while True:
        header, found, rest = wire.buffer.partition(b"\r\n\r\n")
        if found:
            length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
            if len(rest) >= length:
                message = json.loads(rest[:length])
                wire.buffer = rest[length:]
                if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri:
                    return message["params"]
                if "id" in message and "method" not in message:
                    wire.answers[message["id"]] = message
                continue
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError(f"no diagnostics published for {uri} in {timeout} s")
        chunk = os.read(fd, 65536)
        assert chunk, "the server closed its output"
        wire.buffer += chunk


def _open(wire: Wire, uri: str, text: str) -> None:
    opened = {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}
    wire.send(frame(notification("textDocument/didOpen", opened)))


def test_item_16_the_server_shows_pythons_syntax_error_at_pythons_place_inside_the_document(tmp_path):
    wire = Wire()
    try:
        wire.send(frame(INITIALIZE) + frame(notification("initialized", {})))
        wire.answer(1)
        fine = (tmp_path / "fine.py").as_uri()
        _open(wire, fine, "import torch\nscaler = torch.cuda.amp.GradScaler()\n")
        wire.send(frame(request(2, "textDocument/diagnostic", {"textDocument": {"uri": fine}})))
        assert wire.answer(2)["result"]["items"]  # the engine is loaded: the next document gets the full check
        broken = (tmp_path / "broken.py").as_uri()
        _open(wire, broken, BROKEN)
        wire.send(frame(request(3, "textDocument/diagnostic", {"textDocument": {"uri": broken}})))
        [error] = wire.answer(3)["result"]["items"]
        assert error["message"] == "syntax error: '(' was never closed"
        assert error["range"]["start"] == {"line": 2, "character": 5}  # the `(`, as Python says: 3:6
        assert error["range"]["end"]["line"] < 3  # inside the three-line document
        assert wire.close() == 0
    finally:
        wire.kill()


# The engine's import of LibCST takes a minute: what the server publishes before that needed no engine.
SLOW_LIBCST = """
import sys, time
class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name == "libcst":
            sys.meta_path.remove(self)
            time.sleep(90)
sys.meta_path.insert(0, _Slow())
from amp_lint.cli import main
sys.argv = ["amp-lint", "server"]
main()
"""


class _SlowWire(Wire):
    def __init__(self) -> None:
        command = [sys.executable, "-c", SLOW_LIBCST]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        self.answers, self.buffer = {}, b""


def test_item_17_a_first_result_is_published_before_the_engine_is_loaded(tmp_path):
    wire = _SlowWire()
    try:
        wire.send(frame(INITIALIZE) + frame(notification("initialized", {})))
        wire.answer(1)
        plain = (tmp_path / "plain.py").as_uri()
        _open(wire, plain, "import os\nprint(os.getcwd())\n")  # no name any rule needs: nothing to find
        assert _published(wire, plain, timeout=45)["diagnostics"] == []
        broken = (tmp_path / "broken.py").as_uri()
        _open(wire, broken, BROKEN)
        [error] = _published(wire, broken, timeout=45)["diagnostics"]
        assert error["message"] == "syntax error: '(' was never closed"
    finally:
        wire.kill()
