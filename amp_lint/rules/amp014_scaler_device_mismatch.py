from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.file_model import FileModel, ScalerBinding
from amp_lint.rules._helpers import argument, region_device, regions_feeding, short, value_of
from amp_lint.rules.amp012_scaler_with_bf16 import scaler_uses
from amp_lint.rules._scaler_devices import fixed_scaler_for_any_accelerator, other_device_variable, follows_current_accelerator
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class ScalerDeviceMismatch(Rule):
    """
    ## What it does
    Finds a `GradScaler` whose device differs from the device type of the autocast regions feeding the
    losses it scales, including the default `"cuda"` of `GradScaler()` next to `torch.autocast("cpu")`.

    ## Why is this bad?
    `GradScaler()` defaults to `device="cuda"`. On a host without CUDA it disables itself with
    `UserWarning: torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.`, so
    `scale()` becomes a no-op and float16 underflow protection is silently gone. On a CUDA host the same
    code happens to work, so the bug only shows when the script moves to another machine.

    ## Example
    ```python
    scaler = torch.amp.GradScaler()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    ```

    Also a scaler built for one device beside an autocast that follows
    `torch.accelerator.current_accelerator()` (torch 2.6's device-generic API: its type is "cuda", "mps",
    "xpu", "hpu", ... whatever the host has), and, as an assumption, a scaler built from another device
    variable than the autocast's (`GradScaler(scaler_device)` beside `autocast(amp_device)`).

    ## Fix safety
    Safe: the scaler's device argument is set to the autocast's device type (a literal, or
    `torch.accelerator.current_accelerator().type` written as the autocast writes it). Devices are compared
    through values (literals, names, attributes set in the class); a device through a name bound to the
    current accelerator is reported without a fix, two device variables are an assumption without one. A deprecated `torch.cuda.amp.GradScaler` is reported without a fix (AMP072 modernises it
    first).

    ## References
    - `torch/amp/grad_scaler.py`: `GradScaler.__init__`
    - [`torch.accelerator.current_accelerator`](https://docs.pytorch.org/docs/stable/generated/torch.accelerator.current_accelerator.html)
      (torch 2.6 and later)
    """

    code = "AMP014"
    name = "grad-scaler-device-mismatch"
    summary = "GradScaler device differs from the autocast device"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    needs = (r"Scaler", r"autocast")

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cpu")
for x in loader:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The same variable on both sides.
        """
import torch
scaler = torch.amp.GradScaler(device_type)
for x in loader:
    with torch.autocast(device_type, dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A device chosen at run time.
        """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
scaler = torch.amp.GradScaler()
for x in loader:
    with torch.autocast(device.type):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # Both through one variable set in __init__.
        """
import torch
class Trainer:
    def __init__(self):
        self.device = "cpu"
        self.scaler = torch.amp.GradScaler(self.device)

    def fit(self, loader):
        for x in loader:
            with torch.autocast(self.device, dtype=torch.float16):
                loss = self.model(x).sum()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
        # The autocast device is the caller's: unknown.
        """
