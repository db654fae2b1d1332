"""What the helpers a training step calls do to gradients: read or clip them, or differentiate with
`torch.autograd.grad(..., create_graph=True)` (a gradient penalty).

The analysis inlines a helper's protocol events where it is called, but not a helper with a loop of its own
(`for p in model.parameters(): p.grad.data.mul_(...)` is a loop). The conversion needs to know about those:
hand-written clipping in `clip_gradients(model, t)` reads gradients that a GradScaler leaves scaled (so
`scaler.unscale_` must come before the call), and a gradient penalty computed in a helper needs the same
hand-written pattern as the inline form. This query follows the calls of the file's own functions and methods
(`analysis.steps.callee_scope`), a few levels deep, and looks at their events and their `.grad` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import libcst as cst

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.steps import callee_scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.walk import visit_read_only

MAX_DEPTH = 4


@dataclass(frozen=True)
class HelperEffect:
    reads_gradients: Optional[str] = None  # the code that reads or clips `.grad` in the helper (or its helpers)
    gradient_penalty: Optional[str] = None  # the `torch.autograd.grad(..., create_graph=True)` it runs
    where: str = ""  # the helper that holds it


class HelperEffects:
    """Memoised per file: what each of its functions does to gradients, through the functions it calls."""

    def __init__(self, model: FileModel) -> None:
        self.model = model
        self._memo: Dict[int, HelperEffect] = {}

    def of_call(self, event: Event) -> HelperEffect:
        """The effect of the helper a CALL event calls (nothing when it is not a function of this file)."""
        callee = callee_scope(self.model, event)
        if callee is None:
            return HelperEffect()
        return self.of_scope(callee, set())

    def of_scope(self, scope: Scope, active: Set[int]) -> HelperEffect:
        key = id(scope.node)
        if key in self._memo:
            return self._memo[key]
        if key in active or len(active) >= MAX_DEPTH:
            return HelperEffect()
        active = active | {key}
        reads: Optional[str] = None
        penalty: Optional[str] = None
        name = scope.name or ""
        for event in scope.events:
            if event.kind in (EventKind.CLIP, EventKind.GRAD_READ) and reads is None:
                reads = code_of(event.call)
            elif event.kind is EventKind.AUTOGRAD_GRAD and penalty is None and creates_graph(event.call):
                penalty = code_of(event.call)
            elif event.kind is EventKind.CALL:
                callee = callee_scope(self.model, event)
                if callee is not None and callee is not scope:
                    inner = self.of_scope(callee, active)
                    if reads is None and inner.reads_gradients:
                        reads, name = inner.reads_gradients, inner.where
                    if penalty is None and inner.gradient_penalty:
                        penalty, name = inner.gradient_penalty, inner.where
        if reads is None:
            reads = _grad_read(scope)
        effect = HelperEffect(_short(reads), _short(penalty), name)
        self._memo[key] = effect
        return effect


def creates_graph(call: cst.Call) -> bool:
    value = next((a.value for a in call.args if a.keyword and a.keyword.value == "create_graph"), None)
    return value is not None and not (isinstance(value, cst.Name) and value.value == "False")


def _grad_read(scope: Scope) -> Optional[str]:
    """A read of some `x.grad` in the function's own body (not `torch.autograd`, not an assignment target)."""
    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return None
    found: List[str] = []

    class Reads(cst.CSTVisitor):
        def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
            return inner is node

        def visit_AssignTarget(self, target: cst.AssignTarget) -> bool:
            return not isinstance(target.target, cst.Attribute)  # `p.grad = None` clears; it does not read

        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            if attribute.attr.value == "grad" and not (dotted_name(attribute.value) or "").endswith("autograd"):
                found.append(code_of(attribute))

    visit_read_only(node, Reads())
    return found[0] if found else None


def _short(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
