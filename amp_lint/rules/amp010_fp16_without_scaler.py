from __future__ import annotations

from typing import Iterator, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.autocast import CUDA_LIKE_DEVICES, DType
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.events import SCALER_KINDS, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.paths import PROVED, Proof, weakest
from amp_lint.analysis.scaler_flow import StepFlow, assumption_text, flow_of
from amp_lint.analysis.flow_queries import Site, any_path, in_iteration, site_path
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.value_types import Kind
from amp_lint.analysis.walk import visit_read_only
from amp_lint.diagnostics import Severity
from amp_lint.rules._helpers import region_device_types, value_of
from amp_lint.rules.base import Finding, Invalid, Rule


class Fp16WithoutScaler(Rule):
    """
    ## What it does
    Finds float16 autocast training (the dtype is proven float16: an explicit `torch.float16` /
    `torch.half`, or CUDA's default) whose backward pass runs on the unscaled loss while no enabled
    `GradScaler` is anywhere in reach (the function, its class, or the module).

    ## Why is this bad?
    "Gradient values with small magnitudes may not be representable in float16. These values will
    flush to zero ('underflow'), so the update for the corresponding parameters will be lost." Nothing
    errors or warns: the loss curve just flattens. float16 autocast training is meant to be paired with
    `torch.amp.GradScaler`. Note that `torch.autocast("cuda")` without a dtype is float16.

    ## Example
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda"):  # float16 by default on CUDA
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```
    or train in bfloat16 (`dtype=torch.bfloat16`), which needs no scaler.

    ## Fix safety
    No automatic fix: adding a scaler changes numerics on purpose. `amp-lint --select AMP100 --fix
    --unsafe-fixes` converts plain fp32 loops; here, add the scaler as shown above.

    ## References
    - [Automatic Mixed Precision package: Gradient Scaling](https://docs.pytorch.org/docs/stable/amp.html#gradient-scaling)
    - [AMP recipe: Adding GradScaler](https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    """

    code = "AMP010"
    name = "fp16-without-grad-scaler"
    summary = "float16 autocast training without a GradScaler"
    severity = Severity.WARNING
    needs = (r"\bautocast\b", r"\bbackward\b")

    valid = [
        # bfloat16 needs no scaler.
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # CPU autocast defaults to bfloat16.
        """
import torch
for x, y in loader:
    with torch.autocast("cpu"):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # A scaler switched on at run time counts as present.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
for x, y in loader:
    with torch.autocast("cuda", enabled=args.amp):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # Evaluation under autocast: no backward.
        """
import torch
with torch.no_grad(), torch.autocast("cuda"):
    for x, y in loader:
        total += loss_fn(model(x), y).item()
""",
        # The dtype is not known statically: stay silent.
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=args.dtype):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # A device from the configuration (Open-Rig3R's train.py today): it may be "cpu" (bfloat16).
        """
import torch
from torch.amp import autocast
device = torch.device(cfg.get("device", "cuda") if torch.cuda.is_available() else "cpu")
for images, target in loader:
    with autocast(device_type=str(device)):
        outputs = model(images)
    loss = criterion(outputs, target)
    loss.backward()
    optimizer.step()
""",
        # The dtype depends on a flag: not known to be float16.
        """
import torch
class Trainer:
    def __init__(self, bf16):
        self.amp_dtype = torch.bfloat16 if bf16 else torch.float32

    def fit(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=self.amp_dtype):
                loss = self.model(x).mean()
            loss.backward()
            self.optimizer.step()
""",
        # Switched off by a module flag.
        """
import torch
USE_AMP = False
for x, y in loader:
    with torch.autocast("cuda", enabled=USE_AMP):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # A scaler passed in as a parameter is in reach.
        """
import torch
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x).mean()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
""",
        # A saliency pass under float16 that `continue`s before any optimizer step, and a bfloat16
        # training pass: no float16 backward reaches a step, and the float16 region never runs before the
        # training backward (the lexical model took "a step later in the text" and "a float16 region in
        # the loop" for both).
        """
import torch
for x, y in loader:
    if saliency:
        with torch.autocast("cuda", dtype=torch.float16):
            score = model(x).max()
        score.backward()
        save_map(x.grad)
        continue
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
    ]
    valid += [
        # The scaler goes to a wrapper whose use the file does not show: it may scale the loss there.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
optimizer = AmpOptimizer(base_optimizer, scaler)
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
    ]
    invalid = [
        # A scaler built and never used (a half-done migration, issue 44): no scaler for the loss that is stepped.
        Invalid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""
        ),
        Invalid(
            """
import torch
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""
        ),
        Invalid(
            """
import torch as T
AMP_DTYPE = T.float16
def train(model, loader, opt):
    for batch in loader:
        with T.autocast("cpu", dtype=AMP_DTYPE):
            loss = model(batch).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
"""
        ),
        # Open-Rig3R #35: no dtype, and `str(device)` is "cuda" wherever CUDA is available: float16.
        Invalid(
            """
import torch
from torch.amp import autocast
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
for images, target in loader:
    optimizer.zero_grad()
    with autocast(device_type=str(device)):
        outputs = model(images)
    loss = criterion(outputs, target)
    loss.backward()
    optimizer.step()
"""
        ),
        # The dtype set in __init__.
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.amp_dtype = torch.float16

    def fit(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=self.amp_dtype):
                loss = self.model(x).mean()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
