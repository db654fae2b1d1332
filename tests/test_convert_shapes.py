"""AMP100 on the shapes real fp32 scripts take (issue 32, "Conversion"; issue 27 item 7): the device through
parameters and arguments, gradient code in helpers, the scaler's lifetime and checkpoint, refusals for the
right reasons, the forward of everything trained under autocast, and Gram matrices kept in float32.

Each test converts a small script of its own with `convert_source` (what `--fix --unsafe-fixes` writes) and
reads the result; the complete ones are also run on the CPU (CPU autocast and `GradScaler("cpu")`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from torch_scripts import run_script

from amp_lint.engine.checker import Checker
from amp_lint.engine.convert import convert_source

torch = pytest.importorskip("torch")


def convert(source: str):
    result = convert_source(textwrap.dedent(source))
    if result.converted:
        cst.parse_module(result.code)
        again = convert_source(result.code)
        assert again.code == result.code, "a second conversion changed the code"
        # The converted file checkpoints the scaler it adds wherever the optimizer is (issue 46).
        checked = Checker(frozenset({"AMP080"}), show_assumed=True).check(result.code, "<converted>")
        assert [d.message for d in checked.diagnostics] == []
    return result


def run(code: str, tmp_path: Path, *args: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(code)
    done = run_script(script, cwd=tmp_path, args=args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# --- 1. the device through parameters and arguments ----------------------------------------------------

CPU_ONLY = """
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print("done")
"""


def test_a_cpu_only_script_with_no_device_converts_for_the_cpu(tmp_path: Path):
    result = convert(CPU_ONLY)
    assert result.converted
    assert 'GradScaler("cpu")' in result.code and 'autocast("cpu"' in result.code
    assert "cuda" not in result.code
    run(result.code, tmp_path)


def test_a_model_from_elsewhere_keeps_the_cuda_default():
    result = convert(
        """
        import torch
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        """
    )
    assert 'GradScaler("cuda")' in result.code


def test_the_device_parameter_of_a_function_that_hands_it_to_a_helper():
    result = convert(
        """
        import torch
        import torch.nn as nn

        def calc_loss_batch(x, y, model, device):
            x, y = x.to(device), y.to(device)
            return nn.functional.cross_entropy(model(x), y)

        def train(model, loader, optimizer, device, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = calc_loss_batch(x, y, model, device)
                    loss.backward()
                    optimizer.step()

        def main():
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            train(model, [], optimizer, device, 2)
        """
    )
    assert "GradScaler(device.type)" in result.code
    assert "autocast(device.type, dtype=torch.float16)" in result.code
    assert '"cuda")' not in result.code


ARGS_DEVICE = """
import argparse
import torch
import torch.nn as nn
parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
args = parser.parse_args()
model = nn.Linear(4, 2).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 4).to(args.device)
    y = torch.randint(0, 2, (8,)).to(args.device)
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print("done")
"""


def test_the_device_from_the_command_line(tmp_path: Path):
    result = convert(ARGS_DEVICE)
    assert "GradScaler(torch.device(args.device).type)" in result.code
    assert "autocast(torch.device(args.device).type, dtype=torch.float16)" in result.code
    assert run(result.code, tmp_path, "--device", "cpu").strip().endswith("done")


GUARDED_CUDA = """
import torch
import torch.nn as nn
cuda = torch.cuda.is_available()
model = nn.Linear(4, 2)
if cuda:
    model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    if cuda:
        x, y = x.cuda(), y.cuda()
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print("done")
"""


def test_a_script_that_falls_back_to_the_cpu(tmp_path: Path):
    result = convert(GUARDED_CUDA)
    assert 'GradScaler("cuda" if cuda else "cpu")' in result.code
    assert 'autocast("cuda" if cuda else "cpu", dtype=torch.float16)' in result.code
    run(result.code, tmp_path)


def test_a_script_that_only_uses_cuda_keeps_the_literal():
    result = convert(
        """
        import torch
        import torch.nn as nn
        model = nn.Linear(4, 2).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
        """
    )
    assert 'GradScaler("cuda")' in result.code


# --- 2. gradient code in helpers ------------------------------------------------------------------------

CLIP_IN_HELPER = """
import torch
import torch.nn as nn

