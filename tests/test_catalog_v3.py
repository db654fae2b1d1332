"""Catalog v3 (issue 30, with issue 28 items 15 and 18, issue 26 principle 4, issue 29 items 20 and 22):
behaviour beyond the rules' own examples, run through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path


def amp_lint(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "amp_lint", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def findings(result: subprocess.CompletedProcess):
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


DOUBLE_SCALE = """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    loss = loss_fn(model(x), y)
    scaler.scale(scaler.scale(loss)).backward()
    scaler.step(optimizer)
    scaler.update()
"""


# --- preview mode (issue 28, item 15) ---------------------------------------------------------------


def test_a_preview_rule_runs_only_in_preview_mode(tmp_path):
    write(tmp_path, "train.py", DOUBLE_SCALE)
    for selection in ((), ("--select", "ALL"), ("--select", "AMP034"), ("--extend-select", "AMP03"), ("--preview", "--no-preview")):
        result = amp_lint("--no-cache", "--isolated", "--output-format", "json", *selection, "train.py", cwd=tmp_path)
        assert [f["code"] for f in findings(result)] == [], selection
    result = amp_lint("--no-cache", "--isolated", "--output-format", "json", "--preview", "train.py", cwd=tmp_path)
    assert [f["code"] for f in findings(result)] == ["AMP034"]
    assert result.returncode == 1


def test_preview_from_the_configuration_and_its_fix(tmp_path):
    (tmp_path / "amp-lint.toml").write_text("preview = true\n")
    path = write(tmp_path, "train.py", DOUBLE_SCALE)
    result = amp_lint("--no-cache", "--output-format", "json", "train.py", cwd=tmp_path)
    assert [f["code"] for f in findings(result)] == ["AMP034"]
    assert "preview = true" in amp_lint("--show-settings", cwd=tmp_path).stdout
    amp_lint("--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert "scaler.scale(loss).backward()" in path.read_text()
    # `--no-preview` beats the configuration.
    path.write_text(textwrap.dedent(DOUBLE_SCALE))
    result = amp_lint("--no-cache", "--output-format", "json", "--no-preview", "train.py", cwd=tmp_path)
    assert findings(result) == []
    (tmp_path / "amp-lint.toml").write_text('preview = "yes"\n')
    bad = amp_lint("train.py", cwd=tmp_path)
    assert bad.returncode == 2 and "preview" in bad.stderr and "Traceback" not in bad.stderr


def test_the_rule_page_says_a_rule_is_in_preview(tmp_path):
    page = (Path(__file__).resolve().parents[1] / "docs" / "rules" / "AMP034.md").read_text()
    assert "preview" in page.lower()
    result = amp_lint("rule", "AMP034", cwd=tmp_path)
    assert result.returncode == 0 and "## Preview" in result.stdout


# --- assumed findings of a rule selected by name (issue 30, item 6) ---------------------------------

# AMP092 without a readable DeepSpeed config rests on an assumption (AMP092 served here until issue 46 made
# its findings proved and on by default).
ASSUMED_ONLY = """
import deepspeed, torch
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
with torch.autocast("cuda", dtype=torch.float16):
    loss = engine(batch)