"""
        ),
        # A scaler built with enabled=False is no scaler at all.
        Invalid(
            """
from torch.cuda.amp import autocast, GradScaler
scaler = GradScaler(enabled=False)
for x in loader:
    with autocast():
        loss = model(x).sum()
    loss.backward()
    optimizer.step()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for step in model.steps:
            optimizer_steps = step.of(EventKind.OPTIMIZER_STEP) + [
                # a disabled scaler's step is a plain `optimizer.step()`
                e for e in step.of(EventKind.SCALER_STEP) if e.receiver and not model.scaler_enabled(e.receiver, step.scope)
            ]
            if not optimizer_steps or _scaler_may_serve(model, step):
                continue
            flow = flow_of(model, step)
            for backward in step.of(EventKind.BACKWARD):
                # a scaler built with a literal enabled=False returns the loss as it is: no scaler at all
                disabled = backward.scaled_by is not None and not model.scaler_enabled(backward.scaled_by, step.scope)
                if backward.scaled_by is not None and not disabled:
                    continue
                region, forward = _fp16_forward_region(model, flow, backward)
                if region is None:
                    continue
                stepped, proof = any_path(flow, backward, optimizer_steps)
                if not stepped:
                    continue  # no optimizer step can follow this backward in the iteration
                why = ""
                if region.spec.dtype is not DType.FP16:  # known through values
                    why = ", float16 by default on CUDA" if region.spec.dtype_node is None else ""
                unused = " (the GradScaler in reach never scales it)" if model.has_scaler_in_reach(step.scope) else ""
                if disabled:
                    unused = f" (`{backward.scaled_by}` is built with enabled=False, so its scale() returns the loss as it is)"
                yield self.finding(
                    backward.call,
                    f"`{code_of(backward.call)}` backpropagates a float16 autocast loss "
                    f"(`{code_of(region.item.item) if region.item else 'autocast'}`{why}) without a GradScaler{unused}; "
                    "small gradients underflow to zero",
                    context=step.scope.name,
                    assumption=assumption_text(weakest(forward, proof)),
                )


def _fp16_forward_region(model: FileModel, flow: StepFlow, backward) -> Tuple[Optional[AutocastRegion], Optional[Proof]]:
    """An enabled float16 region around the backward, or one of the iteration from which a path reaches
    the backward (the forward pass), with how sure that path is."""
    candidates = [(region, PROVED) for region in backward.regions]
    around = set(map(id, backward.regions))
    for region in flow.step.scope.regions:
        if id(region) in around:
            continue
        if region.item is None:  # a decorated function: not a statement of this iteration
            candidates.append((region, PROVED))
            continue
        site = Site(region.node)
        if not in_iteration(flow, site):
            continue
        proof = site_path(flow, site, backward)
        if proof is not None:
            candidates.append((region, proof))
    candidates.sort(key=lambda item: item[1] is not PROVED)
    for region, proof in candidates:
        if region.spec.is_enabled and _is_fp16(model, region) and not _disabled(model, region):
            return region, proof
    return None, None


