"""AMP070-AMP073: the deprecated device-specific spellings `torch.cuda.amp.*` and `torch.cpu.amp.*`.

The fixes are built from how the file spells the API, never by string surgery:
- through `torch` (`torch.cuda.amp.autocast(...)`, `import torch as T`): the reference becomes
  `torch.amp.autocast("cuda", ...)` in place;
- through an imported symbol (`from torch.cuda.amp import autocast as ac`) or module
  (`import torch.cuda.amp as tca`, `from torch.cuda import amp`): the import is pointed at `torch.amp`
  and every use gains the device argument, as one fix shared by all the uses of that import. When some
  use cannot be rewritten (the name is passed around as a value), the import and its uses are left alone.
"""

from __future__ import annotations

from typing import ClassVar, Dict, FrozenSet, Iterator, List, Optional, Tuple, Union

import libcst as cst

from amp_lint.analysis import names
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder, keyword_arg, split_args
from amp_lint.analysis.file_model import DeprecatedUse, FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.rules._version_shims import bound_differently, bound_twice, in_old_torch_branch
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

# Names that exist in torch.amp under the same name.
_MOVABLE = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})
# Parameters of the deprecated autocast classes, in positional order.
_OLD_AUTOCAST_PARAMS = ("enabled", "dtype", "cache_enabled")

ImportNode = Union[cst.Import, cst.ImportFrom]


class _DeprecatedSpelling(Rule):
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    qualified_names: ClassVar[FrozenSet[str]] = frozenset()

    def check(self, model: FileModel) -> Iterator[Finding]:
        target = self.options.get("target_torch")
        fixer = _SpellingFixer(model, target)
        for use in model.deprecated_uses:
            if use.qualified_name not in self.qualified_names:
                continue
            device, modern = names.DEPRECATED_AMP[use.qualified_name]
            if not supports(target, names.REPLACEMENT_SINCE[modern]):
                continue  # the replacement is newer than the oldest torch the project supports
            if in_old_torch_branch(model, use.node):
                continue  # a fallback that only old torch runs
            head = _head_name(use.node)
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
    which the new signature shares.

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
    ]


class DeprecatedCustomFwdBwd(_DeprecatedSpelling):
    """
    ## What it does
    Finds `torch.cuda.amp.custom_fwd` / `torch.cuda.amp.custom_bwd`, deprecated since torch 2.4.

    ## Why is this bad?
    They emit ``FutureWarning: `torch.cuda.amp.custom_fwd(args...)` is deprecated. Please use
    `torch.amp.custom_fwd(args..., device_type='cuda')` instead.`` The replacements take a required
    keyword `device_type`: a bare `@torch.amp.custom_fwd` raises `TypeError` at import time.

    ## Example
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.cuda.amp.custom_fwd
        def forward(ctx, a, b): ...
    ```

    ## Use instead
    ```python
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, a, b): ...
    ```

    ## Fix safety
    Safe. `device_type="cuda"` is added, keeping `cast_inputs=` and other keywords.

    ## Torch versions
    `torch.amp.custom_fwd(device_type=...)` / `custom_bwd` are new in torch 2.4 (pytorch/pytorch#126531);
    with a `target-torch` below 2.4 nothing is reported. Version shims
    (`if torch.__version__ >= "2.4": ... else: custom_fwd = torch.cuda.amp.custom_fwd`) are left alone.

    ## References
    - [AMP examples: autocast and custom autograd functions](https://docs.pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions)
    - pytorch/pytorch#126527
    """

    code = "AMP073"
    name = "deprecated-custom-fwd-bwd"
    summary = "Deprecated torch.cuda.amp.custom_fwd / custom_bwd"
    needs = (r"\bcustom_[fb]wd\b", r"\bamp\b")
    qualified_names = frozenset({"torch.cuda.amp.custom_fwd", "torch.cuda.amp.custom_bwd"})

    valid = [
        """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x):
        return x
""",
        # A version shim (Megatron-LM): the old spelling for torch < 2.4.
        """
import functools
import torch
if torch.__version__ >= "2.4.0":
    custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
else:
    custom_fwd = torch.cuda.amp.custom_fwd
""",
    ]
    invalid = [
        Invalid(
            """
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, g):
        return g
""",
            fixed="""
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(cast_inputs=torch.float32, device_type="cuda")
    def forward(ctx, x):
        return x

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        return g
""",
            count=2,
        ),
        Invalid(
            """
from torch.cuda.amp import custom_fwd, custom_bwd
class F(Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x

    @staticmethod
    @custom_bwd
    def backward(ctx, g):
        return g
""",
            fixed="""
from torch.amp import custom_fwd, custom_bwd
class F(Function):
    @staticmethod
    @custom_fwd(device_type="cuda")
    def forward(ctx, x):
        return x

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, g):
        return g
""",
            count=2,
        ),
    ]