"""


def test_a_rule_selected_by_code_or_all_shows_its_assumed_findings(tmp_path):
    write(tmp_path, "train.py", ASSUMED_ONLY)
    for selection in (("--select", "AMP092"), ("--select", "ALL"), ("--extend-select", "AMP092")):
        result = amp_lint("--no-cache", "--isolated", "--output-format", "json", *selection, "train.py", cwd=tmp_path)
        assert [f["code"] for f in findings(result)] == ["AMP092"], selection
    # A prefix is not a name: only proved findings, unless --show-assumed.
    result = amp_lint("--no-cache", "--isolated", "--output-format", "json", "--select", "AMP09", "train.py", cwd=tmp_path)
    assert findings(result) == []
    result = amp_lint(
        "--no-cache", "--isolated", "--output-format", "json", "--select", "AMP09", "--show-assumed", "train.py", cwd=tmp_path
    )
    assert [f["code"] for f in findings(result)] == ["AMP092"]
    # Ignored after ALL: off.
    result = amp_lint(
        "--no-cache", "--isolated", "--output-format", "json", "--select", "ALL", "--ignore", "AMP092", "train.py", cwd=tmp_path
    )
    assert findings(result) == []


def test_assumed_findings_stay_hidden_among_the_defaults(tmp_path):
    # AMP092's finding without a readable DeepSpeed config rests on an assumption: hidden by default,
    # shown when AMP092 is selected by name.
    write(
        tmp_path,
        "train.py",
        """
        import deepspeed, torch
        engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = engine(batch)
        """,
    )
    result = amp_lint("--no-cache", "--isolated", "--output-format", "json", "train.py", cwd=tmp_path)
    assert findings(result) == []
    result = amp_lint("--no-cache", "--isolated", "--output-format", "json", "--select", "AMP092", "train.py", cwd=tmp_path)
    assert [f["code"] for f in findings(result)] == ["AMP092"]


# --- issue 29, items 20 and 22 ------------------------------------------------------------------------


def test_partial_of_torch_autocast_called_with_the_device_is_no_internal_error(tmp_path):
    write(
        tmp_path,
        "train.py",
        """
        import torch
        from functools import partial
        ac = partial(torch.autocast, dtype=torch.float16)
        def step(model, x):
            with ac("cuda"):
                loss = model(x).sum()
                loss.backward()
        """,
    )
    result = amp_lint("--no-cache", "--isolated", "--select", "ALL", "--output-format", "json", "train.py", cwd=tmp_path)
    assert "internal error" not in result.stdout + result.stderr
    # The merged call is read as functools.partial does: device "cuda", dtype float16.
    assert "AMP001" in [f["code"] for f in findings(result)]


def test_amp001_under_a_decorated_function_is_not_shown_fixable(tmp_path):
    path = write(
        tmp_path,
        "train.py",
        """
        import torch
        @torch.autocast("cuda")
        def step(model, x, optimizer):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).sum()
                loss.backward()
            optimizer.step()
        """,
    )
    result = amp_lint("--no-cache", "--isolated", "--select", "AMP001", "--output-format", "json", "train.py", cwd=tmp_path)
    assert [(f["code"], f["fix"]) for f in findings(result)] == [("AMP001", None)]
    before = path.read_text()
    fixed = amp_lint("--no-cache", "--isolated", "--select", "AMP001", "--fix", "train.py", cwd=tmp_path)
    assert "not fixed" not in fixed.stdout + fixed.stderr
    assert path.read_text() == before


# --- Transformer Engine and Accelerate renames, from the project's own requirements (issue 30, item 2) ---

TE_SOURCE = """
import transformer_engine.pytorch as te
from accelerate.utils import FP8RecipeKwargs
with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
    out = model(x)
