"""The protocol's "read-scaled" (AMP030): gradients read (clipped, a norm, a log, a project helper that
reads them) while a scaler still holds them SCALED, before the step of that scaler. Each query yields
`order.Breach`es; see `order`.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from amp_lint.analysis.accumulation import first_on_path
from amp_lint.analysis.cfg import EXCEPTION
from amp_lint.analysis.flow_queries import last_of, site_path
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, TrainingStep
from amp_lint.analysis.iteration_limit import analysed_steps
from amp_lint.analysis.gradient_effects import calls_reading_gradients, class_builds_scaler
from amp_lint.analysis.order import Breach
from amp_lint.analysis.paths import PROVED
from amp_lint.analysis.scaler_flow import flow_of, skipped_in_helper
from amp_lint.analysis.function_summary import call_params
from amp_lint.analysis.syntax import argument, code_of, literal_bool, names_in

READ_SCALED = "read-scaled"  # `detail`: "clips" or "reads"
CLIP_RAISES_NONFINITE = "clip-raises-nonfinite"  # `node`: the `error_if_nonfinite=True` argument


def scaled_gradient_reads(model: FileModel) -> Iterator[Breach]:
    """Each read of gradients (`event`: a clip, a `.grad` read, a call of a project helper whose gradient
    summary reads or clips them and cannot unscale them, issue 26 principle 3) that scaled gradients reach
    with no unscale_ on the path (`cause`: the scaled backward; None when they are scaled on entry to a
    per-call step method), before a step of that scaler, or else a direct `optimizer.step()` (`related`: those steps). The scaled gradients
    survive inner micro-step loops and if/else merges (miles-credit #141, neural_sp). Not for a threshold
    that carries the scale (`max_norm * scaler.get_scale()`), and once per loop over the parameters."""
    for step in analysed_steps(model):
        flow = flow_of(model, step)
        helpers = {id(call): effects for call, effects in calls_reading_gradients(model, step)}
        reads = [e for e in step.events if e.kind in (EventKind.CLIP, EventKind.GRAD_READ) or id(e) in helpers]
        by_hand: dict = {}  # scaler -> unscaled_by_hand, asked once per iteration, not once per read
        for clip in reads:
            reached = _scaled_reaching(model, step, flow, clip) or _scaled_on_entry(model, step, flow, clip)
            if reached is None:
                continue
            backward, scaler, proof = reached
            if scaler not in by_hand:
                by_hand[scaler] = unscaled_by_hand(model, step, scaler)
            if _threshold_carries_scale(clip) or by_hand[scaler]:
                continue
            if clip.kind is EventKind.GRAD_READ and not _first_read_of_its_loop(flow, step, clip):
                continue
            steps = [e for e in step.of(EventKind.SCALER_STEP) if e.receiver == scaler and flow.path(clip, e) is not None]
            if not steps:  # the gradients are scaled whatever steps them: a direct `optimizer.step()` too (issue 44)
                steps = [e for e in step.of(EventKind.OPTIMIZER_STEP) if _steps_scaled(flow, step, clip, e, scaler)]
            if not steps:
                continue
            what = "clips" if clip.kind is EventKind.CLIP or (id(clip) in helpers and helpers[id(clip)].clips) else "reads"
            yield Breach(READ_SCALED, clip, step, scaler, flow, cause=backward, related=tuple(steps), proof=proof, detail=what)


def _steps_scaled(flow, step: TrainingStep, clip: Event, optimizer_step: Event, scaler: str) -> bool:
    """Does the direct `optimizer_step` follow the clip and apply gradients `scaler` scaled (the backward that
    last runs before it is scaled by it: not a GAN's unscaled generator loss after the scaled discriminator's)?"""
    if flow.path(clip, optimizer_step) is None:
        return False
    reaching = [b for b in step.of(EventKind.BACKWARD) if flow.path(b, optimizer_step) is not None]
    return bool(reaching) and last_of(flow, reaching).scaled_by == scaler


def unscaled_by_hand(model: FileModel, step: TrainingStep, scaler: str) -> bool:
    """The iteration rescales gradients by the scaler's scale itself (`p.grad.mul_(1 / scaler.get_scale())`,
    `p.grad /= scale` with `scale = scaler.get_scale()`: a Muon optimizer's parameters beside an AdamW that
    the scaler unscales). Which optimizers' gradients that covers is not known, so the reads and direct
    steps of this scaler's gradients are not questions the protocol can answer here (issue 26, principle
    1: the state the code puts the gradients in, not only the scaler's calls). Read from the model's call,
    assignment and in-place rescale sites of the iteration."""
    scale = f"{scaler}.get_scale()"

    def in_step(site) -> bool:
        return site.scope is step.scope and (step.loop is None or step.loop in site.loops)

    names = {a.target for a in model.assignment_sites if in_step(a) and "." not in a.target and scale in code_of(a.value)}
    factors = [a.value for a in model.grad_rescales if in_step(a)]
    factors += [a.value for a in model.assignment_sites if in_step(a) and a.target.split(".")[-1] == "grad"]
    factors += [
        arg.value
        for c in model.call_sites
        if in_step(c) and c.method in ("mul_", "div_") and _a_gradient(c.call.func.value)
        for arg in c.call.args
    ]
    return any(scale in code_of(f) or names_in(f) & names for f in factors)


def _a_gradient(node: cst.BaseExpression) -> bool:
    """`p.grad`, or `p.grad.data`."""
    if isinstance(node, cst.Attribute) and node.attr.value == "data":
        node = node.value
    return isinstance(node, cst.Attribute) and node.attr.value == "grad"


def _scaled_reaching(model: FileModel, step: TrainingStep, flow, clip: Event):
    """(backward, scaler, proof): a scaled backward whose gradients reach `clip` with no unscale_ between."""
    unscales = [
        e
        for e in step.events
        if e.kind is EventKind.SCALER_UNSCALE or (e.kind is EventKind.CALL and "unscale" in (e.target or ""))
    ]
    best = None
    for backward in step.of(EventKind.BACKWARD):
        scaler = backward.scaled_by
        if scaler is None or not model.scaler_enabled(scaler, step.scope):
            continue
        if flow.path(backward, clip) is None:
            continue
        # an unscale_ a helper runs on only some of its paths does not unscale on every path (issue 26)
        mine = [
            e
            for e in unscales
            if (e.kind is EventKind.CALL or e.receiver == scaler) and not skipped_in_helper(e, backward, clip)
        ]
        proof = flow.path(backward, clip, mine)
        if proof is not None and (best is None or proof is PROVED):
            best = (backward, scaler, proof)
    return best


def _scaled_on_entry(model: FileModel, step: TrainingStep, flow, clip: Event):
    """(None, scaler, proof) for a per-call step method (colbert's `step()`: clip, `self.scaler.step`, no
    backward of its own) whose class builds the scaler and runs the scaled backward in a sibling method on
    the same branch condition: the gradients are scaled when the method starts (issue 26, principle 2).
    Silent when any method of the class unscales through that scaler elsewhere (a caller may do it first)."""
    if step.loop is not None or step.scope.class_name is None or step.of(EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD):
        return None
    siblings = [s for s in model.scopes if s.is_function and s.class_name == step.scope.class_name and s is not step.scope]
    for stepped in step.of(EventKind.SCALER_STEP):
        scaler = stepped.receiver
        if not class_builds_scaler(model, scaler, step.scope) or flow.path(clip, stepped) is None:
            continue
        if any(e.kind is EventKind.SCALER_UNSCALE and e.receiver == scaler for s in siblings for e in s.events):
            continue
        scaled = [
            e
            for s in siblings
            for e in s.events
            if e.kind is EventKind.BACKWARD and e.scaled_by == scaler and not e.loops and e.compatible(clip)
        ]
        if not scaled:
            continue
        unscales = [
            e
            for e in step.events
            if (e.kind is EventKind.SCALER_UNSCALE and e.receiver == scaler) or (e.kind is EventKind.CALL and "unscale" in (e.target or ""))
        ]
        proof = flow.from_start(clip, unscales)
        if proof is not None:
            return None, scaler, proof
    return None


def loops_holding(flow, node: Optional[int]) -> List[Tuple[int, int]]:
    """(body size, header) of the loops of the iteration whose body holds graph node `node`.

    A loop's body is the node numbers between its latch and its first node (`amp_lint.analysis.cfg`).
    """
    if node is None:
        return []
    graph = flow.flow.graph
    found = []
    for key, latch in graph.loop_latch.items():
        header, first = graph.loop_header[key], graph.loop_body[key]
        if flow.end < header <= flow.start and latch < node <= first:
            found.append((first - latch, header))
    return found


def _inner_loop(flow, node: Optional[int]) -> Optional[int]:
    """The header of the innermost loop of the iteration that holds `node` (None: none)."""
    loops = loops_holding(flow, node)
    return min(loops)[1] if loops else None


def _first_read_of_its_loop(flow, step: TrainingStep, read: Event) -> bool:
    """Is `read` the first gradient read of its pass through the loop over the parameters?

    The other reads of that loop (same innermost loop) that can precede it on the path come first; of
    reads on alternative branches, the one the step lists first carries the finding.
    """
    loop = _inner_loop(flow, flow.node(read))
    group = [e for e in step.of(EventKind.GRAD_READ) if _inner_loop(flow, flow.node(e)) == loop]
    return first_on_path(flow, group) is read


def _threshold_carries_scale(clip: Event) -> bool:
    """`clip_grad_norm_(params, max_norm * scaler.get_scale())` (issue 26, principle 4): the threshold is
    scaled with the gradients, which is right; a `get_scale()` anywhere in the arguments after the first.
    In a helper, the threshold may carry it through a parameter that the call into the helper binds to
    `get_scale()` (mmf's `clip_gradients(..., scale=self.scaler.get_scale())` clips to `max_norm * scale`)."""
    if not isinstance(clip.call, cst.Call):
        return False  # a `p.grad` read
    thresholds = [arg.value for arg in clip.call.args[1:]]
    if any("get_scale" in code_of(value) for value in thresholds):
        return True
    if clip.via is None or clip.scope is None or not clip.scope.is_function:
        return False
    named = {name for value in thresholds for name in names_in(value)} & set(clip.scope.params)
    if not named:
        return False
    call = clip.via.call
    positional = call_params(clip.scope)
    bound = {positional[i]: arg.value for i, arg in enumerate(a for a in call.args if a.keyword is None and not a.star) if i < len(positional)}
    bound.update({arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None})
    return any(name in bound and "get_scale" in code_of(bound[name]) for name in named)


# clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None)
_NONFINITE_POSITION = 3
_NORM_CLIPS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)
_CAUGHT = frozenset({"RuntimeError", "Exception", "BaseException"})


