from __future__ import annotations

from typing import Iterator, List, Optional

import libcst as cst

from amp_lint.analysis.flow_queries import site_path, whole_scope_flow
from amp_lint.analysis.paths import PROVED

from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder
from amp_lint.rules._helpers import literal_string, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_APEX = {
    "apex.amp.initialize": "initialize",
    "apex.amp.scale_loss": "scale_loss",
    "apex.amp.master_params": "master_params",
    "apex.amp.state_dict": "state_dict",
    "apex.amp.load_state_dict": "load_state_dict",
}
_MIXED_LEVELS = ("O1", "O2")


class ApexAmp(Rule):
    """
    ## What it does
    Finds NVIDIA apex's AMP: `amp.initialize(model, optimizer, opt_level=...)`,
    `with amp.scale_loss(loss, optimizer) as scaled_loss:`, `amp.master_params(optimizer)`,
    `amp.state_dict()`.

    ## Why is this bad?
    apex.amp is deprecated in favour of `torch.amp` (apex's README: "apex.amp ... deprecated; use
    PyTorch AMP"); it is not maintained for new torch releases and its `opt_level`s patch torch functions
    globally. Code that never moved keeps breaking on upgrades (dlrover #520, torchdistill #248,
    axolotl #696). `torch.autocast` plus `torch.amp.GradScaler` does the same job natively.

    ## Example
    ```python
    from apex import amp
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = criterion(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Unsafe. For the whole recipe in one function (`model, optimizer = amp.initialize(model, optimizer,
    opt_level="O1" or "O2")`, `with amp.scale_loss(loss, optimizer) as s: s.backward()`, then
    `optimizer.step()`, optionally `clip_grad_norm_(amp.master_params(optimizer), ...)`) the fix builds a
    `GradScaler`, backpropagates `scaler.scale(loss)`, steps through the scaler with one `update()`, and
    unscales before a clip over the optimizer's parameters. It changes the numerics (apex's casts are
    gone until the forward is put under `torch.autocast`, which the fix cannot place), hence unsafe.
    Other shapes (the recipe split over methods, O3, `amp.state_dict()`) are reported without a fix.
    A file that also builds a torch GradScaler or autocast offers apex as one backend among two (timm's
    `ApexScaler` beside `NativeScaler`) and is not reported.

    ## Torch versions
    The fix writes `torch.amp.GradScaler("cuda")` (torch 2.3), or `torch.cuda.amp.GradScaler()` when the
    project's `target-torch` is older.

    ## References
    - [torch.amp](https://docs.pytorch.org/docs/stable/amp.html) and
      [AMP examples](https://docs.pytorch.org/docs/stable/notes/amp_examples.html) (the replacement recipe)
    - NVIDIA/apex README (apex.amp deprecation)
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.scale`, `unscale_`, `step`, `update`
    """

    code = "AMP077"
    name = "apex-amp"
    summary = "NVIDIA apex.amp (deprecated): use torch.autocast and torch.amp.GradScaler"
    severity = Severity.WARNING
    fix_applicability = Applicability.UNSAFE
    needs = (r"\bapex\b", r"\binitialize\b|\bscale_loss\b|\bmaster_params\b|state_dict")

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
""",
        # apex's other packages are not apex.amp.
        """
from apex.optimizers import FusedAdam
optimizer = FusedAdam(model.parameters())
""",
        """
amp = MyAmp()
amp.initialize(model)
""",
        # apex as an optional backend beside torch.amp (timm's utils/cuda.py).
        """
import torch
try:
    from apex import amp
except ImportError:
    amp = None
class ApexScaler:
    def __call__(self, loss, optimizer):
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")
""",
    ]
    invalid = [
        Invalid(
            """
import torch
from apex import amp

def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
        optimizer.step()
""",
            fixed="""
import torch