kwargs = FP8RecipeKwargs(backend="te")
"""


def test_framework_renames_follow_the_projects_requirement_of_each_package(tmp_path):
    write(tmp_path, "train.py", TE_SOURCE)

    def reported(dependencies):
        (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "p"\ndependencies = {json.dumps(dependencies)}\n')
        result = amp_lint("--no-cache", "--preview", "--select", "AMP095", "--output-format", "json", "train.py", cwd=tmp_path)
        return sorted(f["message"].split("`")[3] for f in findings(result))

    assert reported([]) == ["FP8RecipeKwargs", "fp8_autocast"]
    assert reported(["transformer-engine[pytorch]>=2.9", "accelerate>=1.4"]) == ["FP8RecipeKwargs", "fp8_autocast"]
    # Releases without the new names: nothing to suggest for that package.
    assert reported(["transformer_engine>=2.8"]) == ["FP8RecipeKwargs"]
    assert reported(["Transformer.Engine~=2.1", "accelerate>=1.3,<2"]) == []
    shown = amp_lint("--show-settings", cwd=tmp_path)
    assert "accelerate>=1.3" in shown.stdout


# --- DeepSpeed engine under a user autocast, its config read (issue 30, item 1) -----------------------

DEEPSPEED_TRAIN = """
import deepspeed, torch
def train(args, model, loader):
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, config="ds_config.json")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
"""


def test_amp092_reads_a_json_config_of_the_project(tmp_path):
    write(tmp_path, "train.py", DEEPSPEED_TRAIN)

    def codes(config):
        (tmp_path / "ds_config.json").write_text(json.dumps(config))
        result = amp_lint("--isolated", "--output-format", "json", "train.py", cwd=tmp_path)
        return [f["code"] for f in findings(result)]

    assert codes({"bf16": {"enabled": True}}) == ["AMP092"]  # proved: shown among the defaults
    assert codes({"train_batch_size": 8}) == ["AMP092"]  # no torch_autocast: DeepSpeed >= 0.17.2 asserts
    assert codes({"torch_autocast": {"enabled": True}}) == []
    assert codes({"bf16": {"enabled": "auto"}}) == []  # filled in by a launcher: an assumption only
    (tmp_path / "ds_config.json").write_text("{not json")
    assert codes({}) == ["AMP092"]  # (rewritten: valid again) the cache follows the side file
    (tmp_path / "ds_config.json").write_text("{not json")
    result = amp_lint("--isolated", "--output-format", "json", "train.py", cwd=tmp_path)
    assert findings(result) == []
    (tmp_path / "ds_config.json").unlink()
    result = amp_lint("--isolated", "--output-format", "json", "--show-assumed", "train.py", cwd=tmp_path)
    assert [f["code"] for f in findings(result)] == ["AMP092"]


# --- AMP003 says what the targeted torch does (issue 30, item 3) ----------------------------------------

COMPILED = """
import torch
model = torch.compile(model)
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x).sum()
scaler.scale(loss).backward()
"""


def test_amp003_message_follows_the_targeted_torch(tmp_path):
    write(tmp_path, "train.py", COMPILED)

    def message(*args):
        result = amp_lint("--no-cache", "--isolated", "--select", "AMP003", "--output-format", "json", *args, "train.py", cwd=tmp_path)
        (finding,) = findings(result)
        return finding["message"]

    latest = message()
    assert '"same_as_forward"' in latest and '"off"' in latest and "moving the default" in latest
    old = message("--target-torch", "2.4")
    assert "2.4" in old and "cannot be told otherwise" in old and "hasattr" in old
    assert message("--target-torch", "2.9") == latest


def test_every_rule_selected_by_code_shows_its_documented_examples():
    # Issue 30, item 6: with the rule selected by its code (what `assumed_shown_for` carries), each invalid
    # example is reported without --show-assumed, including AMP042, AMP051 and AMP060's.
    from amp_lint.engine.checker import Checker
    from amp_lint.rules import ALL_RULES

    for rule in ALL_RULES:
        options = {"preview": True, "assumed_shown_for": frozenset({rule.code})}
        checker = Checker(frozenset({rule.code}), rule_options=options)
        for example in rule.invalid:
            result = checker.check(textwrap.dedent(example.code), "example.py")
            codes = [d.code for d in result.diagnostics]
            assert codes == [rule.code] * example.count, (rule.code, example.code, codes)


def test_a_fix_marked_preview_is_offered_only_in_preview_mode(monkeypatch):
    from amp_lint.engine.checker import Checker
    from amp_lint.rules import rule_by_code

    monkeypatch.setattr(rule_by_code("AMP072"), "preview_fix", True)
    source = 'import torch\nscaler = torch.cuda.amp.GradScaler(enabled=use_amp)\n'
    stable = Checker(frozenset({"AMP072"})).check(source, "t.py")
    assert [(d.code, d.fix) for d in stable.diagnostics] == [("AMP072", None)]
    preview = Checker(frozenset({"AMP072"}), rule_options={"preview": True}).check(source, "t.py")
    assert [d.code for d in preview.diagnostics] == ["AMP072"] and preview.diagnostics[0].fix is not None