def _is_fp16(model: FileModel, region: AutocastRegion) -> bool:
    """float16 as written, or through values: `dtype=self.amp_dtype` set to torch.float16, or no dtype on a
    device that is CUDA wherever CUDA is available (`torch.device("cuda" if ... else "cpu")`)."""
    spec = region.spec
    if spec.dtype is DType.FP16:
        return True
    if spec.dtype is not DType.UNKNOWN:
        return False
    if spec.dtype_node is not None:
        dtypes = value_of(model, spec.dtype_node, region.scope).literals
        return bool(dtypes) and all(d in names.FLOAT16 for d in dtypes)
    types = region_device_types(model, region, with_cuda=True)
    return bool(types) and all(t in CUDA_LIKE_DEVICES for t in types)


def _disabled(model: FileModel, region: AutocastRegion) -> bool:
    """`enabled=` a flag that is False wherever it is set (`USE_AMP = False`)."""
    if region.spec.enabled_node is None or region.spec.enabled is not None:
        return False
    value = value_of(model, region.spec.enabled_node, region.scope)
    return value.kind is Kind.BOOL and value.literals == (False,)


def _scaler_may_serve(model: FileModel, step: TrainingStep) -> bool:
    """Could a GradScaler in reach scale this step's loss? Not when the step makes no scaler call and never names
    the scaler, and the scaler goes nowhere else (its only uses are its own methods, in other loops): a scaler that
    never scales the loss that is stepped is no scaler for that loss (issue 44: a half-done migration)."""
    calls = [e for e in step.events if e.kind in SCALER_KINDS or e.scaled_by is not None]
    if calls and not any(model.scaler_enabled(e.receiver or e.scaled_by or "", step.scope) for e in calls):
        return False  # every scaler the step calls is built with a literal enabled=False: it scales nothing
    if not model.has_scaler_in_reach(step.scope):
        return False
    if calls:
        return True
    chain = list(step.scope.chain())
    spellings: Set[str] = set()
    for key, bindings in model.scalers.items():
        for binding in bindings:
            if binding.is_enabled and (binding.scope in chain or key.startswith(f"{step.scope.class_name}.self.")):
                spellings.add(binding.key)
    for outer in chain:
        spellings.update(param for param in outer.params if "scaler" in param.lower())
    if not spellings:
        return True  # in reach through something this rule cannot name: stay silent
    return _named_beyond_its_methods(model.module, spellings, step.loop or step.scope.node)


def _named_beyond_its_methods(module: cst.Module, spellings: Set[str], step_node: cst.CSTNode) -> bool:
    """Is a scaler named inside `step_node`, or anywhere but as its own binding or the receiver of its methods
    (passed on, stored, returned: then it may scale this loss where the analysis cannot see)?"""
    found = [False]

    class References(cst.CSTVisitor):
        def __init__(self) -> None:
            self.quiet: Set[int] = set()  # binding targets and method receivers outside the step
            self.in_step = 0

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if dotted_name(target.target) in spellings:
                    self.quiet.add(id(target.target))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if dotted_name(node.target) in spellings:
                self.quiet.add(id(node.target))

        def visit_Param(self, node: cst.Param) -> None:
            self.quiet.add(id(node.name))

        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and dotted_name(node.func.value) in spellings and not self.in_step:
                self.quiet.add(id(node.func.value))

        def on_visit(self, node: cst.CSTNode) -> bool:
            if node is step_node:
                self.in_step += 1
            if isinstance(node, (cst.Name, cst.Attribute)) and id(node) not in self.quiet:
                if dotted_name(node) in spellings:
                    found[0] = True
                    return False
            return super().on_visit(node)

        def on_leave(self, original_node: cst.CSTNode) -> None:
            if original_node is step_node:
                self.in_step -= 1
            super().on_leave(original_node)

    visit_read_only(module, References())
    return found[0]
