"""AMP070-AMP072 (AMP073 in `amp073_deprecated_custom_fwd_bwd`): the deprecated device-specific spellings `torch.cuda.amp.*` and `torch.cpu.amp.*`, wherever
they are referenced: calls, decorators (with or without parentheses), factories passed uncalled
(`ctx = amp.autocast if fp16 else nullcontext`), aliases, and base classes (`class S(torch.cuda.amp.GradScaler)`).
The fixes are built in `_deprecation_fixes`.
"""

from __future__ import annotations

from typing import ClassVar, FrozenSet, Iterator


from amp_lint.analysis import names
from amp_lint.analysis.file_model import FileModel
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.rules._deprecation_fixes import SpellingFixer, base_class_fix, head_name
from amp_lint.rules._helpers import class_bases
from amp_lint.rules._version_shims import bound_differently, bound_twice, in_old_torch_branch
from amp_lint.rules.base import Finding, Invalid, Rule


class _DeprecatedSpelling(Rule):
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    qualified_names: ClassVar[FrozenSet[str]] = frozenset()

    def check(self, model: FileModel) -> Iterator[Finding]:
        target = self.options.get("target_torch")
        fixer = SpellingFixer(model, target)
        for use in model.deprecated_uses:
            if use.qualified_name not in self.qualified_names:
                continue
            device, modern = names.DEPRECATED_AMP[use.qualified_name]
            if not supports(target, names.REPLACEMENT_SINCE[modern]):
                continue  # the replacement is newer than the oldest torch the project supports
            if in_old_torch_branch(model, use.node):
                continue  # a fallback that only old torch runs
            head = head_name(use.node)
            through_import = head is not None and use.scope.names.lookup(head.value) != "torch"
            if through_import and bound_differently(model, head.value, use.scope):
                continue  # `try: from torch.amp import X` / `except ImportError: from torch.cuda.amp import X`
            old = use.qualified_name.replace(".autocast_mode", "").replace(".grad_scaler", "")
            new = _modern_call_text(modern, device)
            yield self.finding(
                use.node,
                f"`{old}` is deprecated; use `{new}`",
                fix=None if through_import and bound_twice(model, head.value, use.scope) else fixer.fix_for(use),
                context=use.scope.name,
            )
        yield from self._base_classes(model, target)

    def _base_classes(self, model: FileModel, target) -> Iterator[Finding]:
        """`class S(torch.cuda.amp.GradScaler)`: constructing S runs the deprecated `__init__` (through
        `super().__init__()`, or inherited)."""
        for cls in model.classes.values():
            for base, qualified in zip(cls.bases, class_bases(model, cls)):
                if qualified not in self.qualified_names:
                    continue
                device, modern = names.DEPRECATED_AMP[qualified]
                if not supports(target, names.REPLACEMENT_SINCE[modern]) or in_old_torch_branch(model, cls):
                    continue
                old = qualified.replace(".autocast_mode", "").replace(".grad_scaler", "")
                yield self.finding(
                    base.value,
                    f"`{cls.name.value}` subclasses `{old}`, which is deprecated (building one runs its deprecated "
                    f"`__init__`); subclass `torch.amp.{modern}` and pass {device!r} to `super().__init__`",
                    fix=base_class_fix(model, cls, base, qualified, modern, device),
                )


def _modern_call_text(modern: str, device: str) -> str:
    if modern in ("custom_fwd", "custom_bwd"):
        return f"torch.amp.{modern}(device_type={device!r})"
    return f"torch.amp.{modern}({device!r}, ...)"