# --- the fixes --------------------------------------------------------------------------------------


class _SpellingFixer:
    """Builds the fix for each deprecated use; uses of one import share one fix."""

    def __init__(self, model: FileModel, target: Optional[str] = None) -> None:
        self.model = model
        self.target = target
        self._binding_fixes: Dict[int, Optional[Fix]] = {}

    def fix_for(self, use: DeprecatedUse) -> Optional[Fix]:
        head = _head_name(use.node)
        if head is None:
            return None
        resolved = use.scope.names.lookup(head.value)
        if resolved == "torch":
            return self._through_torch(use, head)
        binding = self._import_binding(use, head.value, resolved)
        if binding is None:
            return None
        statement, scope = binding
        if id(statement) not in self._binding_fixes:
            self._binding_fixes[id(statement)] = self._rewrite_import_and_uses(statement, scope)
        return self._binding_fixes[id(statement)]

    # -- torch.cuda.amp.X spelled through `torch` --
    def _through_torch(self, use: DeprecatedUse, head: cst.Name) -> Optional[Fix]:
        device, modern = names.DEPRECATED_AMP[use.qualified_name]
        target = use.call if use.call is not None else use.decorator
        if target is None:
            return None
        new_func = cst.Attribute(value=cst.Attribute(value=cst.Name(head.value), attr=cst.Name("amp")), attr=cst.Name(modern))
        builder = FixBuilder(self.model.module)
        if not _can_rewrite(use, modern):
            return None

        def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
            return _rewrite_use(builder, updated, modern, device, new_func)

        builder.replace(target, rewrite)
        return builder.build(f"Use `{head.value}.amp.{modern}`", Applicability.SAFE)

    # -- imported symbol or module --
    def _import_binding(self, use: DeprecatedUse, local: str, resolved: Optional[str]) -> Optional[Tuple[ImportNode, Scope]]:
        if resolved is None:
            return None
        chain = list(use.scope.chain())
        best: Optional[Tuple[ImportNode, Scope]] = None
        for statement, scope in self.model.imports:
            if scope in chain and local in _bound_names(statement):
                if best is None or chain.index(scope) <= chain.index(best[1]):
                    best = (statement, scope)
        return best

    def _rewrite_import_and_uses(self, statement: ImportNode, scope: Scope) -> Optional[Fix]:
        new_statement = _import_pointing_at_torch_amp(statement)
        if new_statement is None:
            return None
        local_names = set(_bound_names(statement))
        uses = [
            use
            for use in self.model.deprecated_uses
            if (head := _head_name(use.node)) is not None and head.value in local_names and scope in list(use.scope.chain())
        ]
        if any(name.value in local_names and scope in list(ref_scope.chain()) for name, ref_scope in self.model.amp_module_refs):
            return None  # the module alias is also used for something torch.amp does not have
        if not _import_supported(statement, self.target):
            return None
        builder = FixBuilder(self.model.module)
        for use in uses:
            device, modern = names.DEPRECATED_AMP[use.qualified_name]
            if not _can_rewrite(use, modern) or not supports(self.target, names.REPLACEMENT_SINCE[modern]):
                return None
            if in_old_torch_branch(self.model, use.node):
                return None  # the import also serves a fallback for old torch
            target = use.call if use.call is not None else use.decorator
            builder.replace(target, lambda updated, m=modern, d=device: _rewrite_use(builder, updated, m, d, None))
        builder.replace(statement, lambda updated: new_statement)
        return builder.build("Import from `torch.amp` and pass the device", Applicability.SAFE, key=("AMP07x", statement))


def _import_supported(statement: ImportNode, target: Optional[str]) -> bool:
    """Does every name the rewritten `from torch.amp import ...` would import exist in the target torch?"""
    if isinstance(statement, cst.ImportFrom) and not isinstance(statement.names, cst.ImportStar):
        for alias in statement.names:
            since = names.REPLACEMENT_SINCE.get(dotted_name(alias.name) or "")
            if since is not None and not supports(target, since):
                return False
    return True


