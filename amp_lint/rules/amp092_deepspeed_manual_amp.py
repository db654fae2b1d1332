from __future__ import annotations

from typing import Dict, Iterator, Optional, Tuple

import libcst as cst

from amp_lint.analysis.file_model import CallSite, FileModel, Scope
from amp_lint.analysis.conditions import implied_atoms
from amp_lint.analysis.events import branches_meet
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Confidence, Severity
from amp_lint.rules._deepspeed_config import config_verdict, read_config
from amp_lint.rules._helpers import same_binding, short
from amp_lint.rules.base import Finding, Invalid, Rule

_INITIALIZE = frozenset({"deepspeed.initialize"})


class DeepSpeedManualAmp(Rule):
    """
    ## What it does
    Finds a DeepSpeed engine (from `deepspeed.initialize`) called under an outer `torch.autocast`, or
    its optimizer driven by a hand-made GradScaler (`scaler.step(optimizer)`, `scaler.unscale_(optimizer)`,
    `engine.backward(scaler.scale(loss))`).

    ## Why is this bad?
    DeepSpeed owns precision: its `fp16` / `bf16` config sections cast the model and run its own dynamic
    loss scaler inside `engine.backward` and `engine.step` (and its `torch_autocast` section, where
    supported, enters autocast itself). A second, manual layer casts behind the engine's back or scales a
    loss the engine scales again, and `GradScaler.step` calls the engine's optimizer outside the engine
    (DeepSpeed #7529, wenet #2788: framework-managed precision doubled by hand).

    ## Example
    ```python
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = engine(batch)
    engine.backward(scaler.scale(loss))
    scaler.step(optimizer)
    ```

    ## Use instead
    ```python
    # ds_config.json: {"fp16": {"enabled": true}} (or "bf16")
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
    loss = engine(batch)
    engine.backward(loss)
    engine.step()
    ```

    Since DeepSpeed 0.17.2 the engine also checks it: with `torch.autocast` enabled around its forward
    and no enabled `torch_autocast` section in its config, it raises ``AssertionError: torch.autocast is
    enabled outside DeepSpeed, but not in the DeepSpeed config`` (`deepspeed/runtime/torch_autocast.py`,
    `validate_nested_autocast`; deepspeedai/DeepSpeed#7529, wenet-e2e/wenet#2788).

    ## How the config is read
    The engine is the first name `deepspeed.initialize(...)` binds (`engine, optimizer, _, _ = ...`, in the
    same function, an enclosing one, or `self.engine` of the class). Its config is read when the file shows
    it: a literal dict passed as `config=` (or `config_params=`), a name bound once to one, or a literal
    path to a JSON file of the project (beside the checked file, or in the working folder; at most 1 MB).
    Then an outer autocast is reported as proved when the config enables `fp16` or `bf16` (precision
    twice) or has no enabled `torch_autocast` section (the assertion), and not at all when
    `torch_autocast` is enabled (DeepSpeed runs autocast itself and only warns). A config out of sight, or
    with `"auto"` values that a launcher fills in, leaves the finding as an assumption (shown with
    `--show-assumed`, or when AMP092 is selected by name).

    ## Fix safety
    No fix: the precision settings must move into the DeepSpeed config.

    ## References
    - [DeepSpeed training: PyTorch Automatic Mixed Precision (`torch_autocast`)](https://deepspeed.readthedocs.io/en/latest/training.html#pytorch-automatic-mixed-precision-amp)
    - `deepspeed/runtime/torch_autocast.py`: `validate_auto_cast_settings`, `validate_nested_autocast`
    - [DeepSpeed configuration: FP16 / BF16 training options](https://www.deepspeed.ai/docs/config-json/#fp16-training-options)
    - [DeepSpeed training: `engine.backward`, `engine.step`](https://deepspeed.readthedocs.io/en/latest/training.html)
    - `torch/amp/grad_scaler.py` (torch 2.13): `GradScaler.step` calls `optimizer.step()` itself
    """

    code = "AMP092"
    name = "deepspeed-manual-amp"
    summary = "A DeepSpeed engine under an outer autocast, or its optimizer driven by a manual GradScaler"
    severity = Severity.WARNING
    needs = (r"autocast|[Ss]caler", r"\bdeepspeed\b", r"\binitialize\b")  # words other rules need first

    valid = [
        """
import deepspeed
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
loss = engine(batch)
engine.backward(loss)
engine.step()
""",
        # The autocast does not run the engine.
        """
import deepspeed, torch
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
with torch.autocast("cuda"):
    ref = teacher(batch)
loss = engine(batch)
""",
        # The config enables torch_autocast: DeepSpeed runs autocast itself and tolerates the outer one.
        """
import deepspeed, torch
config = {"torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
engine, _, _, _ = deepspeed.initialize(model=model, config=config)
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = engine(batch)
""",
    ]
    invalid = [
        # Issue 30: the config is a literal dict with fp16: proved (doubled AMP; DeepSpeed >= 0.17.2 asserts).
        Invalid(
            """
import deepspeed, torch
ds_config = {"train_batch_size": 32, "fp16": {"enabled": True}}
def train(model, loader):
    model_engine, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
"""
        ),
        # No torch_autocast section, fp32: DeepSpeed >= 0.17.2 raises AssertionError.
        Invalid(
            """
import deepspeed, torch
engine, _, _, _ = deepspeed.initialize(model=model, config={"train_batch_size": 8})
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = engine(batch)
"""
        ),
        Invalid(
            """
import deepspeed, torch
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = engine(batch)
    engine.backward(loss)
    engine.step()
"""
        ),
        Invalid(
            """
import deepspeed, torch
def train(args, model):
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model)
    scaler = torch.amp.GradScaler("cuda")
    loss = model_engine(batch)
    model_engine.backward(scaler.scale(loss))
    scaler.step(optimizer)
    scaler.update()
""",
            count=2,
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        engines: Dict[str, Scope] = {}
        bound_under: Dict[str, CallSite] = {}  # engine -> the `deepspeed.initialize(...)` that binds it
        optimizers: Dict[str, Tuple[Scope, CallSite]] = {}
        configs: Dict[str, Optional[dict]] = {}  # engine -> its DeepSpeed config, when the file shows it
        for site, engine, optimizer in _initialized(model):
            engines[engine] = site.scope
            bound_under[engine] = site
            configs[engine] = read_config(self, model, site.call, site.scope)
            if optimizer:
                optimizers[optimizer] = (site.scope, site)
        if not engines:
            return
        for site in model.call_sites:
            func = dotted_name(site.call.func)
            engine = _engine_called(model, site, func, engines)
            if engine is not None:
                region = site.in_enabled_autocast()
                verdict = config_verdict(configs.get(engine))
                if region is not None and _off_where_bound(region, bound_under.get(engine)):
                    region = None
                if region is not None and verdict is not False:
                    around = short(region.spec.call or region.node, 40)
                    if verdict is None:  # the config is not in sight
                        yield self.finding(
                            site.call,
                            f"the DeepSpeed engine `{engine}` runs under `{around}`: "
                            "DeepSpeed manages precision itself; set fp16/bf16 in the DeepSpeed config instead",
                            confidence=Confidence.MEDIUM,  # with an fp32 DeepSpeed config this is the only mixed precision
                            assumption="assumes the DeepSpeed config enables fp16 or bf16",
                            context=site.scope.name,
                        )
                    else:
                        yield self.finding(
                            site.call,
                            f"the DeepSpeed engine `{engine}` runs under `{around}`, and its config {verdict}: "
                            "drop the outer autocast and set the precision in the DeepSpeed config "
                            "(fp16/bf16, or a `torch_autocast` section)",
                            context=site.scope.name,
                        )
                if site.method == "backward" and site.call.args and _is_scaled(model, site, site.call.args[0].value):
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}` hands a GradScaler-scaled loss to DeepSpeed, which scales the loss "
                        "itself (fp16 config): drop the manual scaler",
                        context=site.scope.name,
                    )
                continue
            if site.method in ("step", "unscale_") and site.call.args and site.receiver is not None:
                scaler = dotted_name(site.receiver)
                target = dotted_name(site.call.args[0].value)
                if scaler is None or target is None or not model.is_scaler(scaler, site.scope):
                    continue
                bound, initialized = optimizers.get(target, (None, None))
                if bound is None and target.endswith(".optimizer") and target[: -len(".optimizer")] in engines:
                    bound = engines[target[: -len(".optimizer")]]
                if initialized is not None and not branches_meet(initialized.branches, site.branches):
                    # `if use_deepspeed: ..., optimizer, ... = deepspeed.initialize(...)` and the scaler's step
                    # on the `else` of another `if use_deepspeed:`: that optimizer never reaches this step
                    continue
                if bound is not None and same_binding(model, target.split(".")[0], bound, site.scope):
                    yield self.finding(
                        site.call,
                        f"`{short(site.call, 50)}` drives the DeepSpeed optimizer with a manual GradScaler: "
                        "call `engine.step()` and configure fp16/bf16 in the DeepSpeed config",
                        context=site.scope.name,
                    )


def _initialized(model: FileModel) -> Iterator[Tuple[CallSite, str, Optional[str]]]:
    """(the call's site, engine, optimizer) for `engine, optimizer, _, _ = deepspeed.initialize(...)`."""
    for site in model.call_sites:
        if site.qualified_name not in _INITIALIZE or not isinstance(site.small_statement, cst.Assign):
            continue
        statement = site.small_statement
        if statement.value is not site.call or len(statement.targets) != 1:
            continue
        target = statement.targets[0].target
        if not isinstance(target, (cst.Tuple, cst.List)) or not target.elements:
            continue
        keys = [dotted_name(e.value) for e in target.elements]
        if keys[0]:
            yield site, keys[0], keys[1] if len(keys) > 1 and keys[1] not in (None, "_") else None


def _off_where_bound(region, initialized: Optional[CallSite]) -> bool:
    """The region's `enabled=` flag is false wherever the engine is bound: `if use_deepspeed: model, ... =
    deepspeed.initialize(...)` and `autocast(..., enabled=amp and not use_deepspeed)` (h2o-llmstudio)."""
    flag = region.spec.enabled_node
    if initialized is None or flag is None or region.spec.enabled is not None:
        return False
    bound = {branch.condition for branch in initialized.branches}
    return any((atom.key, not atom.holds) in bound for atom in implied_atoms(flag, True))


def _engine_called(model: FileModel, site: CallSite, func: Optional[str], engines: Dict[str, Scope]) -> Optional[str]:
    if func is None:
        return None
    head = func[: -len(".forward")] if func.endswith(".forward") else func
    if site.method == "backward" and site.receiver is not None:
        head = dotted_name(site.receiver) or ""
    bound = engines.get(head)
    if bound is None or not same_binding(model, head.split(".")[0], bound, site.scope):
        return None
    return head


def _is_scaled(model: FileModel, site: CallSite, expr: cst.BaseExpression) -> bool:
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "scale"):
        return False
    scaler = dotted_name(expr.func.value)
    return scaler is not None and model.is_scaler(scaler, site.scope)
