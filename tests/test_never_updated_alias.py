"""Issue 26, principle 3 (report what is proved) with principle 4 (values followed): a class that builds its
GradScaler through a local alias of the class (`scaler_type = GradScaler` or `ShardedGradScaler`, then
`self.scaler = scaler_type()`) owns it as much as one written `GradScaler()`; when its scaled backward and
its step are sibling methods and no file of the project updates the attribute or hands it on, the missing
`update()` is proved (AMP021). Any update elsewhere in the project keeps it silent."""

from __future__ import annotations

from package_check import check_in_package, write_package

WRAPPER = """
import torch
from torch.amp import GradScaler


class AmpWrapper:
    def __init__(self, optimizer, use_fsdp=False):
        self.optimizer = optimizer
        if use_fsdp:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
            scaler_type = ShardedGradScaler
        else:
            scaler_type = GradScaler
        self.amp_scaler = scaler_type()

    def backward(self, loss):
        self.amp_scaler.scale(loss).backward()

    def step(self):
        self.amp_scaler.step(self.optimizer)
        {update}

    def state_dict(self):
        return {"amp_scaler": self.amp_scaler.state_dict()}
"""

USER = """
def train(wrapper, loader, model):
    for x in loader:
        wrapper.backward(model(x).sum())
        wrapper.step()
        {update}
"""


def _check(tmp_path, update_in_wrapper: str, update_in_user: str):
    files = {"wrapper.py": WRAPPER.replace("{update}", update_in_wrapper), "loop.py": USER.replace("{update}", update_in_user)}
    write_package(tmp_path, files)
    return check_in_package(tmp_path, "pkg/wrapper.py", "AMP021")


def test_a_scaler_built_through_a_class_alias_that_nothing_updates(tmp_path):
    assert _check(tmp_path, "pass", "pass") == [("AMP021", 20)]


def test_the_wrapper_that_updates_is_silent(tmp_path):
    assert _check(tmp_path, "self.amp_scaler.update()", "pass") == []


def test_an_update_elsewhere_in_the_project_keeps_it_silent(tmp_path):
    # Principle 3 (open world): the project's own loop updates the attribute: a caller completes it.
    assert _check(tmp_path, "pass", "wrapper.amp_scaler.update()") == []
