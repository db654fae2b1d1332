"""Daily use, round four (issue 44), items 1-8: wrong results and wrong fixes, each through the real command in a
temporary folder. The same shapes are held-out cases in the golden fixtures (`fixtures/convert/`,
`fixtures/check/`, `fixtures/fix/`, `fixtures/project/torch_from_requirements/`), in their own words.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from test_daily_use import amp_lint, write

CONVERT = ("--isolated", "--no-cache", "--select", "AMP100", "--fix", "--unsafe-fixes")


def _concise(folder: Path, *args: str) -> list:
    result = amp_lint("--isolated", "--no-cache", "--output-format", "concise", *args, cwd=folder)
    assert result.returncode in (0, 1), result.stderr
    return [line for line in result.stdout.splitlines() if ": AMP" in line]


def _runs(path: Path) -> None:
    """The fixed script runs on the CPU (float16 autocast and GradScaler("cpu") work there)."""
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


# --- 1: a model from a call the analysis cannot see into is on an unknown device ------------------------

FACTORY_LOOP = '''import torch
import torch.nn as nn

from mylib.modeling import build_model


def train(cfg, loader):
    model = build_model(cfg)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for images, targets in loader:
        loss = criterion(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_1_a_factory_built_model_converts_for_cuda_not_cpu(tmp_path):
    write(tmp_path, {"train.py": FACTORY_LOOP})
    assert amp_lint(*CONVERT, "train.py", cwd=tmp_path).returncode == 0
    converted = (tmp_path / "train.py").read_text()
    # `build_model` may move the model anywhere (detectron2's: to cfg.MODEL.DEVICE, "cuda" by default): not
    # proved on the CPU, so the documented default; "cpu" would switch AMP off on a GPU.
    assert 'torch.amp.GradScaler("cuda")' in converted and 'autocast("cuda"' in converted, converted
    assert '"cpu"' not in converted
    # A model built here (and never moved) is proved on the CPU: that conversion stays as it was.
    built_here = FACTORY_LOOP.replace("from mylib.modeling import build_model\n", "").replace(
        "build_model(cfg)", "nn.Linear(4, 2)"
    )
    write(tmp_path, {"local.py": built_here})
    assert amp_lint(*CONVERT, "local.py", cwd=tmp_path).returncode == 0
    assert 'torch.amp.GradScaler("cpu")' in (tmp_path / "local.py").read_text()
    # A model handed in by a caller no file shows is as unknown: CUDA too.
    handed_in = built_here.replace("def train(cfg, loader):\n    model = nn.Linear(4, 2)\n", "def train(model, loader):\n")
    write(tmp_path, {"param.py": handed_in})
    assert amp_lint(*CONVERT, "param.py", cwd=tmp_path).returncode == 0
    assert 'torch.amp.GradScaler("cuda")' in (tmp_path / "param.py").read_text()


# --- 2: requirements*.txt wherever the project root is ---------------------------------------------------

DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"


@pytest.mark.parametrize("marker", [None, ".git", "setup.py", "setup.cfg", "environment.yml"])
def test_2_requirements_txt_gives_target_torch_without_a_pyproject(tmp_path, marker):
    write(tmp_path, {"requirements.txt": "numpy\ntorch>=1.7.0\n", "src/train.py": DEPRECATED})
    if marker == ".git":
        (tmp_path / ".git").mkdir()
    elif marker is not None:
        write(tmp_path, {marker: ""})
    shown = amp_lint("--show-settings", "src/train.py", cwd=tmp_path)
    assert 'target-torch = "1.7"' in shown.stdout, shown.stdout
    # torch.amp.GradScaler("cuda", ...) is new in 2.3: nothing to suggest, no safe fix that writes it.
    result = amp_lint("--no-cache", "--fix", "src/train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "src" / "train.py").read_text() == DEPRECATED


def test_2_a_nested_requirements_file_without_torch_is_not_the_project(tmp_path):
    write(tmp_path, {
        "requirements.txt": "torch>=1.7.0\n",
        "docs/requirements.txt": "sphinx\n",
        "docs/conf_train.py": DEPRECATED,
    })
    shown = amp_lint("--show-settings", "docs/conf_train.py", cwd=tmp_path)
    assert 'target-torch = "1.7"' in shown.stdout, shown.stdout


# --- 3: a class-based trainer's save()/load() get the scaler ----------------------------------------------

TRAINER = '''import torch
from torch import nn


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_epoch(self):
        for x, y in self.loader:
            loss = nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    def save(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)

    def load(self, path):
        state = torch.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
'''


def test_3_class_trainer_conversion_checkpoints_the_scaler(tmp_path):
    write(tmp_path, {"trainer.py": TRAINER})
    # Before the conversion's scaler exists, AMP080's advice names the scaler and checkpoint as written.
    assert amp_lint(*CONVERT, "--amp-device", "cpu", "trainer.py", cwd=tmp_path).returncode == 0
    converted = (tmp_path / "trainer.py").read_text()
    assert '"scaler": self.scaler.state_dict()' in converted, converted
    assert 'if "scaler" in state:\n            self.scaler.load_state_dict(state["scaler"])' in converted
    assert _concise(tmp_path, "--select", "AMP080", "trainer.py") == []


def test_3_amp080_names_the_scaler_and_the_checkpoint_as_the_code_spells_them(tmp_path):
    source = TRAINER.replace(
        "        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        '        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n        self.scaler = torch.amp.GradScaler("cuda")\n',
    )
    write(tmp_path, {"trainer.py": source})
    found = _concise(tmp_path, "--select", "AMP080", "trainer.py")
    assert len(found) == 2, found
    assert 'add "scaler": self.scaler.state_dict()' in found[0]
    assert 'add `self.scaler.load_state_dict(state["scaler"])` (guarded by `if "scaler" in state`)' in found[1]



def test_3_amp080_is_shown_among_the_defaults_and_a_guarded_restore_counts(tmp_path):
    # Issue 46: AMP080's findings are proved (shown without --show-assumed or --select).
    with_scaler = TRAINER.replace(
        "        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        '        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n        self.scaler = torch.amp.GradScaler("cuda")\n',
    )
    write(tmp_path, {"trainer.py": with_scaler})
    assert [line.split()[1] for line in _concise(tmp_path, "trainer.py")].count("AMP080") == 2
    # A restore guarded by `if "scaler" in state` is a restore, in a file that saves nothing as in one that does.
    restores_only = with_scaler.replace(
        '        self.optimizer.load_state_dict(state["optimizer"])\n',
        '        self.optimizer.load_state_dict(state["optimizer"])\n'
        '        if "scaler" in state:\n            self.scaler.load_state_dict(state["scaler"])\n',
    ).replace(
        '        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)\n',
        '        torch.save({"model": self.model.state_dict()}, path)\n',
    )
    write(tmp_path, {"trainer.py": restores_only})
    assert _concise(tmp_path, "--select", "AMP080", "trainer.py") == []
    # A file that hands its scaler to a call (a checkpoint helper may save it) is left alone.
    handed_on = with_scaler.replace("    def save(self, path):\n", "    def save(self, path):\n        keep(self.scaler)\n")
    write(tmp_path, {"trainer.py": handed_on})
    assert _concise(tmp_path, "--select", "AMP080", "trainer.py") == []

# --- 4: a GradScaler built and never used is no scaler for the loss ----------------------------------------

UNUSED_SCALER = '''import torch
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler()
for x, y in loader:
    with autocast(dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
'''


def test_4_an_unused_grad_scaler_does_not_silence_amp010(tmp_path):
    write(tmp_path, {"train.py": UNUSED_SCALER})
    found = _concise(tmp_path, "train.py")
    assert any(":8:5: AMP010 " in line and "never scales it" in line for line in found), found
    # Only its own methods called elsewhere (`get_scale()`): still no scaler for this loss.
    logged = UNUSED_SCALER.replace("scaler = GradScaler()\n", "scaler = GradScaler()\nprint(scaler.get_scale())\n")
    write(tmp_path, {"logged.py": logged})
    assert [line for line in _concise(tmp_path, "logged.py") if "AMP010" in line]
    # Handed to something that may use it, or used in this loop: silent, as before.
    handed = UNUSED_SCALER.replace("scaler = GradScaler()\n", "scaler = GradScaler()\nopt = AmpOptimizer(opt, scaler)\n")
    write(tmp_path, {"handed.py": handed})
    assert not [line for line in _concise(tmp_path, "handed.py") if "AMP010" in line]
    used = UNUSED_SCALER.replace("    loss.backward()\n    opt.step()\n", "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n")
    write(tmp_path, {"used.py": used})
    assert not [line for line in _concise(tmp_path, "used.py") if "AMP010" in line]


# --- 5: a clip of scaled gradients before a direct step ------------------------------------------------------

DIRECT_STEP = '''import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
for x, y in data:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    opt.step()
    scaler.update()
    opt.zero_grad()
'''


def test_5_amp030_reports_a_clip_before_a_direct_step_and_amp020_fix_unscales(tmp_path):
    write(tmp_path, {"train.py": DIRECT_STEP})
    codes = [line.split()[1] for line in _concise(tmp_path, "train.py")]
    assert codes == ["AMP030", "AMP020", "AMP022"], codes
    result = amp_lint("--isolated", "--no-cache", "--select", "AMP020", "--fix", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = (tmp_path / "train.py").read_text()
    expected = DIRECT_STEP.replace(
        "    torch.nn.utils.clip_grad_value_", "    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_value_"
    ).replace("    opt.step()\n", "    scaler.step(opt)\n")
    assert fixed == expected, fixed
    assert _concise(tmp_path, "train.py") == []
    _runs(tmp_path / "train.py")


# --- 6: accumulation inside `if accum > 1: ... else: ...` --------------------------------------------------

ACCUMULATION_BRANCH = '''import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
accum = 2
scaler = torch.amp.GradScaler("cpu")
for i, (x, y) in enumerate(data):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y) / accum
    if accum > 1:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
'''


def test_6_accumulation_in_a_branch_keeps_amp041_and_its_fix(tmp_path):
    write(tmp_path, {"train.py": ACCUMULATION_BRANCH})
    found = _concise(tmp_path, "train.py")
    assert [line.split(": ", 1)[1].split()[0:2] for line in found] == [["AMP041", "[*]"], ["AMP041", "[*]"]], found
    assert "waits for `if (i + 1) % accum == 0`" in found[0] and "partial, still-scaled gradient sums" in found[1]
    result = amp_lint("--isolated", "--no-cache", "--fix", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _concise(tmp_path, "train.py") == []
    _runs(tmp_path / "train.py")  # before the fix: RuntimeError 'unscale_() has already been called'


# --- 7: a loop that steps each optimizer is a step ---------------------------------------------------------

MULTI_OPTIMIZER = '''import torch

scaler = torch.amp.GradScaler("cuda")
for epoch in range(epochs):
    for input, target in data:
        for opt in optimizers:
            opt.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss0 = loss_fn(model0(input), target)
            loss1 = loss_fn(model1(input), target)
        scaler.scale(loss0).backward(retain_graph=True)
        scaler.scale(loss1).backward()
{guard}        for opt in optimizers:
{inner}            scaler.step(opt)
        scaler.update()
'''


def test_7_stepping_each_optimizer_in_a_loop_is_a_step(tmp_path):
    for name, guard in (("plain", ""), ("guarded", "        if not torch.isfinite(loss0):\n            continue\n")):
        write(tmp_path, {f"{name}.py": MULTI_OPTIMIZER.format(guard=guard, inner="")})
        result = amp_lint("--isolated", "--no-cache", "--select", "AMP022", f"{name}.py", cwd=tmp_path)
        assert result.returncode == 0 and "All checks passed!" in result.stdout, result.stdout
    # A pass that skips its optimizer's step (and not the update): still a finding, whose condition is the
    # one the step runs under, and no fix is counted that would change nothing.
    skipping = MULTI_OPTIMIZER.format(guard="", inner="            if opt is None:\n                continue\n")
    write(tmp_path, {"skipping.py": skipping})
    result = amp_lint("--isolated", "--no-cache", "--select", "AMP022", "skipping.py", cwd=tmp_path)
    assert result.returncode == 1 and "only where `opt is None` is false" in result.stdout, result.stdout
    assert "fixable" not in result.stdout
    fixed = amp_lint("--isolated", "--no-cache", "--select", "AMP022", "--fix", "--unsafe-fixes", "skipping.py", cwd=tmp_path)
    assert fixed.returncode == 1 and "not fixed" not in fixed.stdout + fixed.stderr, fixed.stdout + fixed.stderr


# --- 8: a backslash continuation moves with its statement ---------------------------------------------------

CONTINUED = '''import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
for x, y in data:
    output = model(x)
    loss = torch.nn.functional.mse_loss(output, y) + \\
        0.01 * output.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


def test_8_a_backslash_continuation_is_reindented_into_the_autocast_block(tmp_path):
    write(tmp_path, {"train.py": CONTINUED})
    assert amp_lint(*CONVERT, "train.py", cwd=tmp_path).returncode == 0
    converted = (tmp_path / "train.py").read_text()
    assert "        loss = torch.nn.functional.mse_loss(output, y) + \\\n            0.01 * output" in converted, converted
    loop = ast.parse(converted).body[-1]
    with_block = loop.body[0]
    assert isinstance(with_block, ast.With) and len(with_block.body) == 2
    _runs(tmp_path / "train.py")