import torch
def train(model, loader, optimizer, device_type):
    scaler = torch.amp.GradScaler()
    for x in loader:
        with torch.autocast(device_type, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
    ]
    valid += [
        # The scaler follows the same accelerator as the autocast.
        """
import torch
def train(model, loader, optimizer):
    device = torch.accelerator.current_accelerator()
    scaler = torch.amp.GradScaler(device.type)
    for x in loader:
        with torch.autocast(device.type, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # One device variable for both.
        """
import torch
def train(model, loader, optimizer, device):
    scaler = torch.amp.GradScaler(device)
    for x in loader:
        with torch.autocast(device, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
    ]
    invalid = [
        # Issue 30: MPS (and HPU) autocast with the default "cuda" scaler.
        Invalid(
            """
import torch
def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler()
    for x in loader:
        with torch.autocast("mps", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            fixed="""
import torch
def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("mps")
    for x in loader:
        with torch.autocast("mps", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast(device_type="hpu", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("hpu")
for x in loader:
    with torch.autocast(device_type="hpu", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        # The autocast follows torch.accelerator.current_accelerator(), the scaler is CUDA's.
        Invalid(
            """
import torch
def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler()
    for x in loader:
        with torch.autocast(torch.accelerator.current_accelerator().type, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            fixed="""
import torch
def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler(torch.accelerator.current_accelerator().type)
    for x in loader:
        with torch.autocast(torch.accelerator.current_accelerator().type, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
        # ... through a name: reported, not fixed.
        Invalid(
            """
import torch
def train(model, loader, optimizer):
    device = torch.accelerator.current_accelerator()
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast(device.type, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
        # Two device variables: an assumption (shown with --show-assumed, or when AMP014 is selected by name).
        Invalid(
            """
import torch
def train(model, loader, optimizer, scaler_device, amp_device):
    scaler = torch.amp.GradScaler(scaler_device)
    for x in loader:
        with torch.autocast(amp_device, dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler()
for x in loader:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cpu")
for x in loader:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        ),
        Invalid(
            """
import torch
def train(model, loader, optimizer):
    scaler = torch.GradScaler(device="cuda", init_scale=1024.0)
    for x in loader:
        with torch.autocast("xpu"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            fixed="""
import torch
def train(model, loader, optimizer):
    scaler = torch.GradScaler(device="xpu", init_scale=1024.0)
    for x in loader:
        with torch.autocast("xpu"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        ),
        # Devices through values: an attribute set in __init__ for autocast, the default "cuda" for the scaler.
        Invalid(
            """
import torch
class Trainer:
    def __init__(self):
        self.device_type = "cpu"
        self.scaler = torch.amp.GradScaler()

    def fit(self, loader):
        for x in loader:
            with torch.autocast(self.device_type, dtype=torch.float16):
                loss = self.model(x).sum()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
            fixed="""
import torch
class Trainer:
    def __init__(self):
        self.device_type = "cpu"
        self.scaler = torch.amp.GradScaler("cpu")

    def fit(self, loader):
        for x in loader:
            with torch.autocast(self.device_type, dtype=torch.float16):
                loss = self.model(x).sum()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
        ),
        # The deprecated CUDA scaler next to CPU autocast: reported, fixed through AMP072.
        Invalid(
            """
import torch
scaler = torch.cuda.amp.GradScaler()
for x in loader:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for bindings, backwards in scaler_uses(model).values():
            if not any(b.is_enabled for b in bindings):
                continue
            regions = regions_feeding(backwards)
            devices = {_scaler_device(model, b) for b in bindings}
            if regions and (len(devices) != 1 or None in devices):
                yield from other_device_variable(self, model, bindings, regions)
                continue
            if len(devices) != 1 or None in devices:
                continue
            scaler_device = next(iter(devices))
            if regions and all(follows_current_accelerator(model, r) for r in regions):
                yield from fixed_scaler_for_any_accelerator(self, model, bindings, regions, scaler_device)
                continue
            region_devices = {region_device(model, r) for r in regions}
            if len(region_devices) != 1 or None in region_devices:
                continue
            autocast_device = next(iter(region_devices))
            if autocast_device == scaler_device:
                continue
            for binding in bindings:
                yield self.finding(
                    binding.call,
                    f"`{short(binding.call)}` is a {scaler_device!r} scaler but the losses it scales come from "
                    f"{autocast_device!r} autocast (`{short(regions[0].item.item if regions[0].item else regions[0].node, 40)}`); "
                    f"without CUDA it disables itself and stops scaling",
                    fix=_device_fix(model, binding, regions[0]),
                    context=binding.scope.name if binding.scope else "",
                )


def _scaler_device(model: FileModel, binding: ScalerBinding) -> Optional[str]:
    """The device type a scaler is built for ("cuda" when omitted), through values; None when unknown."""
    if binding.call is None or binding.qualified_name is None:
        return None
    if binding.device is not None:
        return binding.device.split(":")[0]
    if names.IMPLIED_DEVICE.get(binding.qualified_name) or any(a.star for a in binding.call.args):
        return None
    arg = argument(binding.call, 0, "device")
    return value_of(model, arg.value, binding.scope).device_type if arg is not None else None


def _device_fix(model: FileModel, binding: ScalerBinding, region: AutocastRegion) -> Optional[Fix]:
    call = binding.call
    if call is None or binding.qualified_name in names.IMPLIED_DEVICE or any(a.star for a in call.args):
        return None
    device = region_device(model, region)
    if device is None:
        return None
    builder = FixBuilder(model.module)
    if isinstance(region.spec.device_node, cst.SimpleString):
        new: cst.BaseExpression = region.spec.device_node
    else:
        new = cst.SimpleString(builder.string(device))
    current = argument(call, 0, "device")
    if current is not None:
        builder.replace(current.value, lambda updated: new)
    else:
        builder.replace(call, lambda updated: with_call_args(updated, [cst.Arg(value=new), *updated.args]))
    return builder.build("Build the scaler for the autocast device", Applicability.SAFE)
