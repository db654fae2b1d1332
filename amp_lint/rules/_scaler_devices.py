"""AMP014's device questions beyond literals: an autocast that follows `torch.accelerator.current_accelerator()`
(the device-generic spelling of torch 2.6 and later: CUDA, MPS, XPU, HPU, ...) next to a scaler built for one
fixed device, and a scaler built from a different device variable than the autocast's."""

from __future__ import annotations

import re
from typing import Iterator, List, Optional, Sequence, Set

import libcst as cst

from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.file_model import FileModel, ScalerBinding
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.diagnostics import Applicability, Confidence
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.rules._helpers import argument, short, value_of
from amp_lint.rules.base import Finding, Fix, Rule

_CURRENT_ACCELERATOR = re.compile(r"\baccelerator\.current_accelerator\(")
# `torch.accelerator.current_accelerator().type`, written anywhere torch is imported.
_DIRECT = re.compile(r"\w+\.accelerator\.current_accelerator\(\)\.type")


def _assigned_values(model: FileModel, key: str, region_or_binding_scope) -> List[cst.BaseExpression]:
    chain = list(region_or_binding_scope.chain()) if region_or_binding_scope is not None else []
    return [a.value for a in model.assignment_sites if a.target == key and a.scope in chain]


def follows_current_accelerator(model: FileModel, region: AutocastRegion) -> bool:
    """Is the region's device `torch.accelerator.current_accelerator()`'s type, directly or through a name every
    assignment of which (in reach) is built from it (`device = torch.accelerator.current_accelerator()`, then
    `torch.autocast(device.type)`)?"""
    node = region.spec.device_node
    if node is None:
        return False
    if _CURRENT_ACCELERATOR.search(code_of(node)):
        return True
    key = dotted_name(node)
    if key is None:
        return False
    if key.endswith(".type"):
        key = key[: -len(".type")]
    values = _assigned_values(model, key, region.scope)
    return bool(values) and all(_CURRENT_ACCELERATOR.search(code_of(value)) for value in values)


def fixed_scaler_for_any_accelerator(
    rule: Rule, model: FileModel, bindings: Sequence[ScalerBinding], regions: Sequence[AutocastRegion], scaler_device: str
) -> Iterator[Finding]:
    """The autocast follows the current accelerator, the scaler is built for one device: wrong on every other."""
    region = regions[0]
    shown = short(region.item.item if region.item else region.node, 40)
    for binding in bindings:
        if binding.call is None:
            continue
        yield rule.finding(
            binding.call,
            f"`{short(binding.call)}` is a {scaler_device!r} scaler, but the autocast of the losses it scales (`{shown}`) "
            "follows `torch.accelerator.current_accelerator()`: on any other accelerator (MPS, XPU, HPU) the scaler "
            "does not match it; build it for the same device",
            fix=_same_device_fix(model, binding, region),
            context=binding.scope.name if binding.scope else "",
        )


def _same_device_fix(model: FileModel, binding: ScalerBinding, region: AutocastRegion) -> Optional[Fix]:
    call, node = binding.call, region.spec.device_node
    if call is None or node is None or any(a.star for a in call.args) or not _DIRECT.fullmatch(code_of(node)):
        return None
    builder = FixBuilder(model.module)
    new = builder.expression(code_of(node))
    current = argument(call, 0, "device")
    if current is not None:
        builder.replace(current.value, lambda updated: new)
    else:
        builder.replace(call, lambda updated: with_call_args(updated, [cst.Arg(value=new), *updated.args]))
    return builder.build("Build the scaler for the current accelerator", Applicability.SAFE)


def other_device_variable(
    rule: Rule, model: FileModel, bindings: Sequence[ScalerBinding], regions: Sequence[AutocastRegion]
) -> Iterator[Finding]:
    """`GradScaler(scaler_device)` beside `autocast(amp_device)`: two variables, neither known. Not proved (both
    may hold the same device), so the finding states its assumption."""
    built = [b for b in bindings if b.call is not None]
    if len(built) != 1:
        return
    binding = built[0]
    arg = argument(binding.call, 0, "device")
    scaler_key = dotted_name(arg.value) if arg is not None else None
    region_keys: Set[Optional[str]] = {dotted_name(r.spec.device_node) if r.spec.device_node is not None else None for r in regions}
    if scaler_key is None or len(region_keys) != 1 or None in region_keys:
        return
    region_key = next(iter(region_keys))
    if _same_source(model, scaler_key, binding, region_key, regions[0]):
        return
    if value_of(model, arg.value, binding.scope).known or value_of(model, regions[0].spec.device_node, regions[0].scope).known:
        return  # a known value: the literal comparison decides
    yield rule.finding(
        binding.call,
        f"`{short(binding.call)}` is built for `{scaler_key}`, but the autocast of the losses it scales uses "
        f"`{region_key}`: two device variables; build the scaler from the autocast's device",
        confidence=Confidence.MEDIUM,
        assumption=f"assumes `{scaler_key}` and `{region_key}` can name different devices",
        context=binding.scope.name if binding.scope else "",
    )


def _same_source(model: FileModel, scaler_key: str, binding: ScalerBinding, region_key: str, region: AutocastRegion) -> bool:
    """One variable in two spellings: the same name, `.type` of the other, or assigned from the other or from
    the same expression."""
    base = lambda key: key[: -len(".type")] if key.endswith(".type") else key  # noqa: E731
    if base(scaler_key) == base(region_key):
        return True
    scaler_values = {code_of(v) for v in _assigned_values(model, base(scaler_key), binding.scope)}
    region_values = {code_of(v) for v in _assigned_values(model, base(region_key), region.scope)}
    if scaler_values & region_values:
        return True
    return any(base(region_key) in v for v in scaler_values) or any(base(scaler_key) in v for v in region_values)