class DeprecatedCudaAutocast(_DeprecatedSpelling):
    """
    ## What it does
    Finds `torch.cuda.amp.autocast`, deprecated since torch 2.4, in any spelling
    (`from torch.cuda.amp import autocast`, `import torch.cuda.amp as amp`, ...).

    ## Why is this bad?
    It emits ``FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use
    `torch.amp.autocast('cuda', args...)` instead.`` and will be removed. Its positional parameters
    also differ from the new API's: `torch.cuda.amp.autocast(False)` means `enabled=False`, while
    `torch.amp.autocast("cuda", False)` would mean `dtype=False`.

    ## Example
    ```python
    with torch.cuda.amp.autocast(enabled=use_amp):
        loss = model(x)
    ```

    ## Use instead
    ```python
    with torch.amp.autocast("cuda", enabled=use_amp):
        loss = model(x)
    ```

    ## Fix safety
    Safe. The device argument is added and positional arguments become keywords (`enabled=`,
    `dtype=`, `cache_enabled=`). Imports are rewritten to `torch.amp` with the same local names. No fix
    when the name is used as a value (passed to `functools.partial`, stored), since the call sites
    elsewhere would then lack the device.

    ## Torch versions
    The replacement `torch.amp.autocast(device_type, ...)` needs torch 1.13 (`torch.autocast`: 1.10); with a
    `target-torch` below 1.13 nothing is reported. Code that exists for old torch is left alone: the
    `except` of a `try` that uses `torch.amp`, the other side of a version test
    (`if _TORCH_GREATER_EQUAL_2_4: ... else: torch.cuda.amp.autocast()`), and a name that two imports bind
    to different things (`try: from torch.amp import autocast` / `except ImportError: from torch.cuda.amp
    import autocast`). A name two imports bind to the same deprecated thing is reported, not fixed.

    ## References
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html) (deprecation warning)
    - pytorch/pytorch#126527 (the deprecation, torch 2.4)
    """

    code = "AMP070"
    name = "deprecated-cuda-autocast"
    summary = "Deprecated torch.cuda.amp.autocast"
    needs = (r"\bautocast\b", r"\bamp\b")
    qualified_names = frozenset({"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"})

    valid = [
        """
import torch
with torch.amp.autocast("cuda", enabled=use_amp):
    out = model(x)
""",
        """
from torch.amp import autocast
with autocast("cuda"):
    out = model(x)
""",
        # A fallback for torch < 1.13 (ultralytics' `autocast` helper).
        """
import torch
def autocast(enabled, device="cuda"):
    if TORCH_1_13:
        return torch.amp.autocast(device, enabled=enabled)
    else:
        return torch.cuda.amp.autocast(enabled)
""",
        # `else:` of a branch that uses torch.amp (lightning_fabric's precision plugin).
        """
import torch
if _TORCH_GREATER_EQUAL_2_4:
    ctx = torch.autocast("cuda", dtype=torch.float16)
else:
    ctx = torch.cuda.amp.autocast(dtype=torch.float16)
""",
        # The name means torch.amp.autocast on new torch: no second device.
        """
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast
with autocast("cuda", enabled=True):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.cuda.amp.autocast(enabled=use_amp):
    out = model(x)
""",
            fixed="""
import torch
with torch.amp.autocast("cuda", enabled=use_amp):
    out = model(x)
""",
        ),
        Invalid(
            """
import torch as T
with T.cuda.amp.autocast(False, T.bfloat16):
    out = model(x)
""",
            fixed="""
import torch as T
with T.amp.autocast("cuda", enabled=False, dtype=T.bfloat16):
    out = model(x)
""",
        ),
        Invalid(
            """
from torch.cuda.amp import autocast as ac
with ac():
    out = model(x)
with ac(dtype=torch.bfloat16):
    out = model(x)
""",
            fixed="""
from torch.amp import autocast as ac
with ac("cuda"):
    out = model(x)
with ac("cuda", dtype=torch.bfloat16):
    out = model(x)
""",
            count=2,
        ),
        Invalid(
            """
import torch.cuda.amp as tca
with tca.autocast():
    out = model(x)
""",
            fixed="""
import torch.amp as tca
with tca.autocast("cuda"):
    out = model(x)
""",
        ),
        Invalid(
            """
from torch.cuda import amp
with amp.autocast(enabled=True):
    out = model(x)
""",
            fixed="""
from torch import amp
with amp.autocast("cuda", enabled=True):
    out = model(x)
""",
        ),
        # Used as a value: reported, not fixed.
        Invalid(
            """
import functools
from torch.cuda.amp import autocast
amp_ctx = functools.partial(autocast, enabled=True)
""",
        ),
        # Issue 26, principle 4: a factory passed uncalled, through the module; its calls would lack the device.
        Invalid(
            """
from contextlib import nullcontext
from torch.cuda import amp
ctx = amp.autocast if fp16 else nullcontext
with ctx():
    out = model(x)
""",
        ),
        # An alias: the name is deprecated where it is referenced.
        Invalid(
            """
import torch
ac = torch.cuda.amp.autocast
with ac(dtype=torch.float16):
    out = model(x)
""",
        ),
        # A base class: an autocast subclass (its positional parameters differ: reported, not fixed).
        Invalid(
            """
import torch
class Autocast(torch.cuda.amp.autocast):
    def __init__(self, enabled=True):
        super().__init__(enabled)
""",
        ),
    ]


class DeprecatedCpuAutocast(_DeprecatedSpelling):
    """
    ## What it does
    Finds `torch.cpu.amp.autocast`, deprecated since torch 2.4, in any spelling.

    ## Why is this bad?
    It emits ``FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated. Please use
    `torch.amp.autocast('cpu', args...)` instead.`` and will be removed.

    ## Example
    ```python
    with torch.cpu.amp.autocast(dtype=torch.bfloat16):
        out = model(x)
    ```

    ## Use instead
    ```python
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    ```

    ## Fix safety
    Safe, with the same argument mapping as AMP070.

    ## Torch versions
    As AMP070: the replacement needs torch 1.13; version fallbacks are left alone.

    ## References
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html)
    - pytorch/pytorch#126527
    """

    code = "AMP071"
    name = "deprecated-cpu-autocast"
    summary = "Deprecated torch.cpu.amp.autocast"
    needs = (r"\bautocast\b", r"\bamp\b")
    qualified_names = frozenset({"torch.cpu.amp.autocast", "torch.cpu.amp.autocast_mode.autocast"})

    valid = [
        """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.cpu.amp.autocast(dtype=torch.bfloat16):
    out = model(x)
""",
            fixed="""
import torch
with torch.amp.autocast("cpu", dtype=torch.bfloat16):
    out = model(x)
""",
        ),
    ]


