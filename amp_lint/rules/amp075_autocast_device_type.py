from __future__ import annotations

from typing import Iterator

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import argument, file_devices, has_star_args, short
from amp_lint.rules._device_values import (
    check_device,
    check_splats,
    insert_device_fix,
)
from amp_lint.rules.base import Finding, Invalid, Rule


class AutocastDeviceType(Rule):
    """
    ## What it does
    Finds `torch.autocast` / `torch.amp.autocast` whose `device_type` is missing, is not a string (a
    `torch.device`), or carries a device index (`"cuda:0"`, `str(device)`, `f"cuda:{rank}"`), also when the
    value comes through a name, an attribute set in the class (`self.device = "cuda:0"`), a dict entry, a
    helper of the file (`def get_device(): return str(device)`), or a kwargs dict the file writes out
    (`autocast(**amp_kwargs)` whose key is `device` where `device_type` is meant: TypeError).

    ## Why is this bad?
    - `torch.autocast()` without a device raises `TypeError: autocast.__init__() missing 1 required
      positional argument: 'device_type'`; a bare `@torch.autocast` decorator raises `ValueError`.
    - `torch.autocast(torch.device("cuda"))` raises ``ValueError: Expected `device_type` of type `str`,
      got: `<class 'torch.device'>` ``.
    - `torch.autocast("cuda:0")` is accepted but skips the `device == "cuda"` branch that checks CUDA
      availability and bfloat16 support: on a machine without CUDA it stays "enabled" silently; some
      releases raise `RuntimeError: User specified an unsupported autocast device_type 'cuda:0'`. The
      parameter is a device *type*, "the same as the `type` attribute of a torch.device".

    ## Example
    ```python
    device = torch.device("cuda:0")
    with torch.autocast(str(device), dtype=torch.float16):
        out = model(x)
    ```

    ## Use instead
    ```python
    device = torch.device("cuda:0")
    with torch.autocast(device.type, dtype=torch.float16):
        out = model(x)
    ```

    ## Fix safety
    Safe for an index in a literal (`"cuda:0"` becomes `"cuda"`) and for a value that is provably a
    `torch.device` (`dev` becomes `dev.type`, `str(dev)` becomes `dev.type`). Safe, too, for a name,
    attribute or helper call whose every value in the file is a device string, one of them indexed: it
    becomes `torch.device(x).type`, right for any device string. Unsafe when the device_type is missing
    and the file's other autocast regions name a single device, which is then inserted, or when `str(x)`
    is rewritten without proof that `x` is a `torch.device`. `str(x.device)` of a tensor `x` (the function
    reads its shape or dtype, casts or moves it; or `next(m.parameters()).device`) is proved, directly or
    through a name: a tensor on CUDA always carries an index, so it becomes `x.device.type` safely. So is
    `str(x)` where the code reads `x.type` or `x.index` of the same value (a str has neither: in its function,
    in the methods of its class for `self.x`, file-wide for an imported module's attribute), or where `x` is
    a property declared `-> torch.device` in the class or in a project base class. A
    `torch.device` built only from index-free literals (`torch.device("cuda")`) is fine. A value that is
    indexed on some paths and unknown on others (the caller's device) is reported at medium confidence
    without a fix.

    ## References
    - `torch/amp/autocast_mode.py`: `autocast.__init__`, `autocast.__call__`
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast) (`device_type`)
    """

    code = "AMP075"
    name = "autocast-device-type"
    summary = "autocast device_type missing, not a string, or with a device index"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bautocast\b",)
    # No device, an indexed string, a call (`str(device)`, `torch.device(...)`), a torch.device object, an
    # expression the analysis resolves (`dt`, `self.dev`, `ctx["dev"]`), or a bare `@autocast` decorator:
    # what the `ast` pass of the prefilter notes about each autocast call.
    ast_needs = (r"autocast_device_(missing|indexed|call|object|expr|splat)|autocast_bare_decorator",)

    valid = [
        """
import torch
device = torch.device("cuda:0")
with torch.autocast(device.type, dtype=torch.float16):
    out = model(x)
with torch.autocast(device_type="cuda"):
    out = model(x)
""",
        # A string variable: fine.
        """
import torch
def run(model, x, device_type: str):
    with torch.autocast(device_type):
        return model(x)
""",
        # The deprecated classes take no device.
        """
import torch
with torch.cuda.amp.autocast():
    out = model(x)
""",
        # Arguments forwarded: unknown.
        """
import torch
def ctx(*args, **kwargs):
    return torch.autocast(*args, **kwargs)
""",
        # self.device may well be a string.
        """
import torch
class Runner:
    def run(self, x):
        with torch.autocast(self.device):
            return self.model(x)
""",
        # str() of a device without an index is the device type (Open-Rig3R's `str(device)`).
        """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
with torch.autocast(device_type=str(device)):
    out = model(x)
""",
        # A torch.device built only from index-free literals: `str()` of it is the device type.
        """
import torch
def step(model, x):
    dev = torch.device("cuda")
    with torch.autocast(str(dev)):
        return model(x.float())
""",
        # The caller's device: unknown.
        """
import torch
class Runner:
    def __init__(self, device):
        self.device = device

    def run(self, x):
        with torch.autocast(self.device):
            return self.model(x)
""",
        # A later assignment in the function replaces the indexed one.
        """
import torch
def step(model, x):
    dev = "cuda:0"
    dev = dev.split(":")[0]
    with torch.autocast(dev):
        return model(x)
""",
        # transformers' rotary embeddings: the type of a tensor's device, or "cpu".
        """
import torch
def forward(x, inv_freq):
    device_type = x.device.type
    device_type = device_type if isinstance(device_type, str) and device_type != "mps" else "cpu"
    with torch.autocast(device_type=device_type, enabled=False):
        return inv_freq.float() @ x.float()
""",
        # The dict is changed elsewhere: its entry is unknown.
        """
import torch
ctx = {"dev": "cuda:0"}
ctx.update(load_settings())
def sample(model, x):
    with torch.autocast(ctx["dev"]):
        return model(x)
""",
        # str() of a setting through a name: a string already, maybe without an index.
        """
import torch
def run(model, x, args):
    dt = str(args.device)
    with torch.autocast(dt):
        return model(x)
""",
        # A helper whose return nobody knows.
        """
import torch
def get_device():
    return settings.device
def step(model, x):
    with torch.autocast(get_device()):
        return model(x)
""",
        # Written from outside the class: unknown.
        """
import torch
class Runner:
    def __init__(self):
        self.device = "cuda:0"

    def run(self, x):
        with torch.autocast(self.device):
            return self.model(x)

runner = Runner()
runner.device = "cuda"
""",
        # Issue 46, principle 1: a kwargs dict that something else changes: its keys are unknown.
        """
import torch
def step(model, x, extra):
    amp_kwargs = {"device": "cuda"}
    amp_kwargs.update(extra)
    with torch.autocast(**amp_kwargs):
        return model(x)
""",
    ]
    invalid = [
        # Issue 46, principle 1 (values that travel): a kwargs dict whose key is `device` where `device_type`
        # is meant, and one whose device_type carries an index.
        Invalid(
            """
import torch
AMP_KWARGS = {"device": "cuda", "dtype": torch.float16}
INDEXED = dict(device_type="cuda:0")
def step(model, x):
    with torch.autocast(**AMP_KWARGS):
        y = model(x)
    with torch.autocast(**INDEXED):
        return model(y)
""",
            count=2,
        ),
        # Issue 26, principle 4: a device written out is wrong whatever a `**kwargs` beside it holds.
        Invalid(
            """
import torch
def context(**autocast_kwargs):
    return torch.autocast(device_type="cuda:0", dtype=torch.bfloat16, **autocast_kwargs)
""",
            fixed="""
import torch
def context(**autocast_kwargs):
    return torch.autocast(device_type="cuda", dtype=torch.bfloat16, **autocast_kwargs)
""",
        ),
        # Issue 26, principle 4: a tensor's device (the function casts it) is `cuda:0` on CUDA: proved.
        Invalid(
            """
import torch
def step(model, x):
    x = x.float()
    with torch.autocast(str(x.device), dtype=torch.float16):
        return model(x)
""",
            fixed="""
import torch
def step(model, x):
    x = x.float()
    with torch.autocast(x.device.type, dtype=torch.float16):
        return model(x)
""",
        ),
        # ... through a name.
        Invalid(
            """
import torch
def step(model, x):
    device_type = str(x.device)
    with torch.autocast(device_type):
        return model(x.to(torch.float32))
""",
            fixed="""
import torch
def step(model, x):
    device_type = str(x.device)
    with torch.autocast(torch.device(device_type).type):
        return model(x.to(torch.float32))
""",
        ),
        # ... a parameter declared a tensor (torchtitan's router, `x_BLD: torch.Tensor`).
        Invalid(
            """
import torch
def route(x: torch.Tensor, gate):
    with torch.autocast(str(x.device), dtype=torch.float32):
        return gate(x)
""",
            fixed="""
import torch
def route(x: torch.Tensor, gate):
    with torch.autocast(x.device.type, dtype=torch.float32):
        return gate(x)
""",
        ),
        # ... the device of a model's parameters.
        Invalid(
            """
import torch
def step(model, x):
    with torch.autocast(str(next(model.parameters()).device)):
        return model(x)
""",
            fixed="""
import torch
def step(model, x):
    with torch.autocast(next(model.parameters()).device.type):
        return model(x)
""",
        ),
        Invalid(
            """
import torch
with torch.autocast("cuda:0", dtype=torch.float16):
    out = model(x)
""",
            fixed="""
import torch
with torch.autocast("cuda", dtype=torch.float16):
    out = model(x)
""",
        ),
        Invalid(
            """
import torch
device = torch.device("cuda:0")
with torch.autocast(str(device)):
    out = model(x)
with torch.amp.autocast(device):
    out = model(x)
""",
            fixed="""
import torch
device = torch.device("cuda:0")
with torch.autocast(device.type):
    out = model(x)
with torch.amp.autocast(device.type):
    out = model(x)
""",
            count=2,
        ),
        Invalid(
            """
import torch
with torch.autocast(torch.device("cuda")):
    out = model(x)
""",
            fixed="""
import torch
with torch.autocast("cuda"):
    out = model(x)
""",
        ),
        Invalid(
            """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    a = model(x)
with torch.autocast(dtype=torch.bfloat16):
    b = model(x)
""",
            fixed="""
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    a = model(x)
with torch.autocast("cpu", dtype=torch.bfloat16):
    b = model(x)
""",
        ),
        Invalid(
            """
import torch
@torch.autocast
def forward(x):
    return x
"""
        ),
        Invalid(
            """
import torch
def step(model, x, rank):
    with torch.autocast(f"cuda:{rank}"):
        return model(x)
""",
            fixed="""
import torch
def step(model, x, rank):
    with torch.autocast("cuda"):
        return model(x)
""",
        ),
        # The device of a tensor is a torch.device.
        Invalid(
            """
import torch
def step(model, x):
    with torch.autocast(x.device):
        return model(x)
"""
        ),
        # Through a name (RoMa #56): a tensor's device made a string keeps its index.
        Invalid(
            """
import torch
def match(model, x):
    dt = str(x.device)
    with torch.autocast(device_type=dt, dtype=torch.float16):
        return model(x)
"""
        ),
        # An attribute set in __init__, used in another method; the value is fully known.
        Invalid(
            """
import torch
class Runner:
    def __init__(self, model):
        self.model = model
        self.device = "cuda:0"

    def run(self, x):
        with torch.autocast(self.device, dtype=torch.float16):
            return self.model(x)
""",
            fixed="""
import torch
class Runner:
    def __init__(self, model):
        self.model = model
        self.device = "cuda:0"

    def run(self, x):
        with torch.autocast(torch.device(self.device).type, dtype=torch.float16):
            return self.model(x)
""",
        ),
        # index-tts #117: "cuda:0" when CUDA is there, the caller's device otherwise: wrong on that path.
        Invalid(
            """
import torch
class TTS:
    def __init__(self, device=None):
        if device is not None:
            self.device = device
        elif torch.cuda.is_available():
            self.device = "cuda:0"
        else:
            self.device = "cpu"
        self.dtype = torch.float16

    def infer(self, x):
        with torch.no_grad():
            with torch.amp.autocast(self.device, enabled=self.dtype is not None, dtype=self.dtype):
                return self.gpt(x)
"""
        ),
        # A subscript of a dict literal (ComfyUI nodes): a torch.device with an index, made a string.
        Invalid(
            """
import torch
ctx = {"dev": torch.device("cuda:0"), "steps": 20}
def sample(model, x):
    with torch.autocast(str(ctx["dev"]), dtype=torch.bfloat16):
        return model(x)
""",
            fixed="""
import torch
ctx = {"dev": torch.device("cuda:0"), "steps": 20}
def sample(model, x):
    with torch.autocast(ctx["dev"].type, dtype=torch.bfloat16):
        return model(x)
""",
        ),
        # A helper of the file returning `str(device)` (SeedVR2).
        Invalid(
            """
import torch
device = torch.device(f"cuda:{local_rank}")
def get_device():
    return str(device)
def upscale(model, x):
    with torch.autocast(get_device(), dtype=torch.bfloat16):
        return model(x)
""",
            fixed="""
import torch
device = torch.device(f"cuda:{local_rank}")
def get_device():
    return str(device)
def upscale(model, x):
    with torch.autocast(torch.device(get_device()).type, dtype=torch.bfloat16):
        return model(x)
""",
        ),
        # A module constant.
        Invalid(
            """
import torch
DEVICE = "cuda:0"
def step(model, x):
    with torch.autocast(DEVICE):
        return model(x)
""",
            fixed="""
import torch
DEVICE = "cuda:0"
def step(model, x):
    with torch.autocast(torch.device(DEVICE).type):
        return model(x)
""",
        ),
        # A device type per backend, one of them indexed (torch's testing/_internal/common_fsdp.py): wrong
        # on that backend.
        Invalid(
            """
import torch
if TEST_CUDA:
    DEVICE_TYPE = "cuda"
elif TEST_HPU:
    DEVICE_TYPE = "hpu:0"
else:
    DEVICE_TYPE = "cpu"
def train(model, x):
    with torch.amp.autocast(DEVICE_TYPE):
        return model(x)
""",
            fixed="""
import torch
if TEST_CUDA:
    DEVICE_TYPE = "cuda"
elif TEST_HPU:
    DEVICE_TYPE = "hpu:0"
else:
    DEVICE_TYPE = "cpu"
def train(model, x):
    with torch.amp.autocast(torch.device(DEVICE_TYPE).type):
        return model(x)
""",
        ),
        # A torch.device attribute: not a string.
        Invalid(
            """
import torch
class Trainer:
    def __init__(self):
        self.device = torch.device("cuda")

    def step(self, x):
        with torch.autocast(self.device):
            return self.model(x)
""",
            fixed="""
import torch
class Trainer:
    def __init__(self):
        self.device = torch.device("cuda")

    def step(self, x):
        with torch.autocast(self.device.type):
            return self.model(x)
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        devices = file_devices(model)
        for call, qualified, scope in model.autocast_calls:
            if qualified in names.IMPLIED_DEVICE:
                continue
            # A device written out is checked whatever a `*args`/`**kwargs` splat beside it holds (issue 26,
            # principle 4): an index in it is wrong either way. Only its absence needs the splat to be empty.
            device = argument(call, 0, "device_type")
            if device is None:
                if has_star_args(call):
                    yield from check_splats(self, model, call, scope)
                    continue
                yield self.finding(
                    call,
                    f"`{short(call)}` has no device_type (a required argument): TypeError",
                    fix=insert_device_fix(model, call, devices),
                    context=scope.name,
                )
                continue
            yield from check_device(self, model, call, device.value, scope)
        for region in model.regions:
            if region.is_decorator and region.spec.call is None and region.spec.qualified_name not in names.IMPLIED_DEVICE:
                bare = [d for d in region.node.decorators if not isinstance(d.decorator, cst.Call) and "autocast" in code_of(d)]
                yield self.finding(
                    bare[0] if bare else region.node,
                    "a bare `@autocast` decorator passes the function as device_type: ValueError; "
                    "write `@torch.autocast(\"cuda\")` (the device type)",
                    context=region.scope.name if region.scope else "",
                )
