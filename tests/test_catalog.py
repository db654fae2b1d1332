"""Catalog v2 (issue 20): behaviour beyond the rules' own examples, run through the real command line."""

from __future__ import annotations

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


def test_amp050_on_a_branch_cast_is_no_internal_error(tmp_path):
    # Issue 21, item 9: `--select AMP050` on `if c: model.half()` then autocast was an internal error.
    write(
        tmp_path,
        "train.py",
        """
        import torch
        if c:
            model.half()
        with torch.autocast("cuda"):
            out = model(x)
        """,
    )
    for codes in ("AMP050", "AMP057", "AMP050,AMP057"):
        result = amp_lint("--no-cache", "--isolated", "--select", codes, "train.py", cwd=tmp_path)
        assert "internal error" not in result.stdout + result.stderr, result.stdout + result.stderr
        assert result.returncode == (1 if "AMP057" in codes else 0), result.stdout + result.stderr


# --- torch-version shims (issue 16): `--fix` leaves them byte for byte ------------------------------------

SHIMS = {
    # torchrl trainers.py: one name, two imports; the call is written for torch.amp.
    "torchrl_trainers.py": '''
try:
    from torch.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler


class Trainer:
    def __init__(self, optimizer, use_amp=True):
        self.optimizer = optimizer
        self._scaler = GradScaler("cuda", enabled=use_amp)
''',
    # torchrl, both names.
    "torch_amp_import_shim.py": '''
try:
    from torch.amp import GradScaler, autocast
except ImportError:
    from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler("cuda", enabled=True)
with autocast("cuda"):
    loss = model(x)
''',
    # timm utils/cuda.py: the except branch runs only where torch.amp.GradScaler(device) fails.
    "timm_utils_cuda.py": '''
import torch


class NativeScaler:
    state_dict_key = "amp_scaler"

    def __init__(self, device="cuda"):
        try:
            self._scaler = torch.amp.GradScaler(device=device)
        except (AttributeError, TypeError) as e:
            self._scaler = torch.cuda.amp.GradScaler()
''',
    # timm layers/fast_norm.py: old device-specific state functions as the fallback.
    "timm_fast_norm.py": '''
import torch


def get_autocast_dtype(device: str = "cuda"):
    try:
        return torch.get_autocast_dtype(device)
    except (AttributeError, TypeError):
        # dispatch to older device specific fns, only covering cuda/cpu devices here
        if device == "cpu":
            return torch.get_autocast_cpu_dtype()
        else:
            assert device == "cuda"
            return torch.get_autocast_gpu_dtype()


def is_autocast_enabled(device: str = "cuda"):
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:
        if device == "cpu":
            return torch.is_autocast_cpu_enabled()
        else:
            assert device == "cuda"
            return torch.is_autocast_enabled()
''',
    # ultralytics: a version flag picks the spelling, in an expression and in a helper.
    "ultralytics_trainer.py": '''
import torch

TORCH_1_13 = True
TORCH_2_4 = True


def autocast(enabled: bool, device: str = "cuda"):
    if TORCH_1_13:
        return torch.amp.autocast(device, enabled=enabled)
    else:
        return torch.cuda.amp.autocast(enabled)


class BaseTrainer:
    def _setup_train(self):
        self.scaler = (
            torch.amp.GradScaler("cuda", enabled=self.amp) if TORCH_2_4 else torch.cuda.amp.GradScaler(enabled=self.amp)
        )
''',
    # lightning_fabric / pytorch_lightning precision plugins: an `if` on the torch version.
    "lightning_precision.py": '''
import torch
from lightning_fabric.utilities.imports import _TORCH_GREATER_EQUAL_2_4


class MixedPrecision:
    def __init__(self, device="cuda"):
        if _TORCH_GREATER_EQUAL_2_4:
            self.scaler = torch.amp.GradScaler(device)
        else:
            self.scaler = torch.cuda.amp.GradScaler()

    def autocast_context_manager(self):
        if _TORCH_GREATER_EQUAL_2_4:
            return torch.autocast("cuda", dtype=torch.float16)
        return torch.cuda.amp.autocast(dtype=torch.float16)
''',
}


def _fix_leaves_unchanged(tmp_path, name, source, *options):
    path = write(tmp_path, name, source)
    before = path.read_bytes()
    result = amp_lint("--no-cache", "--isolated", "--select", "ALL", "--fix", "--unsafe-fixes", *options, name, cwd=tmp_path)
    assert "internal error" not in result.stdout + result.stderr
    assert path.read_bytes() == before, result.stdout
    return result


import pytest  # noqa: E402


@pytest.mark.parametrize("name", sorted(SHIMS))
def test_fix_leaves_torch_version_shims_unchanged(tmp_path, name):
    result = _fix_leaves_unchanged(tmp_path, name, SHIMS[name])
    for code in ("AMP070", "AMP071", "AMP072", "AMP073", "AMP074", "AMP078", "AMP079"):
        assert code not in result.stdout, result.stdout


def test_import_shim_calls_never_gain_a_second_device(tmp_path):
    # The call that made torchrl raise TypeError: `GradScaler("cuda", "cuda", enabled=True)`.
    result = _fix_leaves_unchanged(tmp_path, "t.py", SHIMS["torch_amp_import_shim.py"])
    assert '"cuda", "cuda"' not in (tmp_path / "t.py").read_text()
    assert result.returncode == 0, result.stdout


