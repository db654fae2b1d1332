"""The caller search set (`analysis.callers.caller_scan_files`) is walked once per package during a run,
and afresh outside one (the editor's session sees files added meanwhile)."""

from __future__ import annotations

import json

from amp_lint.analysis import callers


def _package(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "engine.py").write_text("import torch\n")
    return package


def test_a_run_walks_each_package_once(tmp_path, monkeypatch):
    package = _package(tmp_path)
    walks = []
    real = callers._scan_files
    monkeypatch.setattr(callers, "_scan_files", lambda root, top: walks.append(top) or real(root, top))
    with callers.remembered_scans():
        first = callers.caller_scan_files(tmp_path, "pkg.engine")
        (package / "late.py").write_text("")  # a run's files do not come or go: the set is kept
        assert callers.caller_scan_files(tmp_path, "pkg.other") == first
        with callers.remembered_scans():  # nested: the outer run's memo is shared
            assert callers.caller_scan_files(tmp_path, "pkg") == first
    assert walks == ["pkg"]
    assert str(package / "late.py") not in first


def test_outside_a_run_every_question_walks_again(tmp_path):
    package = _package(tmp_path)
    before = callers.caller_scan_files(tmp_path, "pkg.engine")
    (package / "late.py").write_text("")
    after = callers.caller_scan_files(tmp_path, "pkg.engine")
    assert str(package / "late.py") not in before
    assert str(package / "late.py") in after


def test_the_cli_run_answers_the_same_with_the_memo(tmp_path):
    from click.testing import CliRunner

    from amp_lint.cli import main

    package = _package(tmp_path)
    for index in range(3):  # several files that name a GradScaler: each asks for the search set
        (package / f"train{index}.py").write_text(
            "import torch\n\n\ndef fit(model, loader, opt):\n"
            "    for epoch in range(3):\n        scaler = torch.amp.GradScaler()\n"
            "        for x in loader:\n            with torch.autocast('cuda'):\n                loss = model(x)\n"
            "            scaler.scale(loss).backward()\n            scaler.step(opt)\n            scaler.update()\n"
        )
    runner = CliRunner()
    first = runner.invoke(main, ["check", "--no-cache", "--output-format", "json", str(package)])
    second = runner.invoke(main, ["check", "--no-cache", "--output-format", "json", str(package / "train1.py")])
    assert first.exit_code == 1 and second.exit_code == 1
    assert callers._SCANS is None  # nothing remembered past the run

    def of_train1(output):
        return sorted(
            (d["code"], d["location"]["row"]) for d in json.loads(output) if d["filename"].endswith("train1.py")
        )

    assert of_train1(first.output) == of_train1(second.output)
    assert ("AMP013", 6) in of_train1(second.output)  # the scaler built once per epoch
