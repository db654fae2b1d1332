"""AMP100 across the files of a project (issue 32, "Gradient code in helpers", and the scaler's lifetime): a
helper of another module that clips or reads `.grad` gets `scaler.unscale_` before its call, and one that runs
`torch.autograd.grad(..., create_graph=True)` blocks the conversion as the inline form does, whether it is
imported by name (`from utils import clip_gradients`) or called through its module (`utils.clip_gradients`).

Each test writes a small project of its own under tmp_path, runs the real command line on the training file, and
runs the converted code on the CPU (CPU autocast and `GradScaler("cpu")`) where it is complete.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, Tuple

import pytest
from click.testing import CliRunner
from torch_scripts import run_module, run_script

from amp_lint.cli import main

torch = pytest.importorskip("torch")

UTILS = """
import torch


def clip_gradients(model, clip):
    for p in model.parameters():
        if p.grad is not None:
            norm = p.grad.data.norm(2)
            if norm > clip:
                p.grad.data.mul_(clip / (norm + 1e-6))


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    grad = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)[0]
    return ((grad.norm(2, dim=1) - 1) ** 2).mean()


def log_lr(optimizer):
    return optimizer.param_groups[0]["lr"]
"""

TRAIN = """
import torch
import torch.nn as nn
{import_line}

torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    {call}(model, 1.0)
    optimizer.step()
    {log}(optimizer)
print("done")
"""


def project(tmp_path: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


def fix(tmp_path: Path, name: str) -> Tuple[int, str]:
    result = CliRunner().invoke(
        main,
        ["check", "--isolated", "--no-cache", "--color", "never", "--select", "AMP100", "--fix", "--unsafe-fixes",
         str(tmp_path / name)],
        catch_exceptions=False,
    )  # fmt: skip
    return result.exit_code, result.output


def run(tmp_path: Path, name: str) -> str:
    done = run_script(tmp_path / name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize(
    ("import_line", "call", "log"),
    [("from utils import clip_gradients, log_lr", "clip_gradients", "log_lr"),
     ("import utils", "utils.clip_gradients", "utils.log_lr"),
     ("from utils import *", "clip_gradients", "log_lr")],
    ids=["from-import", "module-import", "star-import"],
)  # fmt: skip
def test_clipping_in_a_helper_of_another_module_gets_unscale_before_it(tmp_path: Path, import_line, call, log):
    project(tmp_path, {"utils.py": UTILS, "train.py": TRAIN.format(import_line=import_line, call=call, log=log)})
    fix(tmp_path, "train.py")
    lines = [line.strip() for line in (tmp_path / "train.py").read_text().splitlines()]
    assert lines.index("scaler.unscale_(optimizer)") == lines.index(f"{call}(model, 1.0)") - 1
    assert lines.count("scaler.unscale_(optimizer)") == 1  # `log_lr(optimizer)` reads no gradient
    assert 'GradScaler("cpu")' in "\n".join(lines)
    assert run(tmp_path, "train.py").strip() == "done"
    before = (tmp_path / "train.py").read_text()
    fix(tmp_path, "train.py")
    assert (tmp_path / "train.py").read_text() == before  # idempotent


def test_a_helper_of_another_module_that_reads_no_gradient_gets_no_unscale(tmp_path: Path):
    train = TRAIN.format(import_line="from utils import log_lr as clip_like", call="clip_like", log="print")
    project(tmp_path, {"utils.py": UTILS, "train.py": train})
    fix(tmp_path, "train.py")
    text = (tmp_path / "train.py").read_text()
    assert "scaler.step(optimizer)" in text and "unscale_" not in text


WGAN = """
import torch
import torch.nn as nn
{import_line}

critic = nn.Linear(4, 1)
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4)
for step in range(3):
    real, fake = torch.randn(8, 4), torch.randn(8, 4)
    opt_c.zero_grad()
    loss = critic(fake).mean() - critic(real).mean() + 10 * {call}(critic, real, fake)
    loss.backward()
    opt_c.step()
"""


@pytest.mark.parametrize(
    ("import_line", "call"),
    [("from pkg.losses import gradient_penalty", "gradient_penalty"),
     ("from pkg import losses", "losses.gradient_penalty")],
    ids=["from-import", "module-import"],
)  # fmt: skip
def test_a_gradient_penalty_in_another_module_is_refused_like_the_inline_form(tmp_path: Path, import_line, call):
    # The penalty sits one call further: `pkg/losses.py` re-exports nothing, it calls `pkg/utils.py`.
    losses = "from pkg.utils import gradient_penalty as _gp\n\n\ndef gradient_penalty(critic, real, fake):\n" \
             "    return _gp(critic, real, fake)\n"  # fmt: skip
    project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/losses.py": losses,
                       "wgan.py": WGAN.format(import_line=import_line, call=call)})  # fmt: skip
    original = (tmp_path / "wgan.py").read_text()
    code, output = fix(tmp_path, "wgan.py")
    assert (tmp_path / "wgan.py").read_text() == original
    assert f"`{call}(...)` (line 10) runs `torch.autograd.grad(..., create_graph=True)`" in output
    assert "a gradient penalty" in output


ENGINE = """
import torch
import torch.nn as nn


def train_one_epoch(model, loader, optimizer, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
"""

MAIN = """
import torch
import torch.nn as nn
{import_line}

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
for epoch in range(3):
    {call}(model, loader, optimizer, "cpu")
    torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict()}}, "ckpt.pt")