def clip_gradients(model, clip):
    for p in model.parameters():
        if p.grad is not None:
            norm = p.grad.data.norm(2)
            if norm > clip:
                p.grad.data.mul_(clip / (norm + 1e-6))

torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    clip_gradients(model, 1.0)
    optimizer.step()
print("done")
"""


def test_hand_written_clipping_in_a_helper_gets_unscale_before_it(tmp_path: Path):
    result = convert(CLIP_IN_HELPER)
    lines = [line.strip() for line in result.code.splitlines()]
    assert lines.index("scaler.unscale_(optimizer)") == lines.index("clip_gradients(model, 1.0)") - 1
    run(result.code, tmp_path)


def test_a_gradient_penalty_in_a_helper_is_refused_like_the_inline_form():
    source = """
        import torch
        import torch.nn as nn

        def gradient_penalty(critic, real, fake):
            alpha = torch.rand(real.size(0), 1)
            mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            grad = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)[0]
            return ((grad.norm(2, dim=1) - 1) ** 2).mean()

        critic = nn.Linear(4, 1)
        opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4)
        for real, fake in loader:
            opt_c.zero_grad()
            loss = critic(fake).mean() - critic(real).mean() + 10 * gradient_penalty(critic, real, fake)
            loss.backward()
            opt_c.step()
        """
    result = convert(source)
    assert not result.converted
    assert len(result.reasons) == 1
    assert "gradient_penalty(...)" in result.reasons[0] and "create_graph=True" in result.reasons[0]


# --- 3. the scaler lives as long as its optimizer --------------------------------------------------------

SAVE_AND_LOAD = """
import sys
import torch
import torch.nn as nn

def main(resume=None):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    if resume:
        checkpoint = torch.load(resume)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start = checkpoint["epoch"]
    for epoch in range(start, start + 2):
        for step in range(5):
            x = torch.randn(8, 4)
            y = torch.randint(0, 2, (8,))
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        state = dict(model=model.state_dict(), optimizer=optimizer.state_dict(), epoch=epoch + 1)
        torch.save(state, "ck.pt")

