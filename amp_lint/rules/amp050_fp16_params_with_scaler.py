from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import argument, literal_bool, same_binding, short, sites_in_one_pass
from amp_lint.rules.base import Finding, Invalid, Rule

_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
_LOADERS = frozenset({"from_pretrained", "from_config"})


@dataclass(eq=False)
class HalfCast:
    """A module (or its parameters) made float16 / bfloat16: `model.half()`, `m = M.from_pretrained(..., torch_dtype=...)`."""

    key: str  # the module: "model", "self.model"
    site: CallSite  # the cast call
    dtype: str  # "float16" / "bfloat16"
    how: str  # what the message says was done
    made_at: Optional[cst.CSTNode] = None  # where the parameters are made float16, when not at `site`


class Fp16ParamsWithScaler(Rule):
    """
    ## What it does
    Finds a model whose parameters are made float16 (`model.half()`, `model.to(dtype=torch.float16)`,
    `Model.from_pretrained(..., torch_dtype=torch.float16)`, `p.data = p.data.half()` over
    `model.parameters()`, or a module class of the file that builds a float16 layer or parameter in its
    `__init__`: `nn.PReLU(64, dtype=torch.float16)`, `nn.Parameter(torch.HalfTensor(n, m))`) while an optimizer built from those parameters is stepped by an enabled
    `GradScaler` (`scaler.step(optimizer)` or `scaler.unscale_(optimizer)`).

    ## Why is this bad?
    `GradScaler.unscale_` (called by `step`) refuses float16 gradients: `_unscale_grads_(...,
    allow_fp16=False)` raises `ValueError: Attempting to unscale FP16 gradients.` on the first step
    (checked on torch 2.13 with `GradScaler("cpu")`). This is the most reported AMP failure in public
    issue threads (transformers #23165, LLaVA #363, Lightning #5140, bitsandbytes #945). Mixed precision
    keeps float32 master weights: autocast picks float16 per op, the parameters stay float32.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    ...
    scaler.step(optimizer)  # ValueError: Attempting to unscale FP16 gradients.
    ```

    ## Use instead
    ```python
    model = AutoModelForCausalLM.from_pretrained(name)  # float32 weights
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(**batch).loss
    ```

    ## Fix safety
    No automatic fix: dropping the cast changes the memory footprint, and the author may mean pure
    float16 training without the scaler. Reported only when the scaler is enabled (no literal
    `enabled=False`, or enabled by the same flag that guards the cast) and the cast and the step can run
    in one pass; not when the file casts the module back (`model.float()`). bfloat16 parameters do not
    raise on torch 2.13 and are left to AMP057.

    ## References
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.unscale_` calls `_unscale_grads_(optimizer,
      inv_scale, found_inf, False)`, which raises `ValueError("Attempting to unscale FP16 gradients.")`
    - `../shared/amp-reference/rules.md` AMP050 (E1, E4-n)
    - [`torch.autocast`](https://docs.pytorch.org/docs/stable/amp.html#torch.autocast): "You should not
      call `half()` or `bfloat16()` on your model(s) or inputs when using autocasting."
    """

    code = "AMP050"
    name = "fp16-parameters-with-grad-scaler"
    summary = "float16 model parameters stepped through a GradScaler (ValueError: Attempting to unscale FP16 gradients)"
    severity = Severity.ERROR
    needs = (r"[Ss]caler", r"[Hh]alf|float16", r"\bstep\b|\bunscale_\b")  # a literal first: alternations scan slowly
    # The dtype is an attribute (`torch.half`), which the identifier step does not keep.
    ast_needs = (r"[Ss]caler", r"\bstep\b|\bunscale_\b")

    valid = [
        # float32 weights, autocast does the casting.
        """
import torch
model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda"):
    loss = model(x).sum()
scaler.scale(loss).backward()
scaler.step(opt)
scaler.update()
""",
        # Pure float16 without a scaler step.
        """
import torch
model = Net().cuda().half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(x.half()).sum().backward()
opt.step()
""",
        # A disabled scaler does not unscale.
        """
import torch
model = Net().half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=False)
scaler.step(opt)
""",
        # Pure fp16 or AMP, one or the other.
        """
import torch
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
if args.pure_fp16:
    model.half()
    opt.step()
else:
    scaler.step(opt)
""",
        # bfloat16 parameters: unscale_ accepts them.
        """
import torch
model = Net().to(torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
scaler.step(opt)
""",
        # Cast back to float32 before training.
        """
import torch
model = Net().half()
model.float()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
scaler.step(opt)
""",
        # The optimizer steps other parameters (a float32 copy).
        """
import torch
model = Net().half()
master = Net()
opt = torch.optim.SGD(master.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
scaler.step(opt)
""",
        # Different flags: not certain to run together.
        """
import torch
model = Net()
if args.half:
    model.half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
scaler.step(opt)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    with torch.autocast("cuda"):
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, net):
        self.model = net.cuda()
        self.model.half()
        self.opt = torch.optim.Adam(self.model.parameters())
        self.scaler = torch.cuda.amp.GradScaler()

    def step(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
"""
        ),
        Invalid(
            """
import torch
model = Net().to(device, dtype=torch.half)
opt = torch.optim.SGD([{"params": model.parameters()}], lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=True)
scaler.unscale_(opt)
"""
        ),
        Invalid(
            """
import torch
model = Net()
for p in model.parameters():
    p.data = p.data.half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
scaler.step(opt)
"""
        ),
        # The same flag turns on the cast and the scaler.
        Invalid(
            """
import torch
model = Net()
if args.fp16:
    model.half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
scaler.step(opt)
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        casts = [cast for cast in half_casts(model) if cast.dtype == "float16"] + list(_built_float16(model))
        if not casts:
            return
        for cast in casts:
            if _cast_back(model, cast):
                continue
            step = _scaler_step_over(model, cast)
            if step is None:
                continue
            yield self.finding(
                cast.made_at or cast.site.call,
                f"{cast.how} makes `{cast.key}`'s parameters float16, and `{short(step.call, 40)}` unscales their "
                "gradients: ValueError: Attempting to unscale FP16 gradients. Keep the weights float32 and let "
                "autocast run the ops in float16",
                context=cast.site.scope.name,
                related=(("stepped here", step.call),) + ((("built here", cast.site.call),) if cast.made_at else ()),
            )


# --- shared with AMP057 --------------------------------------------------------------------------------


def half_casts(model: FileModel) -> Iterator[HalfCast]:
    """Module casts: in place (`model.half()`), assigned (`m = Net().half()`, `m = M.from_pretrained(...,
    torch_dtype=torch.float16)`), and parameter by parameter (`for p in model.parameters(): p.data = p.half()`)."""
    by_value = {id(a.value): a for a in model.assignment_sites}
    for site in model.call_sites:
        dtype = cast_dtype(site)
        if dtype is not None and site.receiver is not None:
            statement_value = getattr(site.small_statement, "value", None)
            if isinstance(site.small_statement, cst.Expr) and statement_value is site.call and site.func:
                yield HalfCast(site.func.rsplit(".", 1)[0], site, dtype, f"`{short(site.call)}`")
                continue
            assignment = by_value.get(id(site.call))
            if assignment is None:
                continue
            if assignment.target.endswith(".data"):
                owner = _parameters_loop_owner(assignment.target[: -len(".data")], site)
                if owner is not None:
                    yield HalfCast(owner, site, dtype, f"`{assignment.target} = {short(site.call, 30)}`")
                continue
            yield HalfCast(assignment.target, site, dtype, f"`{short(site.call)}`")
            continue
        loaded = _loaded_dtype(site)
        if loaded is not None and id(site.call) in by_value:
            yield HalfCast(by_value[id(site.call)].target, site, loaded, f"`{short(site.call)}`")


def cast_dtype(site: CallSite) -> Optional[str]:
    method = site.method
    if method in ("half", "bfloat16") and not site.call.args:
        return "float16" if method == "half" else "bfloat16"
    if method == "to":
        for arg in site.call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            dtype = _dtype_of(arg.value, site.scope)
            if dtype is not None:
                return dtype
    return None


def _dtype_of(expr: cst.BaseExpression, scope: Scope) -> Optional[str]:
    qualified = scope.names.qualify(expr)
    if qualified in names.FLOAT16:
        return "float16"
    if qualified in names.BFLOAT16:
        return "bfloat16"
    return None


_HALF_TENSORS = frozenset({"torch.HalfTensor", "torch.cuda.HalfTensor"})
_PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def _built_float16(model: FileModel) -> Iterator[HalfCast]:
    """`model = Backbone().cuda()` where a class of this file builds a float16 parameter in its `__init__`
    (`nn.PReLU(64, dtype=torch.float16)`, `nn.Parameter(torch.HalfTensor(n, m))`; issue 46, principle 6):
    the module is born with float16 parameters. Not for a class that touches `requires_grad` there (a frozen
    float16 layer has no gradients to unscale)."""
    builders: Dict[str, CallSite] = {}
    for site in model.call_sites:
        scope = site.scope
        if scope.class_name is None or not scope.is_function or scope.node.name.value != "__init__":
            continue
        if scope.class_name not in builders and _float16_parameter(site):
            builders[scope.class_name] = site
    builders = {name: site for name, site in builders.items() if "requires_grad" not in code_of(site.scope.node)}
    if not builders:
        return
    sites = {id(site.call): site for site in model.call_sites}
    for assignment in model.assignment_sites:
        built = assignment.value
        while isinstance(built, cst.Call) and isinstance(built.func, cst.Attribute) and built.func.attr.value in ("cuda", "to"):
            built = built.func.value  # `Backbone().cuda()`, `Backbone().to(device)`
        if not (isinstance(built, cst.Call) and isinstance(built.func, cst.Name) and built.func.value in builders):
            continue
        site = sites.get(id(assignment.value))
        if site is not None:
            layer = builders[built.func.value]
            how = f"`{short(layer.call, 40)}` in `{built.func.value}` (built as `{short(site.call, 30)}`)"
            yield HalfCast(assignment.target, site, "float16", how, made_at=layer.call)


def _float16_parameter(site: CallSite) -> bool:
    """`nn.Linear(..., dtype=torch.float16)`, `nn.Parameter(torch.HalfTensor(...))`,
    `nn.Parameter(torch.randn(..., dtype=torch.half))`."""
    qualified = site.qualified_name or ""
    if not qualified.startswith("torch.nn."):
        return False
    if qualified not in _PARAMETER_CLASSES:
        dtype = argument(site.call, None, "dtype")
        return dtype is not None and _dtype_of(dtype.value, site.scope) == "float16"
    for call in _calls_in(site.call.args[0].value if site.call.args else site.call.func):
        if site.scope.names.qualify(call.func) in _HALF_TENSORS:
            return True
        dtype = argument(call, None, "dtype")
        if dtype is not None and _dtype_of(dtype.value, site.scope) == "float16":
            return True
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "half" and not call.args:
            return True
    return False


def _loaded_dtype(site: CallSite) -> Optional[str]:
    """`X.from_pretrained(..., torch_dtype=torch.float16)` (also `dtype=`, the newer transformers keyword)."""
    if site.method not in _LOADERS:
        return None
    for keyword in ("torch_dtype", "dtype"):
        arg = argument(site.call, None, keyword)
        if arg is not None:
            return _dtype_of(arg.value, site.scope)
    return None


def _parameters_loop_owner(variable: str, site: CallSite) -> Optional[str]:
    """`for p in model.parameters():` around the site, binding `variable`: "model"."""
    for loop in reversed(site.loops):
        if not isinstance(loop, cst.For) or dotted_name(loop.target) != variable:
            continue
        owner = _parameters_owner(loop.iter)
        if owner is not None:
            return owner
    return None


def _parameters_owner(expr: cst.BaseExpression) -> Optional[str]:
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in _PARAMETER_METHODS
    ):
        return dotted_name(expr.func.value)
    return None


def _cast_back(model: FileModel, cast: HalfCast) -> bool:
    """Does the file make the module float32 again (`model.float()`, `model.to(torch.float32)`)?"""
    for site in model.call_sites:
        if site.receiver is None or dotted_name(site.receiver) != cast.key:
            continue
        if site.method == "float" and not site.call.args:
            return True
        if site.method == "to" and any(site.scope.names.qualify(a.value) in names.OTHER_FLOAT for a in site.call.args):
            return True
    return False


def _optimizers_over(model: FileModel, cast: HalfCast) -> List[str]:
    """Keys of optimizers built from `cast.key.parameters()` in a scope where the key names the same module."""
    keys = []
    for assignment in model.assignment_sites:
        value = assignment.value
        if not isinstance(value, cst.Call):
            continue
        qualified = assignment.scope.names.qualify(value.func)
        if qualified is None or not names.is_optimizer_class(qualified):
            continue
        if not same_binding(model, cast.key, cast.site.scope, assignment.scope):
            continue
        if any(_parameters_owner(node) == cast.key for node in _calls_in(value)):
            keys.append(assignment)
    return keys


def _calls_in(node: cst.CSTNode) -> Iterator[cst.Call]:
    pending: List[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Call):
            yield current
        pending.extend(current.children)


def _scaler_step_over(model: FileModel, cast: HalfCast) -> Optional[CallSite]:
    """The `scaler.step(opt)` / `scaler.unscale_(opt)` of an enabled scaler over an optimizer of those parameters."""
    optimizers = _optimizers_over(model, cast)
    if not optimizers:
        return None
    for site in model.call_sites:
        if site.method not in ("step", "unscale_") or not site.call.args or site.receiver is None:
            continue
        scaler_key = dotted_name(site.receiver)
        optimizer_key = dotted_name(site.call.args[0].value)
        if scaler_key is None or optimizer_key is None:
            continue
        bindings = [b for b in model.scaler_bindings(scaler_key, site.scope) if b.call is not None]
        if not bindings:
            continue
        for optimizer in optimizers:
            if optimizer.target != optimizer_key or not same_binding(model, optimizer_key, optimizer.scope, site.scope):
                continue
            if _runs_with(model, cast, site, optimizer, bindings):
                return site
    return None


def _runs_with(model: FileModel, cast: HalfCast, step: CallSite, optimizer, bindings) -> bool:
    """Certain that the cast, the optimizer and an enabled scaler's step meet in one run."""
    for binding in bindings:
        if binding.maybe_none:
            continue
        condition = _scaler_condition(binding)
        if condition is False:
            continue
        cast_conditions = [b.condition for b in cast.site.branches]
        if cast.site.scope is step.scope and step.loops and step.loops[0] not in cast.site.loops and cast.site.order > step.order:
            continue  # `model.half(); torch.save(...)` after the training loop: an export, not what the loop steps
        if cast.site.scope is step.scope:
            if not sites_in_one_pass(model, cast.site, step):
                continue
            step_conditions = {b.condition for b in step.branches}
            unexplained = [c for c in cast_conditions if c not in step_conditions]
        else:
            unexplained = cast_conditions
        if optimizer.branches and optimizer.scope is cast.site.scope and not sites_in_one_pass(model, optimizer, cast.site):
            continue
        if condition is True and not unexplained:
            return True
        # `if args.fp16: model.half()` with `GradScaler(enabled=args.fp16)`: the same flag.
        if isinstance(condition, str) and all(c == (condition, True) for c in unexplained):
            return True
    return False


def _scaler_condition(binding):
    """True: enabled; False: disabled; a normalised flag text when `enabled=<flag>`; None: unknown."""
    call = binding.call
    if binding.enabled is True:
        return True
    if binding.enabled is False:
        return False
    position = 4 if binding.qualified_name in names.IMPLIED_DEVICE else 5
    arg = argument(call, position, "enabled")
    if arg is None:
        return None
    if literal_bool(arg.value) is not None:
        return literal_bool(arg.value)
    return "".join(code_of(arg.value).split())