def clips_raising_on_nonfinite(model: FileModel) -> Iterator[Breach]:
    """CLIP_RAISES_NONFINITE: a `clip_grad_norm_(..., error_if_nonfinite=True)` with a scaler step in its own
    pass through the iteration (before or after it; `related`: those steps, `node`: the argument): it
    raises on the inf/NaN gradients the scaler's step would skip. Not inside a `try` whose handler catches
    the RuntimeError (issue 26, principle 4: exceptions are paths, the raise is the skip branch)."""
    for step in analysed_steps(model):
        for clip in step.of(EventKind.CLIP):
            if clip.target not in _NORM_CLIPS:
                continue
            arg = argument(clip.call, _NONFINITE_POSITION, "error_if_nonfinite")
            if arg is None or literal_bool(arg.value) is not True:
                continue
            flow = flow_of(model, step)
            if not clip.in_helper and _caught(flow, clip):
                continue
            scaler_steps, proof = [], None
            for e in step.of(EventKind.SCALER_STEP):
                if not model.scaler_enabled(e.receiver, step.scope):
                    continue
                found = site_path(flow, clip, e) or site_path(flow, e, clip)
                if found is not None:
                    scaler_steps.append(e)
                    proof = found if proof is None or found is PROVED else proof
            if scaler_steps:
                scaler = scaler_steps[0].receiver
                yield Breach(CLIP_RAISES_NONFINITE, clip, step, scaler, flow, related=tuple(scaler_steps), proof=proof, node=arg)


def _caught(flow, clip: Event) -> bool:
    """Is the clip in a `try` whose handler catches the RuntimeError it raises?"""
    graph = flow.flow.graph
    node = flow.node(clip)
    if node is None:
        return False
    for target, atom in graph.succ[node]:
        if atom is not EXCEPTION:
            continue
        handler = graph.statements[target]
        if not isinstance(handler, cst.ExceptHandler):
            continue
        if handler.type is None:
            return True
        caught = [handler.type] if not isinstance(handler.type, cst.Tuple) else [e.value for e in handler.type.elements]
        if any((dotted_name(t) or "").split(".")[-1] in _CAUGHT for t in caught):
            return True
    return False