"""


@pytest.mark.parametrize(
    ("import_line", "call"),
    [("from pkg_a.engine import train_one_epoch", "train_one_epoch"), ("from pkg_b import engine", "engine.train_one_epoch")],
    ids=["from-import", "module-import"],
)  # fmt: skip
def test_a_trainer_called_per_epoch_from_another_module_gets_no_scaler_of_its_own(tmp_path: Path, import_line, call):
    """The scaler belongs beside the optimizer, in the caller's file: a scaler built inside `train_one_epoch` would
    restart every epoch. Converting the trainer alone would leave its new `scaler` parameter unpassed, so with only
    the trainer checked nothing is written and the reason names the caller's file; with both checked, the caller
    gets the scaler beside its optimizer (tests/test_multi_file_fixes.py covers the checkpoint). (One package name
    per case: the command line runs in this process, whose project index keeps the source roots of earlier tests.)"""
    package = import_line.split()[1].split(".")[0]
    project(tmp_path, {f"{package}/__init__.py": "", f"{package}/engine.py": ENGINE,
                       f"{package}/main.py": MAIN.format(import_line=import_line, call=call)})  # fmt: skip
    original = (tmp_path / package / "engine.py").read_text()
    _, output = fix(tmp_path, f"{package}/engine.py")
    assert (tmp_path / package / "engine.py").read_text() == original
    assert "main.py`, which is not among the files this run checks" in output
    fix(tmp_path, package)
    assert "GradScaler" not in (tmp_path / package / "engine.py").read_text()
    caller = (tmp_path / package / "main.py").read_text()
    assert 'scaler = torch.amp.GradScaler(torch.device("cpu").type)' in caller
    assert f'{call}(model, loader, optimizer, "cpu", scaler=scaler)' in caller
    done = run_module(f"{package}.main", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_trainer_that_no_loop_of_the_project_calls_keeps_its_scaler_inside(tmp_path: Path):
    """Called once (or from outside the project): the scaler it creates lives as long as the call, as before."""
    main = MAIN.format(import_line="from pkg_c.engine import train_one_epoch", call="train_one_epoch").replace(
        "for epoch in range(3):\n    ", "if True:\n    ")
    project(tmp_path, {"pkg_c/__init__.py": "", "pkg_c/engine.py": ENGINE, "pkg_c/main.py": main,
                       "pkg_c/other.py": "def train_one_epoch():\n    pass\n\n\nfor _ in range(2):\n    train_one_epoch()\n"})  # fmt: skip
    fix(tmp_path, "pkg_c/engine.py")
    text = (tmp_path / "pkg_c" / "engine.py").read_text()
    assert "scaler = torch.amp.GradScaler(torch.device(device).type)" in text
    assert (tmp_path / "pkg_c" / "main.py").read_text() == textwrap.dedent(main).lstrip()
    done = run_module("pkg_c.main", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


# A helper that clamps gradients through the optimizer's groups, not `model.parameters()` (sgrvinod's tutorials):
# no loop over parameters, so no GRAD_READ event; the summary still sees the `.grad` read in its body.
GROUPS_UTILS = """
def clip_gradient(optimizer, grad_clip):
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)


def clear_gradients(optimizer):
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None
"""


@pytest.mark.parametrize("helper", ["clip_gradient", "clear_gradients"])
def test_a_clamp_over_the_optimizers_groups_in_another_module_gets_unscale_before_it(tmp_path: Path, helper):
    """Reading `param.grad` anywhere in the helper's body counts (a clamp); assigning `param.grad = None` does not."""
    train = TRAIN.replace("{call}(model, 1.0)", "{call}(optimizer, 1.0)" if helper == "clip_gradient" else "{call}(optimizer)")
    project(tmp_path, {"grouputils.py": GROUPS_UTILS,
                       "train.py": train.format(import_line="from grouputils import *", call=helper, log="print")})  # fmt: skip
    fix(tmp_path, "train.py")
    text = (tmp_path / "train.py").read_text()
    assert "scaler.step(optimizer)" in text
    if helper == "clip_gradient":
        lines = [line.strip() for line in text.splitlines()]
        assert lines.index("scaler.unscale_(optimizer)") == lines.index("clip_gradient(optimizer, 1.0)") - 1
        assert run(tmp_path, "train.py").strip().endswith("done")
    else:
        assert "unscale_" not in text


def test_the_conversion_asks_the_analysis_summary_of_a_helper(tmp_path: Path):
    """The conversion's answer is `analysis.gradient_effects`' summary, asked while the project's summary provider
    follows the fp32 file: another module's penalty and its clip are found there, with the function that holds them."""
    import libcst as cst

    from amp_lint.analysis.builder import build_model
    from amp_lint.analysis.events import EventKind
    from amp_lint.analysis.project import ProjectIndex
    from amp_lint.conversion.helper_effects import HelperEffects

    project(tmp_path, {"utils.py": UTILS, "train.py": TRAIN.format(import_line="from utils import clip_gradients, log_lr",
                                                                   call="clip_gradients", log="log_lr")})  # fmt: skip
    model = build_model(cst.parse_module((tmp_path / "train.py").read_text()))
    calls = {e.target: e for scope in model.scopes for e in scope.events if e.kind is EventKind.CALL}
    effects = HelperEffects(model, str(tmp_path / "train.py"), ProjectIndex())
    clip = effects.of_call(calls["clip_gradients"])
    assert clip.reads_gradients and clip.where == "clip_gradients" and clip.gradient_penalty is None
    assert effects.of_call(calls["log_lr"]) == type(clip)()
    # Without the project, the helper is not the file's: nothing is known of it.
    assert HelperEffects(model, None, None).of_call(calls["clip_gradients"]).reads_gradients is None
