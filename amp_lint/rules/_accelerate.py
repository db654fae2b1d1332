"""What Hugging Face accelerate's `Accelerator` does to the objects it prepares, as the rules ask it.

With `mixed_precision="fp16"`, `accelerator.prepare(...)` wraps the optimizer in an `AcceleratedOptimizer` that
shares the accelerator's own GradScaler: its `step()` is that scaler's `step()` (it unscales the gradients), and
`accelerator.backward(loss)` scales the loss ("Should be used in lieu of `loss.backward()`"). The precision is
the `mixed_precision` argument, or, without one, what `accelerate config` / `ACCELERATE_MIXED_PRECISION` chose.
"""

from __future__ import annotations

from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.analysis.autocast import DType
from amp_lint.diagnostics import Applicability
from amp_lint.fixes.builder import FixBuilder
from amp_lint.fixes.types import Fix
from amp_lint.analysis.events import SCALER_KINDS, Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis.syntax import code_of
from amp_lint.rules._helpers import argument, literal_string, same_binding

_ACCELERATOR = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
_MIXED = {"fp16": DType.FP16, "bf16": DType.BF16}


class Accelerator(NamedTuple):
    key: str  # "accelerator", "self.accelerator"
    scope: Scope
    mixed: Optional[str]  # "fp16"; None: not in this file (an argument's value, or the accelerate config)
    dtype: Optional[DType]


class Prepared(NamedTuple):
    key: str  # "model"
    scope: Scope
    accelerator: Accelerator


def reaching(model: FileModel, bindings: Sequence, key: str, scope: Scope):
    """The binding of `key` (an `_Accelerator` or `_Prepared`) that reaches a use in `scope`, if exactly one does
    (the same function, an enclosing one, or `self.x` of the same class), or the first of several that agree."""
    found = [b for b in bindings if b.key == key and same_binding(model, key, b.scope, scope)]
    precisions = {b.mixed if isinstance(b, Accelerator) else b.accelerator.mixed for b in found}
    return found[0] if len(precisions) == 1 else None  # none, or two that disagree: nothing is proved


def accelerators_of(model: FileModel, unknown: bool = False) -> Iterator[Accelerator]:
    """The file's Accelerators with a literal half-precision `mixed_precision`; with `unknown`, also those whose
    precision this file does not say (`mixed_precision=args.mixed_precision`, or none: the accelerate config's)."""
    for assignment in model.assignment_sites:
        value = assignment.value
        if not isinstance(value, cst.Call) or assignment.scope.names.qualify(value.func) not in _ACCELERATOR:
            continue
        arg = argument(value, None, "mixed_precision")
        mixed = literal_string(arg.value) if arg is not None else None
        if mixed in _MIXED:
            yield Accelerator(assignment.target, assignment.scope, mixed, _MIXED[mixed])
        elif unknown and mixed is None:  # not a literal "no" or "bf16": the argument's value or the config's
            yield Accelerator(assignment.target, assignment.scope, None, None)


def prepared_by(model: FileModel, accelerators: List[Accelerator]) -> List[Prepared]:
    """The names bound by `accelerator.prepare(...)` of one of `accelerators`."""
    found: List[Prepared] = []
    for site in model.call_sites:
        if site.method != "prepare" or site.receiver is None:
            continue
        key = dotted_name(site.receiver)
        accelerator = reaching(model, accelerators, key, site.scope) if key else None
        if accelerator is None:
            continue
        statement = site.small_statement
        if not isinstance(statement, cst.Assign) or statement.value is not site.call:
            continue
        for target in statement.targets:
            node = target.target
            elements = node.elements if isinstance(node, (cst.Tuple, cst.List)) else [node]
            for element in elements:
                name = dotted_name(element.value if isinstance(element, cst.Element) else element)
                if name:
                    found.append(Prepared(name, site.scope, accelerator))
    return found


def unscaled_backwards(model: FileModel) -> Iterator[Tuple[Event, Event, str, Optional[Fix]]]:
    """(backward, step, message, fix): a plain `loss.backward()` whose gradients the `step()` of an optimizer
    prepared by an Accelerator that may run fp16 (literal "fp16", or a precision this file does not say) then
    unscales, in an iteration that calls no `accelerator.backward(...)` and no scaler of its own (AMP093's
    shape). Under fp16 that step raises "Attempted step but _scale is None"; `accelerator.backward(loss)` is
    right whatever the precision, so the finding does not wait for the configuration."""
    accelerators = [a for a in accelerators_of(model, unknown=True) if a.mixed in (None, "fp16")]
    prepared = prepared_by(model, accelerators) if accelerators else []
    if not prepared:
        return
    for step in model.steps:
        if any(w.scope is step.scope and (step.loop is None or step.loop in w.loops) for w in model.wrapper_backwards):
            continue
        if any(e.scaled_by is not None or e.kind in SCALER_KINDS for e in step.events):
            continue
        stepped = [(e, reaching(model, prepared, e.receiver, step.scope)) for e in step.of(EventKind.OPTIMIZER_STEP) if e.receiver]
        stepped = [(e, entry) for e, entry in stepped if entry is not None]
        if not stepped:
            continue
        flow = flow_of(model, step)
        for backward in step.of(EventKind.BACKWARD):
            for event, entry in stepped:
                if flow.path(backward, event) is not None:
                    yield backward, event, _message(backward, event, entry.accelerator), _backward_fix(model, backward, entry.accelerator.key)
                    break


def _backward_fix(model: FileModel, backward: Event, accelerator: str) -> Optional[Fix]:
    """`loss.backward(**kwargs)` -> `accelerator.backward(loss, **kwargs)`. Unsafe: without fp16 it changes what a
    gradient-accumulation run computes (accelerate divides the loss by the accumulation steps), which is what
    the prepared optimizer expects, but the numbers differ from the run before the fix."""
    call = backward.call
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward") or any(a.keyword is None for a in call.args):
        return None  # `torch.autograd.backward(loss)`, or a positional `gradient`
    builder = FixBuilder(model.module)

    def through(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
        return updated.with_changes(func=builder.expression(f"{accelerator}.backward"), args=(cst.Arg(value=updated.func.value), *updated.args))

    builder.replace(call, through)
    return builder.build(f"Call `{accelerator}.backward(...)`", Applicability.UNSAFE)


def _message(backward: Event, stepped: Event, accelerator: Accelerator) -> str:
    precision = f'mixed_precision="{accelerator.mixed}"' if accelerator.mixed else "a precision the accelerate config or an argument sets"
    return (f"`{code_of(backward.call)}` skips `{accelerator.key}`'s loss scaling: `{stepped.receiver}` was prepared by it "
            f"({precision}), and under fp16 its step unscales gradients that were never scaled; use "
            f"`{accelerator.key}.backward({backward.target or 'loss'})`")  # fmt: skip