main(sys.argv[1] if len(sys.argv) > 1 else None)
"""


def test_the_scaler_is_saved_and_loaded_where_the_optimizer_is(tmp_path: Path):
    result = convert(SAVE_AND_LOAD)
    code = result.code
    assert "scaler=scaler.state_dict()" in code
    assert 'scaler.load_state_dict(checkpoint["scaler"])' in code
    run(code, tmp_path)
    run(code, tmp_path, "ck.pt")  # the resume path loads what the first run saved
    assert "scaler" in torch.load(tmp_path / "ck.pt")


SAVES_NO_OPTIMIZER = SAVE_AND_LOAD.replace(
    "state = dict(model=model.state_dict(), optimizer=optimizer.state_dict(), epoch=epoch + 1)",
    "state = model.state_dict()",
)


def test_a_load_without_a_save_gets_the_guarded_restore_and_no_save(tmp_path: Path):
    # The file resumes from a checkpoint another script saved. AMP080 (on by default) reports an optimizer
    # restored with no scaler restored beside it, and a converted file must pass the rules the tool ships: the
    # restore is written, guarded, since that checkpoint may predate the conversion and hold no scaler entry.
    # Nothing in this file saves the optimizer, so nothing new is saved either.
    result = convert(SAVES_NO_OPTIMIZER)
    assert result.converted, result.reasons
    lines = [line.strip() for line in result.code.splitlines()]
    after = lines.index('optimizer.load_state_dict(checkpoint["optimizer"])') + 1
    assert lines[after : after + 2] == ['if "scaler" in checkpoint:', 'scaler.load_state_dict(checkpoint["scaler"])']
    assert "scaler.state_dict()" not in result.code
    # Resuming from a checkpoint written before the conversion (no "scaler" entry) still works.
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1}, tmp_path / "old.pt")
    run(result.code, tmp_path, "old.pt")


def test_a_save_without_a_load_gets_the_scaler_saved():
    # Another script resumes from what this one saves: the scaler's state is saved beside the optimizer's
    # (AMP080 would report the save otherwise), and no restore is invented.
    source = SAVE_AND_LOAD.replace(
        'checkpoint = torch.load(resume)\n        model.load_state_dict(checkpoint["model"])\n'
        '        optimizer.load_state_dict(checkpoint["optimizer"])\n        start = checkpoint["epoch"]',
        "start = int(resume)",
    )
    assert "optimizer.load_state_dict" not in source
    result = convert(source)
    assert result.converted, result.reasons
    assert "scaler=scaler.state_dict()" in result.code and "scaler.load_state_dict" not in result.code


def test_a_restore_from_a_checkpoint_with_no_name_is_left_to_amp080():
    # `torch.load(resume)["optimizer"]`: the scaler's restore could only load the file a second time, so the
    # conversion writes none, and the fix check asks AMP080 about the result. AMP080's finding there is true (a
    # resumed run restarts the loss scale), so the file is not written and the reason says what to add.
    source = SAVES_NO_OPTIMIZER.replace(
        'checkpoint = torch.load(resume)\n        model.load_state_dict(checkpoint["model"])\n'
        '        optimizer.load_state_dict(checkpoint["optimizer"])',
        'optimizer.load_state_dict(torch.load(resume)["optimizer"])',
    )
    assert 'torch.load(resume)["optimizer"]' in source
    result = convert(source)
    assert not result.converted
    assert any("new AMP080" in reason and "scaler.load_state_dict" in reason for reason in result.reasons)


def test_a_subscript_save_gets_the_scaler_beside_the_optimizer():
    source = SAVE_AND_LOAD.replace(
        'state = dict(model=model.state_dict(), optimizer=optimizer.state_dict(), epoch=epoch + 1)',
        'state = {}\n        state["optimizer"] = optimizer.state_dict()',
    )
    result = convert(source)
    assert 'state["scaler"] = scaler.state_dict()' in result.code
    assert 'scaler.load_state_dict(checkpoint["scaler"])' in result.code


def test_each_run_of_a_hyperparameter_loop_gets_its_own_scaler():
    result = convert(
        """
        import torch
        import torch.nn as nn
        for lr in [0.1, 0.01]:
            model = nn.Linear(4, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
        """
    )
    lines = result.code.splitlines()
    made = lines.index('    scaler = torch.amp.GradScaler("cpu")')
    assert lines[made - 1].strip().startswith("optimizer = torch.optim.SGD")


def test_a_trainer_called_once_per_fresh_optimizer_keeps_its_scaler_inside():
    result = convert(
        """
        import torch
        import torch.nn as nn

        def train_model(model, loader, optimizer, device, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
                    loss.backward()
                    optimizer.step()

        def search(loader, device):
            for lr in [1e-3, 1e-4]:
                model = nn.Linear(4, 2).to(device)
                optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
                train_model(model, loader, optimizer, device, 2)
        """
    )
    lines = result.code.splitlines()
    made = lines.index("    scaler = torch.amp.GradScaler(torch.device(device).type)")
    assert lines[made - 1].startswith("def train_model(")
    assert "scaler=scaler" not in result.code


# --- 4. refusals for the right reasons only ---------------------------------------------------------------

BOOKKEEPING = """
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
running_corrects = 0
for i in range(50):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    if i > 10: break
    optimizer.zero_grad()
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    acc = (out.argmax(1) == y).double().mean()
    running_corrects += torch.sum(out.argmax(1) == y)
epoch_acc = running_corrects.double() / 88
model.half()
torch.save(model.state_dict(), "model_fp16.pt")
print("done")
"""


def test_accuracy_in_float64_a_half_export_and_an_early_break_do_not_block_conversion(tmp_path: Path):
    result = convert(BOOKKEEPING)
    assert result.converted, result.reasons
    assert "scaler.step(optimizer)" in result.code
    run(result.code, tmp_path)


def test_a_float64_model_is_still_refused():
    result = convert(
        """
        import torch
        import torch.nn as nn
        model = nn.Linear(4, 2).double()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x.double()), y)
            loss.backward()
            optimizer.step()
        """
    )
    assert not result.converted and "float64 on purpose" in result.reasons[0]
    assert "nn.Linear(4, 2).double()" in result.reasons[0]


def test_a_half_cast_inside_the_epoch_loop_still_counts():
    result = convert(
        """
        import torch
        import torch.nn as nn
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
            model.half()
        """
    )
    assert not result.converted


def test_a_step_in_a_one_line_block_names_the_step():
    result = convert(
        """
        import torch
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            if i % 2 == 0: optimizer.step()
        """
    )
    assert not result.converted
    assert "`optimizer.step()` sits in a one-line block" in result.reasons[0]


# --- 5. the forward of everything trained under autocast ---------------------------------------------------

ACTOR_CRITIC = """
import torch
import torch.nn as nn

