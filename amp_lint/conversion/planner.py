"""The fp32 -> AMP conversion (rule AMP100): find plain fp32 training iterations and plan their rewrite.

The rewrite follows the reference's algorithm (rules.md section 6) and emits its canonical patterns
(section 5):

1. the forward slice (the contiguous statements before a backward that compute its loss from a model
   call) is wrapped in `with torch.amp.autocast(<device>, dtype=<dtype>):`;
2. float16 only: every backward is scaled (`scaler.scale(loss).backward()`), `scaler.unscale_(opt)`
   goes right before any gradient clipping or gradient read, every `opt.step()` becomes
   `scaler.step(opt)`, one `scaler.update()` follows the last step (inside the accumulation boundary
   when there is one), and one `scaler = torch.amp.GradScaler(<device>)` is created before the
   outermost loop of the function;
3. a step function (backward and step, no loop: `train_step(...)` called per batch) gets its scaler
   as a new keyword parameter, created once by each caller before the caller's outermost loop.

What the analysis model does not record (which statements assign or read which names, where each
statement sits in its block) is computed here from the CST, once per file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import libcst as cst

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.conversion.call_sites import call_sites
from amp_lint.conversion.already_mixed import already_mixed_precision, is_unit_test
from amp_lint.conversion.devices import default_device_kind, has_run_time_device
from amp_lint.conversion.edits import BFLOAT16, FLOAT16, EditPlanner
from amp_lint.conversion.file_context import FileContext
from amp_lint.conversion.refusals import (
    Refusal,
    file_refusal,
    is_lbfgs,
    iteration_refusal,
    manual_update,
    passed_closure,
)
from amp_lint.conversion.training_steps import (
    Iteration,
    amp_in_reach,
    find_iterations,
    short_code,
)
from amp_lint.fixes.types import Fix, with_file_edits

# --- results ------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Outcome:
    """One fp32 training iteration: the finding's anchor, and either a fix or the reason there is none."""

    anchor: Event  # the first unscaled backward
    scope: Scope
    is_step_function: bool
    fix: Optional[Fix] = None
    reason: Optional[str] = None



def runs_after_training(ctx: FileContext, iterations: List[Iteration], node: cst.CSTNode) -> bool:
    """Does `node` (a cast to half precision) run only after every training loop of the file is over?

    Each training loop (or the call of the function that holds it) must sit in the cast's own scope, before it, and
    no loop may hold both (a cast in the epoch loop would run before the next epoch trains)."""
    tree = ctx.tree
    function = tree.enclosing_function(node)
    where = ctx.model.scope_of(function) if function is not None else ctx.model.scopes[0]
    if where is None:
        return False
    position = tree.position(node)
    for iteration in iterations:
        backward = iteration.backwards[0]
        if iteration.scope is where:
            outer: Optional[cst.CSTNode] = backward.loops[0] if backward.loops else None
            if outer is None:
                return False
            ends_before = [outer]
        else:
            scope_node = iteration.scope.node
            if not isinstance(scope_node, cst.FunctionDef):
                return False
            sites = [call for call, caller in call_sites(ctx, scope_node) if caller is where]
            if not sites or len(sites) != len(call_sites(ctx, scope_node)):
                return False
            ends_before = sites
        for before in ends_before:
            if tree.position(before) >= position or tree.is_inside(node, before):
                return False
            if any(tree.is_inside(node, loop) for loop in tree.loops_around(before)):
                return False
    return True


# --- entry point --------------------------------------------------------------------------------------


def plan_conversions(model: FileModel, dtype: str = FLOAT16, device: Optional[str] = None) -> List[Outcome]:
    """Every fp32 training iteration of the file, each with its fix or the reason it has none."""
    dtype = BFLOAT16 if dtype == BFLOAT16 else FLOAT16
    iterations = find_iterations(model)
    if not iterations:
        return []
    ctx = FileContext(model)
    if already_mixed_precision(model, lambda cast: runs_after_training(ctx, iterations, cast)) is not None:
        return []
    iterations = [it for it in iterations if not is_unit_test(it.scope)]
    if not iterations:
        return []
    outcomes: List[Outcome] = []
    stepping = [it for it in iterations if it.optimizer_steps]
    steps_elsewhere = [
        e
        for e in model.events
        if e.kind is EventKind.OPTIMIZER_STEP and not any(e in it.optimizer_steps for it in stepping)
    ]
    by_scope: Dict[int, List[Iteration]] = {}
    for iteration in iterations:
        if amp_in_reach(model, iteration.scope):
            continue
        anchor = iteration.backwards[0]
        if not iteration.optimizer_steps:
            manual = manual_update(ctx, iteration)
            if manual is not None:
                outcomes.append(
                    Outcome(anchor, iteration.scope, iteration.is_step_function, reason=(
                        f"parameters are updated by hand (`{manual}`), not by a torch optimizer; "
                        "GradScaler can only step a `torch.optim` optimizer"
                    ))
                )
            elif steps_elsewhere:
                where = steps_elsewhere[0]
                closure = next(
                    (e for e in steps_elsewhere if passed_closure(e.call) is not None or is_lbfgs(model, e.target or "")),
                    None,
                )
                if closure is not None:
                    reason = (
                        f"`{short_code(closure)}` steps the optimizer with a closure that runs this backward: "
                        "GradScaler.step cannot run a closure"
                    )
                elif where.scope is iteration.scope:
                    reason = f"`{short_code(where)}` runs outside the loop that runs `{short_code(anchor)}`"
                else:
                    place = f"`{where.scope.name}`" if where.scope.name else "module level"
                    reason = (
                        f"`{short_code(anchor)}` and `{short_code(where)}` (in {place}) are not in one function; "
                        "AMP100 converts a training step only when both are visible together"
                    )
                outcomes.append(Outcome(anchor, iteration.scope, iteration.is_step_function, reason=reason))
            continue
        by_scope.setdefault(id(iteration.scope.node), []).append(iteration)

    file_reason = None
    if by_scope:
        if device:
            device_may_be_cuda = device.split(":")[0] != "cpu"
        else:
            device_may_be_cuda = (ctx.literal_device or default_device_kind(ctx)) != "cpu" or has_run_time_device(model)
        file_reason = file_refusal(ctx, device_may_be_cuda)
    for group in by_scope.values():
        step_function = group[0].is_step_function
        reason = file_reason
        if reason is None:
            for iteration in group:
                reason = iteration_refusal(ctx, iteration)
                if reason is not None:
                    break
        if reason is None and step_function and len(group) > 1:
            reason = "the function holds several training steps outside any loop"
        fix: Optional[Fix] = None
        if reason is None:
            try:
                planner = EditPlanner(ctx, dtype, device, group)
                fix = with_file_edits(planner.build(), planner.file_edits)  # the callers' files
            except Refusal as refusal:
                reason = str(refusal)
        for iteration in group:
            anchor = iteration.backwards[0]
            outcomes.append(Outcome(anchor, iteration.scope, iteration.is_step_function, fix=fix, reason=reason))
    return outcomes