def test_a_name_two_imports_bind_to_the_same_thing_is_reported_not_fixed(tmp_path):
    source = '''
try:
    from torch.cuda.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler
scaler = GradScaler(enabled=True)
'''
    result = _fix_leaves_unchanged(tmp_path, "t.py", source)
    assert "AMP072" in result.stdout


# --- target-torch ---------------------------------------------------------------------------------------

DEPRECATED = '''
import torch
scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast():
    loss = model(x)
'''


def _codes(result):
    return sorted({word for line in result.stdout.splitlines() for word in line.split() if word.startswith("AMP0")})


def test_target_torch_from_pyproject_dependencies(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["numpy", "torch>=2.2,<3"]\n')
    write(tmp_path, "train.py", DEPRECATED)
    result = amp_lint("--no-cache", "--output-format", "concise", "train.py", cwd=tmp_path)
    # torch.amp.GradScaler is new in 2.3: nothing to suggest for a project that supports 2.2.
    assert _codes(result) == ["AMP070"], result.stdout
    shown = amp_lint("--show-settings", cwd=tmp_path)
    assert 'target-torch = "2.2"' in shown.stdout


def test_target_torch_from_requirements_beside_the_config(tmp_path):
    (tmp_path / "amp-lint.toml").write_text("select = ['AMP07']\n")
    (tmp_path / "requirements.txt").write_text("# pinned\nnumpy\ntorch==2.1.*\n")
    write(tmp_path, "train.py", DEPRECATED)
    result = amp_lint("--no-cache", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert _codes(result) == ["AMP070"], result.stdout


def test_target_torch_flag_and_key_override_the_project(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = ["torch>=2.2"]\n[tool.amp-lint]\ntarget-torch = "2.4"\n'
    )
    write(tmp_path, "train.py", DEPRECATED)
    result = amp_lint("--no-cache", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert _codes(result) == ["AMP070", "AMP072"], result.stdout
    result = amp_lint("--no-cache", "--output-format", "concise", "--target-torch", "1.12", "train.py", cwd=tmp_path)
    assert _codes(result) == [], result.stdout


def test_target_torch_keeps_an_import_fix_to_names_the_target_has(tmp_path):
    source = '''
from torch.cuda.amp import GradScaler, autocast
scaler = GradScaler()
with autocast():
    loss = model(x)
'''
    result = _fix_leaves_unchanged(tmp_path, "t.py", source, "--target-torch", "2.2")
    assert "AMP070" in result.stdout and "AMP072" not in result.stdout


def test_target_torch_bad_values_are_usage_errors(tmp_path):
    write(tmp_path, "train.py", DEPRECATED)
    result = amp_lint("--target-torch", "latest", "train.py", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (tmp_path / "amp-lint.toml").write_text('target-torch = "two"\n')
    result = amp_lint("train.py", cwd=tmp_path)
    assert result.returncode == 2 and "target-torch" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "amp-lint.toml").write_text("target-torch = 2.3\n")
    result = amp_lint("train.py", cwd=tmp_path)
    assert result.returncode == 2 and "target-torch" in result.stderr and "Traceback" not in result.stderr


def test_amp_lint_rule_names_the_torch_each_replacement_needs(tmp_path):
    for code, version in (("AMP070", "1.13"), ("AMP072", "2.3"), ("AMP073", "2.4"), ("AMP074", "2.4"), ("AMP079", "2.4")):
        result = amp_lint("rule", code, cwd=tmp_path)
        assert "## Torch versions" in result.stdout and version in result.stdout, code


def test_amp003_is_a_suggestion_that_fix_never_applies(tmp_path):
    source = '''
import torch


def train(model, optimizer, loader, scaler):
    model = torch.compile(model)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
'''
    path = write(tmp_path, "train.py", source)
    before = path.read_bytes()
    result = amp_lint("--no-cache", "--isolated", "--select", "AMP003", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert "AMP003" in result.stdout and 'backward_pass_autocast = "off"' in result.stdout, result.stdout
    assert "[*]" not in result.stdout
    assert path.read_bytes() == before
    default = amp_lint("--no-cache", "--isolated", "train.py", cwd=tmp_path)
    assert "AMP003" not in default.stdout


def test_a_device_test_is_not_a_version_test(tmp_path):
    # sentence-transformers: `is_torch_npu_available()` picks a device, not a torch release.
    source = '''
import torch
if is_torch_npu_available():
    scaler = torch.npu.amp.GradScaler()
else:
    scaler = torch.cuda.amp.GradScaler()
'''
    write(tmp_path, "t.py", source)
    result = amp_lint("--no-cache", "--isolated", "--select", "AMP072", "t.py", cwd=tmp_path)
    assert "AMP072" in result.stdout, result.stdout



def test_amp100_does_not_convert_to_a_grad_scaler_the_target_torch_lacks(tmp_path):
    source = '''
import torch
model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
'''
    path = write(tmp_path, "train.py", source)
    before = path.read_bytes()
    result = amp_lint("--no-cache", "--isolated", "--select", "AMP100", "--target-torch", "2.2", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert "needs torch 2.3" in result.stdout and path.read_bytes() == before, result.stdout
    result = amp_lint("--no-cache", "--isolated", "--select", "AMP100", "--target-torch", "2.3", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert "torch.amp.GradScaler" in path.read_text(), result.stdout