class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)

    def get_action(self, obs):
        mu = self.l(obs)
        return torch.tanh(mu), mu.pow(2).sum(-1)

torch.manual_seed(0)
actor = Actor()
qf = nn.Linear(6, 1)
actor_optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)
for step in range(5):
    obs = torch.randn(8, 4)
    pi, logp = actor.get_action(obs)
    q = qf(torch.cat([obs, pi], 1))
    actor_loss = (0.2 * logp - q.squeeze(-1)).mean()
    actor_optimizer.zero_grad()
    actor_loss.backward()
    actor_optimizer.step()
print("done")
"""


def test_the_actors_forward_is_inside_autocast(tmp_path: Path):
    result = convert(ACTOR_CRITIC)
    lines = result.code.splitlines()
    region = lines.index('    with torch.amp.autocast("cpu", dtype=torch.float16):')
    assert lines[region + 1].strip() == "pi, logp = actor.get_action(obs)"
    run(result.code, tmp_path)


# --- 6. numerics float16 cannot hold -----------------------------------------------------------------------

GRAM = """
import torch
import torch.nn as nn

def gram_matrix(x):
    b, c, h, w = x.size()
    features = x.view(b, c, h * w)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (c * h * w)
    return gram

torch.manual_seed(0)
net = nn.Conv2d(3, 8, 3, padding=1)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
target = torch.randn(1, 8, 8)
for step in range(3):
    img = torch.randn(1, 3, 16, 16) * 100
    feats = net(img)
    loss = nn.functional.mse_loss(gram_matrix(feats), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
"""


def test_a_gram_matrix_in_a_helper_stays_in_float32(tmp_path: Path):
    result = convert(GRAM)
    assert "with torch.amp.autocast(features.device.type, enabled=False):" in result.code
    assert "gram = features.float().bmm(features_t.float()) / (c * h * w)" in result.code
    run(result.code, tmp_path)


def test_an_inline_gram_matrix_is_refused_with_the_reason():
    result = convert(
        """
        import torch
        import torch.nn as nn
        net = nn.Conv2d(3, 8, 3)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for img, target in loader:
            f = net(img).flatten(1)
            loss = nn.functional.mse_loss(torch.mm(f, f.t()), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        """
    )
    assert not result.converted
    assert "torch.mm(f, f.t())" in result.reasons[0] and "Gram matrix" in result.reasons[0]