def _head_name(node: cst.BaseExpression) -> Optional[cst.Name]:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def _bound_names(statement: ImportNode) -> List[str]:
    if isinstance(statement.names, cst.ImportStar):
        return []
    bound = []
    for alias in statement.names:
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            bound.append(alias.asname.name.value)
        elif isinstance(statement, cst.Import):
            bound.append((dotted_name(alias.name) or "").split(".")[0])
        else:
            bound.append(dotted_name(alias.name) or "")
    return bound


def _import_pointing_at_torch_amp(statement: ImportNode) -> Optional[ImportNode]:
    """The same import, from `torch.amp` instead of `torch.cuda.amp` / `torch.cpu.amp`; None if impossible."""
    if isinstance(statement, cst.ImportFrom):
        if statement.relative or statement.module is None or isinstance(statement.names, cst.ImportStar):
            return None
        module = dotted_name(statement.module)
        imported = [dotted_name(alias.name) for alias in statement.names]
        if module in names.DEPRECATED_AMP_MODULES and all(name in _MOVABLE for name in imported):
            return statement.with_changes(module=cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp")))
        if module in ("torch.cuda", "torch.cpu") and imported == ["amp"]:
            return statement.with_changes(module=cst.Name("torch"))
        return None
    new_names = []
    changed = False
    for alias in statement.names:
        module = dotted_name(alias.name)
        if module in names.DEPRECATED_AMP_MODULES and alias.asname is not None:
            alias = alias.with_changes(name=cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp")))
            changed = True
        new_names.append(alias)
    return statement.with_changes(names=new_names) if changed else None


def _can_rewrite(use: DeprecatedUse, modern: str) -> bool:
    """A call, or a decorator; not a value passed around."""
    if use.call is not None:
        _, _, has_star = split_args(use.call)
        if has_star:
            return False
        if modern in ("custom_fwd", "custom_bwd"):
            positional, _, _ = split_args(use.call)
            return not positional
        return True
    return use.decorator is not None and modern in ("custom_fwd", "custom_bwd")


def _rewrite_use(builder: FixBuilder, updated: cst.CSTNode, modern: str, device: str, new_func) -> cst.CSTNode:
    """Add the device argument (and keywordize the old autocast positionals) to a call or decorator.

    Existing arguments keep their commas and line breaks; the new device argument copies the layout of
    the argument it goes in front of.
    """
    device_string = cst.SimpleString(builder.string(device))
    if isinstance(updated, cst.Decorator):  # bare @custom_fwd
        func = new_func if new_func is not None else updated.decorator
        return updated.with_changes(decorator=cst.Call(func=func, args=(keyword_arg("device_type", device_string),)))
    assert isinstance(updated, cst.Call)
    func = new_func if new_func is not None else updated.func
    args = list(updated.args)
    if modern in ("autocast", "GradScaler"):
        if modern == "autocast":
            position = 0
            for index, arg in enumerate(args):
                if arg.keyword is None and not arg.star:
                    args[index] = arg.with_changes(
                        keyword=cst.Name(_OLD_AUTOCAST_PARAMS[position]),
                        equal=keyword_arg("x", arg.value).equal,
                    )
                    position += 1
        first = cst.Arg(value=device_string)
        if args:
            first = first.with_changes(comma=_separator(args))
        args.insert(0, first)
    elif not any(a.keyword is not None and a.keyword.value == "device_type" for a in args):
        device_arg = keyword_arg("device_type", device_string)
        if args:
            last = args[-1]
            trailing = last.comma if isinstance(last.comma, cst.Comma) else cst.MaybeSentinel.DEFAULT
            args[-1] = last.with_changes(comma=last.comma if isinstance(last.comma, cst.Comma) else _separator(args))
            device_arg = device_arg.with_changes(comma=trailing)
        args.append(device_arg)
    return updated.with_changes(func=func, args=tuple(args))


def _separator(args) -> cst.Comma:
    """The call's own argument separator: a line break in a one-per-line call, else ", ".

    Borrowed from an argument whose comma carries no comment (a comment belongs to its own argument).
    """
    for arg in args:
        comma = arg.comma
        if not isinstance(comma, cst.Comma):
            continue
        after = comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace):
            if after.first_line.comment is None and not any(line.comment for line in after.empty_lines):
                return comma
        elif isinstance(after, cst.SimpleWhitespace):
            return comma.with_changes(whitespace_before=cst.SimpleWhitespace(""))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