class DeprecatedGradScaler(_DeprecatedSpelling):
    """
    ## What it does
    Finds `torch.cuda.amp.GradScaler` and `torch.cpu.amp.GradScaler`, deprecated since torch 2.4.

    ## Why is this bad?
    They emit ``FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use
    `torch.amp.GradScaler('cuda', args...)` instead.`` and will be removed.

    Also a subclass (`class S(torch.cuda.amp.GradScaler)`): building one runs the deprecated `__init__`.

    ## Example
    ```python
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    ```

    ## Fix safety
    Safe. The device becomes the first argument; the other positional arguments keep their order,
    which the new signature shares. For a subclass spelled through `torch` that defines `__init__`, the
    base becomes `torch.amp.GradScaler` and each `super().__init__(...)` gains the device first; without an
    `__init__` of its own (`S(1024.0)` would pass the scale as the device), or through an imported name,
    it is reported without a fix.

    ## Torch versions
    `torch.amp.GradScaler(device, ...)` is new in torch 2.3 (the 2.2 docs' `torch/cuda/amp/grad_scaler.py`
    holds the whole class; 2.3's subclasses `torch.amp.GradScaler`). With a `target-torch` below 2.3
    nothing is reported, and an import that also brings `GradScaler` is not rewritten for an autocast fix.
    Fallbacks for old torch are left alone (`except AttributeError: torch.cuda.amp.GradScaler()`,
    `torch.amp.GradScaler("cuda") if TORCH_2_4 else torch.cuda.amp.GradScaler()`), and after
    `try: from torch.amp import GradScaler` / `except ImportError: from torch.cuda.amp import GradScaler`
    the calls are written for `torch.amp` already: no second device is added.

    ## References
    - [Automatic Mixed Precision package: Gradient Scaling](https://docs.pytorch.org/docs/stable/amp.html#gradient-scaling)
    - pytorch/pytorch#126527
    """

    code = "AMP072"
    name = "deprecated-grad-scaler"
    summary = "Deprecated torch.cuda.amp.GradScaler / torch.cpu.amp.GradScaler"
    needs = (r"\bGradScaler\b", r"\bamp\b")
    qualified_names = frozenset(
        {
            "torch.cuda.amp.GradScaler",
            "torch.cuda.amp.grad_scaler.GradScaler",
            "torch.cpu.amp.GradScaler",
            "torch.cpu.amp.grad_scaler.GradScaler",
        }
    )

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
""",
        # torchrl's trainers.py: one name, two imports.
        """
try:
    from torch.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler
scaler = GradScaler("cuda", enabled=True)
""",
        # timm's utils/cuda.py: the except branch runs only where torch.amp.GradScaler fails.
        """
import torch
class NativeScaler:
    def __init__(self, device="cuda"):
        try:
            self._scaler = torch.amp.GradScaler(device)
        except (AttributeError, TypeError):
            self._scaler = torch.cuda.amp.GradScaler()
""",
        # A subclass of the new class.
        """
import torch
class LoggingScaler(torch.amp.GradScaler):
    def __init__(self):
        super().__init__("cuda")
""",
        # A base chosen for old torch (the other side of a version test).
        """
import torch
if TORCH_2_4:
    Base = torch.amp.GradScaler
else:
    class Base(torch.cuda.amp.GradScaler):
        pass
""",
        # ultralytics: a version test picks the spelling.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=amp) if TORCH_2_4 else torch.cuda.amp.GradScaler(enabled=amp)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
""",
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
""",
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler, autocast
scaler = GradScaler(2.0**12)
with autocast():
    loss = model(x)
""",
            fixed="""
from torch.amp import GradScaler, autocast
scaler = GradScaler("cuda", 2.0**12)
with autocast("cuda"):
    loss = model(x)
""",
        ),
        # Issue 26, principle 4: a base class, and its super().__init__() (which runs the deprecated __init__).
        Invalid(
            """
import torch
class LoggingScaler(torch.cuda.amp.GradScaler):
    def __init__(self, init_scale=2.0**16, **kwargs):
        super().__init__(init_scale, **kwargs)
        self.skipped = 0
""",
            fixed="""
import torch
class LoggingScaler(torch.amp.GradScaler):
    def __init__(self, init_scale=2.0**16, **kwargs):
        super().__init__("cuda", init_scale, **kwargs)
        self.skipped = 0
""",
        ),
        # No `__init__` of its own: `LoggingScaler(1024.0)` would pass the scale as the device: not fixed.
        Invalid(
            """
import torch
class LoggingScaler(torch.cuda.amp.GradScaler):
    def step(self, optimizer):
        return super().step(optimizer)
""",
        ),
        # Imported by name: the import would change too: not fixed.
        Invalid(
            """
from torch.cuda.amp import GradScaler
class LoggingScaler(GradScaler):
    def __init__(self):
        super().__init__()
""",
        ),
    ]