def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_((p for group in optimizer.param_groups for p in group["params"]), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
            count=3,
        ),
        # Split over methods: reported, not fixed.
        Invalid(
            """
import apex
class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = apex.amp.initialize(model, opt, opt_level="O2")

    def step(self, loss):
        with apex.amp.scale_loss(loss, self.opt) as scaled:
            scaled.backward()
        self.opt.step()
""",
            count=2,
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        sites = [s for s in model.call_sites if s.qualified_name in _APEX]
        if not sites or model.scaler_call_sites or model.autocast_calls:
            return  # torch.amp is offered alongside: apex is an opt-in backend (timm's ApexScaler next to NativeScaler)
        fixes = {}
        for site in sites:
            what = _APEX[site.qualified_name]
            if site.scope.name not in fixes:
                fixes[site.scope.name] = _fix(model, site.scope, [s for s in sites if s.scope is site.scope], self.options, sites)
            yield self.finding(
                site.call,
                f"`{short(site.call, 50)}`: apex.amp is deprecated; "
                + {
                    "initialize": "use `torch.autocast` around the forward and a `torch.amp.GradScaler`",
                    "scale_loss": "backpropagate `scaler.scale(loss)` and step with `scaler.step(optimizer)`",
                    "master_params": "unscale with `scaler.unscale_(optimizer)` and clip the model's parameters",
                }.get(what, "save and load `scaler.state_dict()` instead"),
                fix=fixes[site.scope.name],
                context=site.scope.name,
            )


def _fix(model: FileModel, scope: Scope, sites: List[CallSite], options, every_site: List[CallSite]) -> Optional[Fix]:
    """The whole recipe in one function, or nothing."""
    kinds = [_APEX[s.qualified_name] for s in sites]
    if kinds.count("initialize") != 1 or kinds.count("scale_loss") != 1 or set(kinds) - {"initialize", "scale_loss", "master_params"}:
        return None
    if "scaler" in scope.assignments or "scaler" in scope.params or scope.names.lookup("scaler") is not None:
        return None
    init = sites[kinds.index("initialize")]
    scale_loss = sites[kinds.index("scale_loss")]
    optimizer = _initialize_optimizer(init)
    flow = whole_scope_flow(model, scope)  # the rewrite's order is the paths', not the text's
    if optimizer is None or site_path(flow, init, scale_loss) is not PROVED:
        return None
    with_statement = scale_loss.statement
    if not isinstance(with_statement, cst.With) or len(with_statement.items) != 1:
        return None
    item = with_statement.items[0]
    if item.item is not scale_loss.call or item.asname is None or not isinstance(item.asname.name, cst.Name):
        return None
    scaled_name = item.asname.name.value
    args = scale_loss.call.args
    if len(args) != 2 or any(a.keyword or a.star for a in args) or dotted_name(args[1].value) != optimizer:
        return None
    body = with_statement.body.body if isinstance(with_statement.body, cst.IndentedBlock) else ()
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return None
    backward = body[0].body[0]
    if not (isinstance(backward, cst.Expr) and isinstance(backward.value, cst.Call) and not backward.value.args):
        return None
    if dotted_name(backward.value.func) != f"{scaled_name}.backward":
        return None
    steps = [
        s
        for s in model.call_sites
        if s.scope is scope and s.method == "step" and dotted_name(s.receiver) == optimizer and not s.call.args
        and site_path(flow, scale_loss, s) is not None
    ]
    if len(steps) != 1 or not isinstance(steps[0].small_statement, cst.Expr) or not isinstance(steps[0].statement, cst.SimpleStatementLine):
        return None
    if len(steps[0].statement.body) != 1:
        return None
    builder = FixBuilder(model.module)
    new_scaler = (
        'scaler = torch.amp.GradScaler("cuda")' if supports(options.get("target_torch"), "2.3") else "scaler = torch.cuda.amp.GradScaler()"
    )
    builder.need_import("torch")
    builder.replace(init.statement, lambda updated: builder.statement(new_scaler).with_changes(leading_lines=updated.leading_lines))
    loss = args[0].value
    builder.replace(
        with_statement,
        lambda updated: builder.statement(f"scaler.scale({_code(loss)}).backward()").with_changes(leading_lines=updated.leading_lines),
    )
    for site in sites:
        if _APEX[site.qualified_name] != "master_params":
            continue
        if len(site.call.args) != 1 or dotted_name(site.call.args[0].value) != optimizer:
            return None
        if site_path(flow, site, steps[0]) is not PROVED:
            return None
        if not isinstance(site.statement, cst.SimpleStatementLine):
            return None
        builder.insert_before(site.statement, builder.statement(f"scaler.unscale_({optimizer})"))
        params = builder.expression(f'(p for group in {optimizer}.param_groups for p in group["params"])')
        builder.replace(site.call, lambda updated, params=params: params)
    builder.replace(steps[0].call, lambda updated: builder.expression(f"scaler.step({optimizer})"))
    builder.insert_after(steps[0].statement, builder.statement("scaler.update()"))
    if len(every_site) == len(sites):
        # Nothing else uses apex.amp: drop `from apex import amp` (apex need not stay installed).
        for statement, import_scope in model.imports:
            if _is_apex_amp_import(statement):
                line = model.parents.get(id(statement))
                if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
                    builder.remove(line)
    return builder.build("Rewrite apex.amp to torch.amp.GradScaler (put the forward under torch.autocast)", Applicability.UNSAFE, key=("AMP077", scope.name))


def _initialize_optimizer(init: CallSite) -> Optional[str]:
    """`model, optimizer = amp.initialize(model, optimizer, opt_level="O1")`: "optimizer"."""
    statement = init.small_statement
    if not isinstance(statement, cst.Assign) or statement.value is not init.call or len(statement.targets) != 1:
        return None
    target = statement.targets[0].target
    args = init.call.args
    positional = [a for a in args if a.keyword is None]
    if not isinstance(target, cst.Tuple) or len(target.elements) != 2 or len(positional) != 2 or any(a.star for a in args):
        return None
    names = [dotted_name(e.value) for e in target.elements]
    if names != [dotted_name(a.value) for a in positional] or None in names:
        return None
    for arg in args:
        if arg.keyword is None:
            continue
        if arg.keyword.value != "opt_level" or literal_string(arg.value) not in _MIXED_LEVELS:
            return None  # loss_scale=, keep_batchnorm_fp32=, O0/O3: another recipe
    if not any(a.keyword is not None for a in args):
        return None  # no opt_level written: reported, not fixed
    if len(init.statement.body) != 1 if isinstance(init.statement, cst.SimpleStatementLine) else True:
        return None
    return names[1]


def _is_apex_amp_import(statement) -> bool:
    return (
        isinstance(statement, cst.ImportFrom)
        and not statement.relative
        and statement.module is not None
        and dotted_name(statement.module) == "apex"
        and not isinstance(statement.names, cst.ImportStar)
        and [(dotted_name(a.name), a.asname) for a in statement.names] == [("amp", None)]
    )


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
